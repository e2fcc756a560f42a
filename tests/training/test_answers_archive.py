"""Tests for entmtp_vllm/training/answers_archive.py: answers travel without their prompts and come
back as the same JSONL, prompts re-encoded by the function generation uses."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.prompts import Prompt
from entmtp_vllm.training.answers_archive import pack_answers, restore_answers
from entmtp_vllm.training.selfdistill_data import encode_prompt, meta_path

PROMPTS = [Prompt(f"sharegpt-{i}", "sharegpt", text) for i, text in enumerate(
    ["How do I sort a list in Python?", "Write a haiku about rain. " * 40, "What is 17 * 23?"])]


@pytest.fixture(scope="module")
def model() -> str:
    from entmtp_vllm.config import EMBEDDED_MODEL
    from entmtp_vllm.model_store import prepared_model_problem

    folder = EMBEDDED_MODEL.prepared_dir()
    if prepared_model_problem(folder) is not None:
        pytest.skip("the embedded model is not prepared (its tokenizer encodes the prompts)")
    return str(folder)


@pytest.fixture
def data(tmp_path: Path, model: str) -> Path:
    """An answers JSONL as generation writes it, with a truncated last line."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    path = tmp_path / "answers.jsonl"
    with path.open("w") as out:
        for i, prompt in enumerate(PROMPTS):
            out.write(json.dumps({"id": prompt.id, "prompt_ids": encode_prompt(tokenizer, prompt.text, 32),
                                  "answer_ids": [10 + i, 20 + i, 30 + i]}) + "\n")
        out.write('{"id": "partial", "prompt_ids": [1, 2')
    meta_path(path).write_text(json.dumps({"model": "/elsewhere/" + Path(model).name, "dtype": "float32",
                                           "max_prompt_tokens": 32, "max_answer_tokens": 256,
                                           "generator": "vLLM greedy"}))
    return path


def test_round_trip_gives_back_the_same_records(data: Path, tmp_path: Path, model: str) -> None:
    archive = tmp_path / "answers.jsonl.gz"
    assert pack_answers(data, archive) == len(PROMPTS)
    with gzip.open(archive, "rt") as handle:
        lines = [json.loads(line) for line in handle]
    assert "settings" in lines[0] and all(set(line) == {"id", "answer_ids"} for line in lines[1:])
    restored = tmp_path / "restored.jsonl"
    assert restore_answers(archive, restored, model, PROMPTS, log=lambda m: None) == len(PROMPTS)
    original = data.read_text().splitlines()[: len(PROMPTS)]
    assert restored.read_text().splitlines() == original
    assert json.loads(meta_path(restored).read_text())["model"] == model  # the local model, for generation
    assert restore_answers(archive, restored, model, PROMPTS, log=lambda m: None) == 0  # nothing twice


def test_archiving_the_same_answers_again_gives_the_same_bytes(data: Path, tmp_path: Path, monkeypatch) -> None:
    archive = tmp_path / "answers.jsonl.gz"
    pack_answers(data, archive)
    first = archive.read_bytes()
    monkeypatch.setattr(gzip.time, "time", lambda: 2e9)  # a later run: gzip's header would carry its time
    pack_answers(data, archive)
    assert archive.read_bytes() == first  # a committed archive stays unchanged in git


def test_restore_refuses_what_it_cannot_rebuild(data: Path, tmp_path: Path, model: str) -> None:
    archive = tmp_path / "answers.jsonl.gz"
    pack_answers(data, archive)
    with pytest.raises(EntMTPError, match="not in the prompt set"):
        restore_answers(archive, tmp_path / "a.jsonl", model, PROMPTS[:1], log=lambda m: None)
    with pytest.raises(EntMTPError, match="not of other-model"):
        restore_answers(archive, tmp_path / "b.jsonl", str(tmp_path / "other-model"), PROMPTS, log=lambda m: None)
    with pytest.raises(EntMTPError, match="does not exist"):
        restore_answers(tmp_path / "missing.gz", tmp_path / "c.jsonl", model, PROMPTS, log=lambda m: None)
    meta_path(data).unlink()
    with pytest.raises(EntMTPError, match="no generation settings"):
        pack_answers(data, archive)


def test_generation_reads_the_answers_file_once(tmp_path, monkeypatch):
    """Resuming finds the prompts already answered with one read of the file (it was read once
    per prompt: 5600 reads of a 6.6 MB file, a quarter of an hour before vLLM even started)."""
    from entmtp_vllm.training import selfdistill_data

    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps({"id": p.id, "prompt_ids": [1], "answer_ids": [2]}) + "\n" for p in PROMPTS))
    reads = []
    real = selfdistill_data.done_ids
    monkeypatch.setattr(selfdistill_data, "done_ids", lambda path: reads.append(path) or real(path))
    logged = []
    assert selfdistill_data.generate_answers("unused-model", PROMPTS, data, log=logged.append) == 0
    assert reads == [data] and logged == [f"{len(PROMPTS)} prompts already answered, 0 to go"]
