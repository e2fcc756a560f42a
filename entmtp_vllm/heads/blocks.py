"""Building blocks of the draft heads, in plain torch (no transformers).

- `ResBlock`: `x + SiLU(W x + b)` with W zero-initialised, so a fresh block is the
  identity (Medusa's and Hydra's residual block).
- `ConditionedResBlock`: Hydra's first block of a grounded head. Its input is wider
  than the hidden size (the base hidden state concatenated with token embeddings),
  so the residual branch is a projection: `P x + SiLU(W x + b)`, W zero-initialised.
- `PrefixLayer`: Hydra++'s extra decoder layer over the base model's hidden states
  (Llama-shaped: RMSNorm → GQA self-attention with RoPE → RMSNorm → SwiGLU MLP,
  both residual) with its own KV cache (`PrefixCache`). Its output projections are
  zero-initialised, so an untrained prefix layer is the identity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class ResBlock(nn.Module):
    """`x + SiLU(linear(x))`, identity at initialisation."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class ConditionedResBlock(nn.Module):
    """`proj(x) + SiLU(linear(x))` for an input of `in_size` features (a wide, concatenated input).

    `proj` starts as the projection onto the first `hidden_size` features (the base
    hidden state), `linear` starts at zero: an untrained grounded head reproduces the
    base model's hidden state, hence its LM head's next-token distribution.
    """

    def __init__(self, in_size: int, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_size, hidden_size)
        self.linear = nn.Linear(in_size, hidden_size)
        with torch.no_grad():
            self.proj.weight.zero_()
            self.proj.weight[:, :hidden_size].copy_(torch.eye(hidden_size))
            self.proj.bias.zero_()
            self.linear.weight.zero_()
            self.linear.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + F.silu(self.linear(x))


class PrefixLayerConfig(BaseModel):
    """Shape of the Hydra++ prefix layer (copied from the base model's config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    window: int | None = Field(default=None, ge=1)
    """Each position attends to at most this many observed positions, itself included (a
    sliding window, as the heads were trained); None: every earlier position (Hydra's)."""
    context: Literal["sequence", "answer"] = "sequence"
    """What the layer observes: every position of the sequence, prompt included (Hydra's
    training on whole conversations), or, for heads trained on the teacher cache's answer rows
    (which hold no prompt position but its last), the prompt's last position and every
    position after it."""

    @classmethod
    def from_base_config(cls, config) -> "PrefixLayerConfig":
        """From a transformers config object or a config.json dict (Llama field names)."""
        get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
        heads = int(get("num_attention_heads"))
        rope = get("rope_theta", None)
        if rope is None:  # transformers 5 keeps it in rope_parameters
            params = get("rope_parameters", None) or {}
            rope = params.get("rope_theta", 10000.0) if isinstance(params, dict) else 10000.0
        return cls(
            num_attention_heads=heads,
            num_key_value_heads=int(get("num_key_value_heads", heads) or heads),
            head_dim=int(get("head_dim", None) or int(get("hidden_size")) // heads),
            intermediate_size=int(get("intermediate_size")),
            rope_theta=float(rope),
            rms_norm_eps=float(get("rms_norm_eps", 1e-5)),
        )


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


@dataclass
class PrefixCache:
    """The prefix layer's KV cache of one sequence: keys/values [kv_heads, L, head_dim]."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    last_output: torch.Tensor | None = None
    """The layer's output at the last observed position ([H])."""
    positions: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[1]

    def keep_last(self, length: int) -> None:
        """Forget all but the last `length` positions (a sliding window never reads them)."""
        if self.keys is not None and length < self.length:
            self.keys = self.keys[:, -length:]
            self.values = self.values[:, -length:]
            self.positions = self.positions[-length:]

    def truncate(self, length: int) -> None:
        if self.keys is not None and length < self.length:
            self.keys = self.keys[:, :length]
            self.values = self.values[:, :length]
            self.positions = self.positions[:length]
            if length == 0:
                self.keys = self.values = None
                self.last_output = None


class PrefixLayer(nn.Module):
    """One Llama-shaped decoder layer over base hidden states (Hydra++)."""

    def __init__(self, hidden_size: int, config: PrefixLayerConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.input_layernorm = RMSNorm(hidden_size, c.rms_norm_eps)
        self.q_proj = nn.Linear(hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, hidden_size, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden_size, c.rms_norm_eps)
        self.gate_proj = nn.Linear(hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, hidden_size, bias=False)
        for linear in (self.q_proj, self.k_proj, self.v_proj, self.gate_proj, self.up_proj):
            nn.init.normal_(linear.weight, std=0.02)
        nn.init.zeros_(self.o_proj.weight)
        nn.init.zeros_(self.down_proj.weight)

    def forward(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        cache: PrefixCache | None = None,
        key_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`hidden` [T, H] (or [B, T, H] without a cache) at `positions` [T] (or [B, T]).

        Causal attention over the cached positions and the new ones; with a cache the
        new keys/values are appended to it. `key_padding` bool[B, T] marks padded keys.
        """
        c = self.config
        batched = hidden.dim() == 3
        x = hidden if batched else hidden.unsqueeze(0)
        pos = positions if positions.dim() == 2 else positions.unsqueeze(0).expand(x.shape[0], -1)
        b, t, _ = x.shape
        normed = self.input_layernorm(x)
        q = self.q_proj(normed).view(b, t, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(normed).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(normed).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q = self._rope_b(q, pos)
        k = self._rope_b(k, pos)
        past = 0
        if cache is not None:
            if b != 1:
                raise ValueError("a prefix cache holds one sequence")
            past = cache.length
            if cache.keys is not None:
                k = torch.cat([cache.keys.unsqueeze(0).to(k.dtype), k], dim=2)
                v = torch.cat([cache.values.unsqueeze(0).to(v.dtype), v], dim=2)
            cache.keys, cache.values = k[0].detach(), v[0].detach()
            cache.positions.extend(int(p) for p in pos[0])
        groups = c.num_attention_heads // c.num_key_value_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        total = k.shape[2]
        allowed = torch.ones(t, total, dtype=torch.bool, device=x.device).tril(diagonal=past)
        if c.window is not None:  # key j is visible to query i when i + past - j < window
            allowed &= ~torch.ones(t, total, dtype=torch.bool, device=x.device).tril(diagonal=past - c.window)
        mask = allowed[None, None]
        if key_padding is not None:
            mask = mask & ~key_padding[:, None, None, :]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
        attn = attn.transpose(1, 2).reshape(b, t, c.num_attention_heads * c.head_dim)
        x = x + self.o_proj(attn)
        normed = self.post_attention_layernorm(x)
        x = x + self.down_proj(F.silu(self.gate_proj(normed)) * self.up_proj(normed))
        if cache is not None:
            cache.last_output = x[0, -1].detach()
            if c.window is not None and cache.length > 2 * c.window:
                cache.keep_last(c.window)  # room left for observations that rewind a few positions
        return x if batched else x[0]

    def _rope_b(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x [B, heads, T, D], pos [B, T]
        dim = self.config.head_dim
        inv_freq = 1.0 / (self.config.rope_theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
        freqs = pos.to(torch.float32)[..., None] * inv_freq  # [B, T, D/2]
        emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B, 1, T, D]
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        return x * cos + rotate_half(x) * sin
