"""Medusa draft heads (the baseline): K independent heads on the base hidden state only.

Head d: h_t → num_layers ResBlocks (zero-init, residual) → LM head (the base
model's frozen one by default, or its own). Its top-k does not depend on the
tokens drafted before it, so one call per head serves every node of a depth.
"""

from __future__ import annotations

import torch
from torch import nn

from entmtp_vllm.heads.hydra import DraftHeads, HeadStack


class MedusaHeads(DraftHeads):
    kind = "medusa"
    uses_path = False

    def __init__(self, hidden_size: int, vocab_size: int, num_heads: int = 4, num_layers: int = 1,
                 own_lm_head: bool = False, lm_head_bias: bool = False, share_layers: bool = False,
                 prefix_layer=None) -> None:
        super().__init__(hidden_size, vocab_size, num_heads, num_layers, own_lm_head, lm_head_bias, share_layers)
        if prefix_layer is not None:
            raise ValueError("Medusa heads have no prefix layer")
        self.stacks = nn.ModuleList([HeadStack(hidden_size, num_layers, share_layers) for _ in range(num_heads)])

    def head_hidden(self, depth: int, hidden: torch.Tensor, path_token_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        return self.stacks[depth - 1](hidden)
