"""KV-cache bookkeeping for tree verification over a transformers `DynamicCache`.

After a verify pass the cache holds `past_len` prefix entries followed by one
entry per tree node, in `TreeBuffers` node order (the root at `past_len`).
`compact_to_path` keeps the prefix plus the accepted nodes' entries, moved to
consecutive slots in path order, and drops the rest:

    before: [prefix ... | n0 n1 n2 n3 n4 n5]      accepted = [0, 2, 5]
    after:  [prefix ... | n0 n2 n5]

Each `DynamicLayer` keeps `keys`/`values` of shape [batch, kv_heads, seq, head_dim]
and grows by `torch.cat`, so the compaction copies the few accepted rows in
place and then narrows the tensors to a view (no copy of the prefix).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from entmtp_vllm.errors import EntMTPError


def check_compactable(cache: DynamicCache) -> None:
    """Only full-attention dynamic layers can be compacted by moving rows."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is not DynamicLayer:
            raise EntMTPError(
                f"KV cache layer {i} is a {type(layer).__name__}; the reference engine supports only "
                "models whose layers all use full attention (DynamicLayer), such as Llama"
            )


def cache_length(cache: DynamicCache) -> int:
    """Tokens currently held (layer 0; every layer holds the same number)."""
    return cache.get_seq_length()


def compact_to_path(cache: DynamicCache, past_len: int, accepted: Sequence[int]) -> None:
    """Keep the first `past_len` entries and the accepted nodes' entries, in path order.

    `accepted` are node indices root first (`accepted[0] == 0`); node i sits at slot
    `past_len + i`. Afterwards the cache holds `past_len + len(accepted)` entries and
    accepted node a_k is at slot `past_len + k`.
    """
    keep = len(accepted)
    contiguous = list(accepted) == list(range(keep))
    index = None if contiguous else torch.tensor(accepted, dtype=torch.long) + past_len
    for layer in cache.layers:
        if index is not None:
            if index.device != layer.keys.device:
                index = index.to(layer.keys.device)
            # Advanced indexing reads a copy first, so overlapping source and target slots are safe.
            layer.keys[..., past_len : past_len + keep, :] = layer.keys[..., index, :]
            layer.values[..., past_len : past_len + keep, :] = layer.values[..., index, :]
        layer.keys = layer.keys[..., : past_len + keep, :]
        layer.values = layer.values[..., : past_len + keep, :]
