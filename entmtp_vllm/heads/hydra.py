"""Hydra draft heads: sequentially dependent ("grounded") heads.

Head d (1-based) drafts the token at offset d+1 after the last accepted position
t. Its input is the base model's last hidden state h_t (post final norm)
concatenated with the embeddings of the d tokens already on its path: the root
token x_{t+1} (sampled from the base model) and the drafted x_{t+2} .. x_{t+d}.

    head d:  [h_t ; e(x_{t+1}) ; ... ; e(x_{t+d})]   ((d+1)·H features)
             → ConditionedResBlock (projection + zero-init SiLU branch) → H
             → (num_layers - 1) ResBlocks (zero-init, residual)
             → LM head: the base model's (frozen, shared, not stored) or the head's own

With `prefix` set, the heads are Hydra++: one extra decoder layer (`PrefixLayer`)
runs over the base hidden states with its own KV cache, and its output replaces
h_t in the heads' input. The drafter feeds it (`TreeDrafter.observe`).

`share_layers=True` reproduces the reference implementation, where
`[ResBlock(h)] * (n - 1)` repeats one module: one block applied n-1 times.
"""

from __future__ import annotations

import torch
from torch import nn

from entmtp_vllm.heads.blocks import ConditionedResBlock, PrefixLayer, PrefixLayerConfig, ResBlock


class HeadStack(nn.Module):
    """(num_layers - 1) residual blocks, own weights or one shared block applied repeatedly."""

    def __init__(self, hidden_size: int, count: int, share: bool) -> None:
        super().__init__()
        self.count = count
        self.share = share
        self.blocks = nn.ModuleList([ResBlock(hidden_size) for _ in range(1 if (share and count) else count)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.share:
            for _ in range(self.count):
                x = self.blocks[0](x)
        else:
            for block in self.blocks:
                x = block(x)
        return x


def _lm_heads(num_heads: int, hidden_size: int, vocab_size: int, own: bool, bias: bool) -> nn.ModuleList | None:
    if not own:
        return None
    return nn.ModuleList([nn.Linear(hidden_size, vocab_size, bias=bias) for _ in range(num_heads)])


class DraftHeads(nn.Module):
    """What every head kind shares: sizes, the LM head and the drafting interface.

    `head_logits(depth, hidden, path_token_embeddings, lm_head_weight=None)`:
    hidden [B, H] (the conditioned base hidden state), path_token_embeddings
    [B, >=depth, H] (root token first) → logits [B, V] of head `depth` (1-based).
    Without an own LM head, `lm_head_weight` [V, H] (the base model's) is required.
    """

    kind = "base"
    uses_path = True
    """Whether a head's output depends on the drafted tokens of its path (Hydra) or
    only on the depth (Medusa); the drafter caches by path or by depth accordingly."""

    def __init__(self, hidden_size: int, vocab_size: int, num_heads: int, num_layers: int,
                 own_lm_head: bool, lm_head_bias: bool, share_layers: bool) -> None:
        super().__init__()
        if num_heads < 1 or num_layers < 1:
            raise ValueError("need at least one head and one layer")
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.share_layers = share_layers
        self.lm_heads = _lm_heads(num_heads, hidden_size, vocab_size, own_lm_head, lm_head_bias)
        self.prefix: PrefixLayer | None = None

    @property
    def own_lm_head(self) -> bool:
        return self.lm_heads is not None

    @property
    def lm_head_bias(self) -> bool:
        return self.lm_heads is not None and self.lm_heads[0].bias is not None

    def init_lm_heads_from(self, weight: torch.Tensor) -> None:
        """Copy the base LM head into the own LM heads (the reference initialisation)."""
        if self.lm_heads is not None:
            with torch.no_grad():
                for head in self.lm_heads:
                    head.weight.copy_(weight)
                    if head.bias is not None:
                        head.bias.zero_()

    def config_dict(self) -> dict:
        return {
            "kind": self.kind,
            "num_heads": self.num_heads,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "own_lm_head": self.own_lm_head,
            "lm_head_bias": self.lm_head_bias,
            "share_layers": self.share_layers,
            "prefix_layer": None if self.prefix is None else self.prefix.config.model_dump(),
        }

    def head_hidden(self, depth: int, hidden: torch.Tensor, path_token_embeddings: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def project(self, depth: int, head_hidden: torch.Tensor, lm_head_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of head `depth` from its hidden output."""
        if self.lm_heads is not None:
            return self.lm_heads[depth - 1](head_hidden)
        if lm_head_weight is None:
            raise ValueError("these heads share the base model's LM head: pass lm_head_weight")
        return head_hidden.to(lm_head_weight.dtype) @ lm_head_weight.T

    def head_logits(self, depth: int, hidden: torch.Tensor, path_token_embeddings: torch.Tensor,
                    lm_head_weight: torch.Tensor | None = None) -> torch.Tensor:
        if not 1 <= depth <= self.num_heads:
            raise ValueError(f"head {depth} does not exist (1..{self.num_heads})")
        return self.project(depth, self.head_hidden(depth, hidden, path_token_embeddings), lm_head_weight)

    def forward(self, hidden: torch.Tensor, path_token_embeddings: torch.Tensor) -> list[torch.Tensor]:
        """Training form: the hidden output of every head, teacher-forced.

        hidden [..., H], path_token_embeddings [..., num_heads, H] (the true tokens
        x_{t+1}..x_{t+K}); returns num_heads tensors [..., H].
        """
        return [self.head_hidden(d, hidden, path_token_embeddings) for d in range(1, self.num_heads + 1)]


class HydraHeads(DraftHeads):
    """Grounded Hydra heads (optionally Hydra++ with a prefix layer); see the module docstring."""

    kind = "hydra"
    uses_path = True

    def __init__(self, hidden_size: int, vocab_size: int, num_heads: int = 4, num_layers: int = 1,
                 own_lm_head: bool = False, lm_head_bias: bool = False, share_layers: bool = False,
                 prefix_layer: PrefixLayerConfig | None = None) -> None:
        super().__init__(hidden_size, vocab_size, num_heads, num_layers, own_lm_head, lm_head_bias, share_layers)
        self.inputs = nn.ModuleList([ConditionedResBlock((d + 1) * hidden_size, hidden_size) for d in range(1, num_heads + 1)])
        self.stacks = nn.ModuleList([HeadStack(hidden_size, num_layers - 1, share_layers) for _ in range(num_heads)])
        if prefix_layer is not None:
            self.prefix = PrefixLayer(hidden_size, prefix_layer)

    def head_hidden(self, depth: int, hidden: torch.Tensor, path_token_embeddings: torch.Tensor) -> torch.Tensor:
        if path_token_embeddings.shape[-2] < depth:
            raise ValueError(f"head {depth} needs {depth} path token embeddings, got {path_token_embeddings.shape[-2]}")
        tokens = path_token_embeddings[..., :depth, :].flatten(-2)
        x = torch.cat([hidden, tokens.to(hidden.dtype)], dim=-1)
        return self.stacks[depth - 1](self.inputs[depth - 1](x))
