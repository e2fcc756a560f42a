"""The embedded model: resolution, cache validation, and (slow) preparation and generation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from entmtp_vllm.config import EMBEDDED_MODEL
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.model_store import (
    REQUIRED_FILES,
    prepare_embedded_model,
    prepared_model_problem,
    resolve_model,
)


def test_missing_and_incomplete_folders_are_reported(tmp_path: Path) -> None:
    assert prepared_model_problem(tmp_path / "absent") == "not prepared yet"
    (tmp_path / "config.json").write_text("{}")
    assert "missing" in prepared_model_problem(tmp_path)


def test_corrupt_manifest_is_reported(tmp_path: Path) -> None:
    for name in REQUIRED_FILES:
        (tmp_path / name).write_text("{}")
    (tmp_path / "entmtp_prepared.json").write_text("not json")
    assert prepared_model_problem(tmp_path).startswith("corrupt")


def test_truncated_weights_are_reported(tmp_path: Path) -> None:
    for name in REQUIRED_FILES:
        (tmp_path / name).write_text("{}")
    (tmp_path / "entmtp_prepared.json").write_text(json.dumps({"safetensors_size": 10**9}))
    assert "wrong size" in prepared_model_problem(tmp_path)


def test_resolve_model_rejects_unknown_paths(tmp_path: Path) -> None:
    with pytest.raises(EntMTPError, match="neither an existing folder nor a hub id"):
        resolve_model("./no/such/model")
    with pytest.raises(EntMTPError, match="no config.json"):
        resolve_model(str(tmp_path))
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_resolve_without_prepare_gives_a_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(EMBEDDED_MODEL.cache_env, str(tmp_path))
    with pytest.raises(EntMTPError, match="entmtp model prepare"):
        resolve_model(None, prepare=False)


def test_model_path_command_on_empty_cache(monkeypatch, tmp_path, capsys) -> None:
    from entmtp_vllm.cli.main import main

    monkeypatch.setenv(EMBEDDED_MODEL.cache_env, str(tmp_path))
    assert main(["model", "path"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("entmtp: error:") and err.count("\n") == 1


@pytest.mark.slow
def test_prepare_is_idempotent_and_repairs_a_corrupt_cache(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(EMBEDDED_MODEL.cache_env, str(tmp_path))
    folder = prepare_embedded_model()
    assert prepared_model_problem(folder) is None
    stamp = (folder / "entmtp_prepared.json").stat().st_mtime_ns
    assert prepare_embedded_model() == folder  # valid copy: reused, not rebuilt
    assert (folder / "entmtp_prepared.json").stat().st_mtime_ns == stamp
    # Corrupt the weights: the next prepare notices and rebuilds.
    with (folder / "model.safetensors").open("r+b") as handle:
        handle.truncate(1000)
    assert "wrong size" in prepared_model_problem(folder)
    assert prepared_model_problem(prepare_embedded_model()) is None
    shutil.rmtree(tmp_path)


@pytest.mark.slow
def test_embedded_model_generates_coherent_text() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from entmtp_vllm.prompts import chat_text

    path = resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert model.config.hidden_size == 576 and model.config.vocab_size == 49152
    text = chat_text(tokenizer, "What is the capital of France? Answer in one sentence.")
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = model.generate(ids, max_new_tokens=20, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
