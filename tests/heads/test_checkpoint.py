"""Tests for entmtp_vllm/heads/checkpoint.py: our format and the published Hydra layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads import HydraHeads, MedusaHeads, PrefixLayerConfig
from entmtp_vllm.heads.checkpoint import (
    default_heads_path,
    heads_config_path,
    load_base_embeddings,
    load_heads,
    load_hydra_reference_checkpoint,
    read_heads_config,
    save_heads,
)

from conftest import HIDDEN, VOCAB, randomize

BASE = {"hidden_size": HIDDEN, "vocab_size": VOCAB}
PREFIX = PrefixLayerConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=4, intermediate_size=24)


@pytest.mark.parametrize(
    "heads",
    [
        lambda: HydraHeads(HIDDEN, VOCAB, num_heads=3, num_layers=2),
        lambda: HydraHeads(HIDDEN, VOCAB, num_heads=2, num_layers=3, share_layers=True, own_lm_head=True, lm_head_bias=True),
        lambda: HydraHeads(HIDDEN, VOCAB, num_heads=2, prefix_layer=PREFIX),
        lambda: MedusaHeads(HIDDEN, VOCAB, num_heads=3, num_layers=2),
    ],
)
def test_round_trip(tmp_path: Path, base_weights, heads) -> None:
    _, lm_head = base_weights
    heads = randomize(heads())
    save_heads(heads, tmp_path / "h", {"base_model": "tiny", "training": {"records": 3}}, dtype=torch.float32)
    loaded = load_heads(tmp_path / "h", BASE)
    assert type(loaded) is type(heads)
    assert loaded.config_dict() == heads.config_dict()
    assert loaded.meta["base_model"] == "tiny" and loaded.meta["training"] == {"records": 3}
    assert "created" in loaded.meta
    h, path = torch.randn(2, HIDDEN), torch.randn(2, heads.num_heads, HIDDEN)
    for d in range(1, heads.num_heads + 1):
        torch.testing.assert_close(loaded.head_logits(d, h, path, lm_head), heads.head_logits(d, h, path, lm_head))


def test_fp16_save_keeps_values_close_and_lm_head_is_not_stored(tmp_path: Path) -> None:
    heads = randomize(HydraHeads(HIDDEN, VOCAB, num_heads=2))
    save_heads(heads, tmp_path)
    from safetensors.torch import load_file

    stored = load_file(str(tmp_path / "heads.safetensors"))
    assert all(v.dtype == torch.float16 for v in stored.values())
    assert not any("lm_head" in k for k in stored)
    loaded = load_heads(tmp_path, BASE)
    for (k, a), b in zip(heads.state_dict().items(), loaded.state_dict().values()):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)


def test_int8_save_halves_the_size_and_loads_within_half_a_step_per_row(tmp_path: Path, base_weights) -> None:
    from safetensors.torch import load_file

    _, lm_head = base_weights
    heads = randomize(HydraHeads(HIDDEN, VOCAB, num_heads=2, num_layers=2, prefix_layer=PREFIX))
    save_heads(heads, tmp_path / "fp16")
    save_heads(heads, tmp_path / "int8", dtype="int8")
    assert read_heads_config(tmp_path / "int8")["dtype"] == "int8"
    stored = load_file(str(tmp_path / "int8" / "heads.safetensors"))
    matrices = [k for k, v in heads.state_dict().items() if v.dim() == 2]
    assert matrices and all(stored[k].dtype == torch.int8 and stored[k + ".int8_scale"].dtype == torch.float32 for k in matrices)
    assert all(v.dtype == torch.float16 for k, v in stored.items() if k not in matrices and not k.endswith(".int8_scale"))
    fp16_bytes = sum(v.numel() * 2 for v in heads.state_dict().values())
    int8_bytes = sum(v.numel() * v.element_size() for v in stored.values())
    assert int8_bytes < 0.6 * fp16_bytes
    loaded = load_heads(tmp_path / "int8", BASE)
    for key, value in heads.state_dict().items():
        got = loaded.state_dict()[key]
        if key in matrices:  # symmetric rounding: at most half a quantization step per row
            step = value.abs().amax(dim=1, keepdim=True) / 127
            assert ((got - value).abs() <= step / 2 + 1e-6).all(), key
        else:
            torch.testing.assert_close(got, value, atol=2e-3, rtol=2e-3)
    h, path = torch.randn(2, HIDDEN), torch.randn(2, heads.num_heads, HIDDEN)
    for d in (1, 2):
        a, b = loaded.head_logits(d, h, path, lm_head), heads.head_logits(d, h, path, lm_head)
        assert (a - b).abs().max() < 0.05 * b.abs().max()


def test_int8_weights_without_their_scale_and_unknown_dtypes_are_user_errors(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    heads = HydraHeads(HIDDEN, VOCAB, num_heads=1)
    with pytest.raises(EntMTPError, match="int4"):
        save_heads(heads, tmp_path, dtype="int4")
    save_heads(heads, tmp_path, dtype="int8")
    stored = load_file(str(tmp_path / "heads.safetensors"))
    save_file({k: v for k, v in stored.items() if not k.endswith(".int8_scale")}, str(tmp_path / "heads.safetensors"))
    with pytest.raises(EntMTPError, match="int8_scale"):
        load_heads(tmp_path, BASE)


@pytest.mark.parametrize("field,value,message", [("hidden_size", HIDDEN + 1, "hidden size"), ("vocab_size", VOCAB * 2, "vocabulary")])
def test_mismatch_with_base_model_is_a_user_error(tmp_path: Path, field, value, message) -> None:
    save_heads(HydraHeads(HIDDEN, VOCAB, num_heads=1), tmp_path)
    with pytest.raises(EntMTPError, match=message):
        load_heads(tmp_path, {**BASE, field: value})


def test_base_config_object_is_accepted(tmp_path: Path) -> None:
    class Config:
        hidden_size, vocab_size = HIDDEN, VOCAB

    save_heads(MedusaHeads(HIDDEN, VOCAB, num_heads=1), tmp_path)
    assert load_heads(tmp_path, Config()).num_heads == 1


def test_bad_folders(tmp_path: Path) -> None:
    with pytest.raises(EntMTPError, match="not a heads folder"):
        load_heads(tmp_path, BASE)
    save_heads(HydraHeads(HIDDEN, VOCAB, num_heads=1), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "version": 99}))
    with pytest.raises(EntMTPError, match="version-1"):
        read_heads_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_heads": 2}))
    with pytest.raises(EntMTPError, match="does not match"):
        load_heads(tmp_path, BASE)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(EntMTPError, match="not valid JSON"):
        load_heads(tmp_path, BASE)


def test_a_folder_saved_with_heads_json_is_still_read_and_a_new_save_replaces_it(tmp_path: Path) -> None:
    heads = randomize(MedusaHeads(HIDDEN, VOCAB, num_heads=2))
    save_heads(heads, tmp_path, {"base_model": "tiny"}, dtype=torch.float32)
    (tmp_path / "config.json").rename(tmp_path / "heads.json")
    assert heads_config_path(tmp_path).name == "heads.json"
    assert load_heads(tmp_path, BASE).meta["base_model"] == "tiny" and "verifier" not in read_heads_config(tmp_path)
    save_heads(heads, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "heads.safetensors"]


def test_the_shipped_heads_name_the_model_they_draft_for() -> None:
    for kind in ("hydra", "medusa"):
        config = read_heads_config(default_heads_path(kind))
        assert heads_config_path(default_heads_path(kind)).name == "config.json"
        verifier = config["verifier"]
        assert (verifier["name"], verifier["architecture"], verifier["tied_embeddings"]) == (
            "SmolLM2-135M-Instruct", "LlamaForCausalLM", True)
        assert len(verifier["fingerprint"]["rows"]) == 16 and len(verifier["fingerprint"]["embed_tokens"][0]) == 8
    assert read_heads_config(default_heads_path("hydra"))["draft_vocab_size"] == 8192


def test_default_heads_path_names_the_shipped_folders() -> None:
    assert default_heads_path().name == "smollm2-135m-hydra"
    assert default_heads_path("medusa").name == "smollm2-135m-medusa"
    with pytest.raises(EntMTPError):
        default_heads_path("eagle")


def test_load_base_embeddings_tied_and_untied(tmp_path: Path) -> None:
    embed = torch.randn(VOCAB, HIDDEN)
    save_file({"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(HIDDEN)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    e, lm, cfg = load_base_embeddings(tmp_path)
    assert torch.equal(e, embed) and lm is e and cfg == BASE
    head = torch.randn(VOCAB, HIDDEN)
    save_file({"model.embed_tokens.weight": embed, "lm_head.weight": head}, str(tmp_path / "model.safetensors"))
    assert torch.equal(load_base_embeddings(tmp_path)[1], head)


# ----------------------------------------------------------------- published Hydra layout


def reference_state(num_heads: int, num_layers: int, grounded: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """A state dict in the layout of the reference `HydraMLP` module, including the
    repeated (shared) blocks, which appear under every index with the same values."""
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, generator=gen) * 0.2  # noqa: E731
    state = {}
    for i in range(num_heads):
        first = 0
        if grounded:
            width = HIDDEN * (i + 2)
            state[f"hydra_mlp.{i}.0.linear.weight"] = rnd(HIDDEN, width)
            state[f"hydra_mlp.{i}.0.linear.bias"] = rnd(HIDDEN)
            state[f"hydra_mlp.{i}.0.res_connection.weight"] = rnd(HIDDEN, width)
            state[f"hydra_mlp.{i}.0.res_connection.bias"] = rnd(HIDDEN)
            first = 1
        shared_w, shared_b = rnd(HIDDEN, HIDDEN), rnd(HIDDEN)
        for j in range(first, num_layers):
            state[f"hydra_mlp.{i}.{j}.linear.weight"] = shared_w.clone()
            state[f"hydra_mlp.{i}.{j}.linear.bias"] = shared_b.clone()
        state[f"hydra_lm_head.{i}.weight"] = rnd(VOCAB, HIDDEN)
        state[f"hydra_lm_head.{i}.bias"] = rnd(VOCAB)
    return state


def reference_logits(state, i: int, num_layers: int, grounded: bool, h: torch.Tensor, path_emb: torch.Tensor) -> torch.Tensor:
    """Independent plain-torch forward of reference head i (0-based)."""
    if grounded:
        x = torch.cat([h] + [path_emb[:, t] for t in range(i + 1)], dim=-1)
        y = x @ state[f"hydra_mlp.{i}.0.res_connection.weight"].T + state[f"hydra_mlp.{i}.0.res_connection.bias"]
        y = y + F.silu(x @ state[f"hydra_mlp.{i}.0.linear.weight"].T + state[f"hydra_mlp.{i}.0.linear.bias"])
        blocks = range(1, num_layers)
    else:
        y, blocks = h, range(num_layers)
    for j in blocks:
        y = y + F.silu(y @ state[f"hydra_mlp.{i}.{j}.linear.weight"].T + state[f"hydra_mlp.{i}.{j}.linear.bias"])
    return y @ state[f"hydra_lm_head.{i}.weight"].T + state[f"hydra_lm_head.{i}.bias"]


def write_reference(folder: Path, state, num_heads: int, num_layers: int, grounded: bool, arch: str = "mlp", prefix: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "hydra_num_heads": num_heads, "hydra_num_layers": num_layers, "hydra_head_arch": arch,
        "grounded_heads": grounded, "base_model_name_or_path": "lmsys/vicuna-7b-v1.3", "hidden_state_offset": 0,
    }))
    torch.save({prefix + k: v for k, v in state.items()}, folder / "hydra_lm_head.pt")


@pytest.mark.parametrize("num_layers", [1, 3])
@pytest.mark.parametrize("prefix", ["", "hydra_head."])
def test_reference_grounded_checkpoint_reproduces_logits(tmp_path: Path, base_weights, num_layers, prefix) -> None:
    embed, _ = base_weights
    state = reference_state(3, num_layers, grounded=True)
    write_reference(tmp_path, state, 3, num_layers, grounded=True, prefix=prefix)
    heads = load_hydra_reference_checkpoint(tmp_path, BASE)
    assert isinstance(heads, HydraHeads) and heads.share_layers and heads.own_lm_head and heads.lm_head_bias
    if num_layers > 1:
        assert len(heads.stacks[0].blocks) == 1 and heads.stacks[0].count == num_layers - 1
    h = torch.randn(4, HIDDEN)
    path = embed[torch.randint(VOCAB, (4, 3))]
    for i in range(3):
        expected = reference_logits(state, i, num_layers, True, h, path)
        torch.testing.assert_close(heads.head_logits(i + 1, h, path), expected, atol=1e-4, rtol=1e-4)


def test_reference_ungrounded_checkpoint_loads_as_medusa(tmp_path: Path) -> None:
    state = reference_state(2, 2, grounded=False)
    write_reference(tmp_path, state, 2, 2, grounded=False)
    heads = load_hydra_reference_checkpoint(tmp_path)
    assert isinstance(heads, MedusaHeads)
    h = torch.randn(3, HIDDEN)
    for i in range(2):
        torch.testing.assert_close(heads.head_logits(i + 1, h, None), reference_logits(state, i, 2, False, h, None), atol=1e-4, rtol=1e-4)


def test_reference_checkpoint_as_safetensors(tmp_path: Path) -> None:
    state = reference_state(1, 1, grounded=True)
    write_reference(tmp_path, state, 1, 1, grounded=True)
    (tmp_path / "hydra_lm_head.pt").unlink()
    save_file(state, str(tmp_path / "hydra_lm_head.safetensors"))
    assert load_hydra_reference_checkpoint(tmp_path).num_heads == 1


def test_reference_checkpoint_errors(tmp_path: Path) -> None:
    state = reference_state(2, 3, grounded=True)
    write_reference(tmp_path / "arch", state, 2, 3, grounded=True, arch="prefix-mlp")
    with pytest.raises(EntMTPError, match="not supported"):
        load_hydra_reference_checkpoint(tmp_path / "arch")
    write_reference(tmp_path / "vocab", state, 2, 3, grounded=True)
    with pytest.raises(EntMTPError, match="vocabulary"):
        load_hydra_reference_checkpoint(tmp_path / "vocab", {"hidden_size": HIDDEN, "vocab_size": VOCAB + 1})
    unshared = dict(state)
    unshared["hydra_mlp.0.2.linear.weight"] = unshared["hydra_mlp.0.2.linear.weight"] + 1
    write_reference(tmp_path / "unshared", unshared, 2, 3, grounded=True)
    with pytest.raises(EntMTPError, match="shares them"):
        load_hydra_reference_checkpoint(tmp_path / "unshared")
    missing = {k: v for k, v in state.items() if k != "hydra_mlp.1.0.res_connection.bias"}
    write_reference(tmp_path / "missing", missing, 2, 3, grounded=True)
    with pytest.raises(EntMTPError, match="missing"):
        load_hydra_reference_checkpoint(tmp_path / "missing")
    with pytest.raises(EntMTPError, match="config.json"):
        load_hydra_reference_checkpoint(tmp_path / "nothing")
    with pytest.raises(EntMTPError, match="published Hydra layout"):
        load_heads(tmp_path / "arch", BASE)
