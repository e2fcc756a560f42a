"""Tests for entmtp_vllm/heads/medusa.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from entmtp_vllm.heads import MedusaHeads, PrefixLayerConfig

from conftest import HIDDEN, VOCAB, randomize


def test_fresh_medusa_heads_reproduce_the_base_lm_head(base_weights) -> None:
    _, lm_head = base_weights
    heads = MedusaHeads(HIDDEN, VOCAB, num_heads=3, num_layers=2)
    h = torch.randn(4, HIDDEN)
    for d in (1, 2, 3):
        torch.testing.assert_close(heads.head_logits(d, h, torch.zeros(4, 3, HIDDEN), lm_head), h @ lm_head.T)


def test_medusa_heads_ignore_the_path(base_weights) -> None:
    _, lm_head = base_weights
    heads = randomize(MedusaHeads(HIDDEN, VOCAB, num_heads=2))
    assert heads.uses_path is False
    h = torch.randn(3, HIDDEN)
    a = heads.head_logits(2, h, torch.randn(3, 2, HIDDEN), lm_head)
    b = heads.head_logits(2, h, torch.randn(3, 2, HIDDEN), lm_head)
    torch.testing.assert_close(a, b)
    block = heads.stacks[1].blocks[0]
    torch.testing.assert_close(a, (h + F.silu(block.linear(h))) @ lm_head.T)


def test_heads_are_independent() -> None:
    heads = randomize(MedusaHeads(HIDDEN, VOCAB, num_heads=2, num_layers=1))
    h = torch.randn(2, HIDDEN)
    before = heads.head_hidden(2, h)
    with torch.no_grad():
        heads.stacks[0].blocks[0].linear.weight.add_(1.0)
    torch.testing.assert_close(heads.head_hidden(2, h), before)


def test_medusa_has_no_prefix_layer() -> None:
    cfg = PrefixLayerConfig(num_attention_heads=2, num_key_value_heads=1, head_dim=8, intermediate_size=8)
    with pytest.raises(ValueError):
        MedusaHeads(HIDDEN, VOCAB, prefix_layer=cfg)
