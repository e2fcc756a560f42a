"""Tests for entmtp_vllm/heads/verifier.py: the fingerprint survives casts and padding, tells other
weights apart, reads the same from a folder (single file, sharded, tied or not) as from memory,
and a mismatch is one line naming both models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads import HydraHeads
from entmtp_vllm.heads.checkpoint import read_heads_config, save_heads
from entmtp_vllm.heads.verifier import (
    TOLERANCE,
    ModelIdentity,
    VerifierRecord,
    check_folder,
    check_loaded,
    check_model,
    model_name,
    probe_indices,
    probe_tensors,
    record_in,
    record_of,
    record_of_folder,
    relative_difference,
)

VOCAB, HIDDEN, PAD = 1000, 96, 24
MODEL = ModelIdentity("tiny-a", "Qwen2ForCausalLM", "qwen2", VOCAB, HIDDEN)
OTHER = ModelIdentity("tiny-b", "LlamaForCausalLM", "llama", VOCAB, HIDDEN)


def weights(seed: int, scale: float = 0.05) -> torch.Tensor:
    """A [VOCAB, HIDDEN] float32 matrix at an embedding's scale."""
    return torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(seed)) * scale


def padded(matrix: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`matrix` in `dtype` with PAD rows past the vocabulary, as vLLM holds it."""
    return torch.cat([matrix, torch.full((PAD, matrix.shape[1]), 7.0)]).to(dtype)


def record(embed: torch.Tensor, lm_head: torch.Tensor) -> VerifierRecord:
    return record_of(MODEL, lm_head is embed, probe_tensors(embed, lm_head))


def test_probe_points_are_bin_centres_inside_the_sizes() -> None:
    assert probe_indices(1000, 4) == (125, 375, 625, 875)
    assert probe_indices(3, 8) == (0, 1, 2)
    rows = probe_indices(49152, 16)
    assert len(set(rows)) == 16 and 0 < min(rows) and max(rows) < 49152


@pytest.mark.parametrize("dtype, bound", [(torch.float32, 0.0), (torch.bfloat16, TOLERANCE / 4), (torch.float16, TOLERANCE / 20)])
def test_the_same_weights_match_in_any_dtype_and_padding(dtype, bound) -> None:
    embed, head = weights(0), weights(1)
    expected = record(embed, head)
    probe = probe_tensors(padded(embed, dtype), padded(head, dtype))
    difference = check_model(expected, MODEL, probe, "h")
    assert difference <= bound + 1e-6
    assert relative_difference(expected.fingerprint, probe(expected.fingerprint.rows, expected.fingerprint.columns)) == difference


def test_other_weights_and_a_reinit_of_the_same_shape_are_refused_naming_both_models() -> None:
    embed, head = weights(0), weights(1)
    expected = record(embed, head)
    for other_embed, other_head in ((weights(2), weights(3)), (weights(4, scale=0.05), head), (embed, weights(5))):
        probe = probe_tensors(other_embed.bfloat16(), other_head.bfloat16())
        assert relative_difference(expected.fingerprint, probe(expected.fingerprint.rows, expected.fingerprint.columns)) > 0.5
        with pytest.raises(EntMTPError) as info:
            check_model(expected, OTHER, probe, "my-heads")
        message = str(info.value)
        assert "\n" not in message and "tiny-a (Qwen2ForCausalLM)" in message and "tiny-b (LlamaForCausalLM)" in message
        assert "my-heads" in message and "fingerprint" in message


def test_other_sizes_are_refused_naming_both_models() -> None:
    expected = record(weights(0), weights(1))
    small = ModelIdentity("small", "LlamaForCausalLM", "llama", VOCAB, 64)
    with pytest.raises(EntMTPError, match=r"^heads h draft for tiny-a \(Qwen2ForCausalLM, vocabulary 1000, hidden size 96\), "
                                          r"not for small \(LlamaForCausalLM, vocabulary 1000, hidden size 64\)"):
        check_model(expected, small, probe_tensors(torch.zeros(VOCAB, 64), torch.zeros(VOCAB, 64)), "h")


def test_tied_weights_probe_the_embedding_as_the_lm_head() -> None:
    embed = weights(0)
    tied = record(embed, embed)
    assert tied.tied and tied.fingerprint.lm_head == tied.fingerprint.embed_tokens
    check_model(tied, MODEL, probe_tensors(padded(embed, torch.bfloat16), padded(embed, torch.bfloat16)), "h")
    with pytest.raises(EntMTPError, match="fingerprint"):  # an untied model with the same embedding
        check_model(tied, MODEL, probe_tensors(embed, weights(1)), "h")


def _config(tied: bool, dtype: str = "float32") -> dict:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": VOCAB, "hidden_size": HIDDEN,
            "tie_word_embeddings": tied, "torch_dtype": dtype}


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_folder_reads_as_its_tensors_in_memory(tmp_path: Path, tied: bool, dtype: torch.dtype) -> None:
    embed, head = weights(0).to(dtype), weights(1).to(dtype)
    tensors = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(HIDDEN, dtype=dtype)}
    if not tied:
        tensors["lm_head.weight"] = head
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(_config(tied, str(dtype).removeprefix("torch."))))
    from_folder = record_of_folder(tmp_path, "tiny-a")
    in_memory = record_of(MODEL, tied, probe_tensors(padded(embed, dtype), padded(embed if tied else head, dtype)))
    assert from_folder == in_memory
    assert VerifierRecord.from_json(json.loads(json.dumps(from_folder.to_json())), "x") == from_folder
    assert check_folder({"verifier": from_folder.to_json()}, tmp_path, "h") is None


def test_a_sharded_folder_reads_through_its_index(tmp_path: Path) -> None:
    embed, head = weights(0), weights(1)
    save_file({"model.embed_tokens.weight": embed}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"lm_head.weight": head, "model.norm.weight": torch.ones(HIDDEN)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors", "model.norm.weight": "model-00002-of-00002.safetensors"}}))
    (tmp_path / "config.json").write_text(json.dumps(_config(tied=False)))
    assert record_of_folder(tmp_path, "tiny-a") == record(embed, head)


def test_a_tied_config_reads_the_embedding_even_where_an_lm_head_is_stored(tmp_path: Path) -> None:
    embed = weights(0)
    save_file({"model.embed_tokens.weight": embed, "lm_head.weight": weights(1)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(_config(tied=True)))
    assert record_of_folder(tmp_path, "tiny-a") == record(embed, embed)
    (tmp_path / "config.json").write_text(json.dumps(_config(tied=False)))
    save_file({"model.embed_tokens.weight": embed}, str(tmp_path / "model.safetensors"))
    with pytest.raises(EntMTPError, match="unties the LM head"):
        record_of_folder(tmp_path)


def test_the_record_travels_in_the_heads_config(tmp_path: Path) -> None:
    expected = record(weights(0), weights(1))
    save_heads(HydraHeads(HIDDEN, VOCAB, num_heads=1), tmp_path / "with", verifier=expected)
    config = read_heads_config(tmp_path / "with")
    assert record_in(config, "h") == expected
    text = (tmp_path / "with" / "config.json").read_text()
    assert f'"rows": {json.dumps(list(expected.fingerprint.rows))}' in text  # one line per list of numbers
    assert check_loaded(config, MODEL, padded(weights(0), torch.bfloat16), padded(weights(1), torch.bfloat16), "h") is None
    save_heads(HydraHeads(HIDDEN, VOCAB, num_heads=1), tmp_path / "without", {"base_model": "tiny-a"})
    warning = check_loaded(read_heads_config(tmp_path / "without"), MODEL, weights(0), weights(1), "old-heads")
    assert warning is not None and "\n" not in warning and "old-heads" in warning and "'verifier'" in warning
    with pytest.raises(EntMTPError, match="malformed"):
        record_in({"verifier": {"name": "x"}}, "h")


def test_model_names(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2-0.5B" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    assert model_name(snapshot) == "Qwen/Qwen2-0.5B"
    assert model_name(tmp_path / "hub") == "hub"
    assert model_name("org/name") == "org/name"


@pytest.mark.parametrize("change", [
    lambda f: f.update(rows=[VOCAB] + f["rows"][1:]),
    lambda f: f.update(columns=f["columns"][:-1]),
    lambda f: f.update(lm_head=f["lm_head"][:-1]),
])
def test_a_record_with_points_outside_the_model_or_values_missing_is_malformed(change) -> None:
    data = json.loads(json.dumps(record(weights(0), weights(1)).to_json()))
    change(data["fingerprint"])
    with pytest.raises(EntMTPError, match="malformed"):
        VerifierRecord.from_json(data, "h")
