"""Tiny real parts for the tree-search tests (helpers; the fixtures are in conftest.py): a random Llama, random Hydra heads, a calibration.

The Llama has a small vocabulary (24 tokens) so that random heads rank the true next token
near the top often enough for trees to accept drafts (with SmolLM2's 49k vocabulary random
heads would never be right, and every what-if score would tie at 1).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from entmtp_vllm.heads import make_heads
from entmtp_vllm.heads.drafting import TreeDrafter
from tree_search.trajectories import PromptIds, build_calibration

VOCAB = 24
NUM_HEADS = 3


def tiny_llama(seed: int = 0, vocab: int = VOCAB, eos: int | None = None) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.2, eos_token_id=eos,
        bos_token_id=None, pad_token_id=None, attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = eos
    return model


def random_drafter(model, num_heads: int = NUM_HEADS, seed: int = 11, kind: str = "hydra") -> TreeDrafter:
    """Fresh heads (an identity-like map by design) with random perturbations, as the engine tests do."""
    torch.manual_seed(seed)
    heads = make_heads(kind, model.config.hidden_size, model.config.vocab_size, num_heads=num_heads)
    with torch.no_grad():
        for param in heads.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return TreeDrafter(heads.eval(), model.get_input_embeddings().weight, model.get_output_embeddings().weight)


def random_prompts(count: int, seed: int = 5, vocab: int = VOCAB) -> list[PromptIds]:
    gen = torch.Generator().manual_seed(seed)
    return [PromptIds(f"p{i}", "synthetic", torch.randint(0, vocab, (5 + 2 * i,), generator=gen).tolist())
            for i in range(count)]


def calibrate(model, drafter, prompts, max_tokens: int = 24, rank_cap: int = 16, path: Path | None = None):
    return build_calibration(
        prompts, max_tokens=max_tokens, rank_depth=drafter.max_depth, rank_cap=rank_cap,
        settings={"max_tokens": max_tokens, "prompt_ids": [p.id for p in prompts], "rank_depth": drafter.max_depth,
                  "rank_cap": rank_cap},
        load=lambda: (model, None, drafter), path=path, progress=False,
    )
