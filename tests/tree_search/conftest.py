"""Fixtures for the tree-search tests; the tiny models themselves are built in `_search_parts.py`."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from _search_parts import NUM_HEADS, calibrate, random_drafter, random_prompts, tiny_llama
from entmtp_vllm.heads import make_heads


@pytest.fixture(scope="module")
def tiny():
    """(model, drafter): a 2-layer random Llama (vocab 24) and 3 random Hydra heads."""
    torch.set_num_threads(1)
    model = tiny_llama()
    return model, random_drafter(model)


@pytest.fixture(scope="module")
def calibration(tiny):
    model, drafter = tiny
    return calibrate(model, drafter, random_prompts(3))


@pytest.fixture(scope="session")
def tiny_folders(tmp_path_factory):
    """(model folder, heads folder): a tiny random Llama with SmolLM2's tokenizer (so that real prompt
    sets can be templated and encoded) and 3 random Hydra heads, saved like real ones."""
    from entmtp_vllm.config import EMBEDDED_MODEL
    from entmtp_vllm.heads.checkpoint import save_heads
    from entmtp_vllm.model_store import prepared_model_problem

    embedded = EMBEDDED_MODEL.prepared_dir()
    if prepared_model_problem(embedded) is not None:
        pytest.skip("the embedded model is not prepared (its tokenizer is reused)")
    root = tmp_path_factory.mktemp("search_tiny")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=1,
        eos_token_id=2, pad_token_id=2, initializer_range=0.2,
    )
    LlamaForCausalLM(config).save_pretrained(root / "model")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (embedded / name).is_file():
            shutil.copy(embedded / name, root / "model" / name)
    heads = make_heads("hydra", 32, 49152, num_heads=NUM_HEADS)
    with torch.no_grad():
        for param in heads.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    save_heads(heads, root / "heads", dtype=torch.float32)
    return root / "model", root / "heads"
