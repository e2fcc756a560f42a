"""Hydra++ heads served: a windowed prefix layer over the answer (as `train-heads --prefix-layer`
makes it), each request with its own prefix-layer cache fed its accepted positions. Greedy output
equals vLLM's without speculation, drafts get accepted, and every request's cache goes with it.

The heads are the session's Hydra heads (the shipped ones, else random) with a prefix layer near
the identity (small random output projections), so drafts stay mostly right and still depend on
the layer's cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from _vllm_engine import assert_all_equal, generate_ids, greedy_params, make_llm, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def hydra_pp_folder(tmp_path_factory, model_path: str, heads_folder: str) -> str:
    import torch
    from transformers import AutoConfig

    from entmtp_vllm.heads import HydraHeads, PrefixLayerConfig
    from entmtp_vllm.heads.checkpoint import load_heads, save_heads

    config = AutoConfig.from_pretrained(model_path)
    plain = load_heads(heads_folder, config)
    prefix = PrefixLayerConfig.from_base_config(config).model_copy(update={"window": 8, "context": "answer"})
    heads = HydraHeads(config.hidden_size, config.vocab_size, num_heads=plain.num_heads, num_layers=plain.num_layers,
                       prefix_layer=prefix)
    missing, unexpected = heads.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and all(name.startswith("prefix.") for name in missing)
    torch.manual_seed(0)
    with torch.no_grad():  # zero-initialised, the layer would be the identity
        heads.prefix.o_proj.weight.normal_(0.0, 0.002)
        heads.prefix.down_proj.weight.normal_(0.0, 0.002)
    folder = save_heads(heads, tmp_path_factory.mktemp("hydra_pp"), {"base_model": "test"}, dtype=torch.float32)
    vocab = Path(heads_folder) / "draft_vocab.json"
    if vocab.is_file():
        shutil.copy(vocab, folder / vocab.name)
    return str(folder)


@pytest.fixture(scope="module")
def llm(model_path, hydra_pp_folder):
    engine = make_llm(model_path, {"heads": hydra_pp_folder, "bank": "full:2,2,1", "budget": None}, num_speculative_tokens=10)
    yield engine
    del engine


def test_hydra_pp_greedy_equals_vllm_without_speculation(llm, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    assert_all_equal(got, reference_ids)
    counters = stats(llm)
    assert counters["verified"] > 0 and counters["accepted_tokens"] > 0, counters
    # Every step's accepted positions followed each request's cache exactly (the prompt's last
    # position first), and the last request's cache holds one to two windows of positions.
    assert counters["prefix_gaps"] == 0, counters
    windows = counters["prefix_windows"]
    assert windows and all(8 <= last - first + 1 <= 16 for first, last in windows), windows
    generate_ids(llm, chat_prompts[:1], greedy_params(4))
    counters = stats(llm)
    assert len(counters["prefix_windows"]) <= 1 and counters["live_requests"] <= 1, counters
