"""Tiny random "base model" tensors for head tests (no real model)."""

from __future__ import annotations

import pytest
import torch

HIDDEN, VOCAB = 16, 40


@pytest.fixture
def base_weights() -> tuple[torch.Tensor, torch.Tensor]:
    """(embedding, LM head) [V, H], tied like SmolLM2's."""
    gen = torch.Generator().manual_seed(0)
    embed = torch.randn(VOCAB, HIDDEN, generator=gen)
    return embed, embed


def randomize(module: torch.nn.Module, seed: int = 1, scale: float = 0.3) -> torch.nn.Module:
    """Give every parameter random values (fresh heads are an identity map by design)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return module
