"""`TreeStep`: what every attention layer must know about the tree requests of one forward pass.

The model runner builds one per step (`build_tree_step`) and attaches it to each
attention metadata object vLLM builds for that step (attribute `TREE_STEP_ATTR`); the tree
attention backends (`cpu/attention.py`, `cuda/attention.py`) read it back with
`tree_step_of(attn_metadata)`. Steps without branching trees carry None, and the backends then
behave exactly like the stock ones. Per-step caches that every layer shares (gather plans,
packed masks) live on the object, so they are built once per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

TREE_STEP_ATTR = "entmtp_tree_step"
"""Attribute of vLLM's per-layer attention metadata that holds the step's `TreeStep`."""


@dataclass
class TreeStep:
    """R tree requests (those whose verified draft is not a chain), padded to Nmax nodes."""

    batch_rows: torch.Tensor
    """long[R]: the request's row in the batch (indexes seq_lens and block_table)."""
    token_rows: torch.Tensor
    """long[R, Nmax]: the token index (row of query/output) of each node; padding repeats a
    valid row and is never written back."""
    node_valid: torch.Tensor
    """bool[R, Nmax]: which entries of token_rows are real nodes."""
    tree_mask: torch.Tensor
    """bool[R, Nmax, Nmax]: ancestor-or-self inside each tree (padding rows see themselves)."""
    num_nodes: torch.Tensor
    """long[R]: nodes of each tree (the root included)."""
    compaction: bool = True
    """Move accepted paths next to their prefix after verification (False only for the
    negative-control setting `debug_disable_compaction`)."""
    capture_rows: torch.Tensor | None = None
    """long[M]: token rows whose fresh K/V the CPU backend keeps for compaction (None: keep
    nothing; the CUDA path compacts in place and keeps nothing)."""
    captured: list[Any] = field(default_factory=list)
    """The CPU backend's captured K/V, one entry per layer (`attention.CapturedKV`)."""
    cache: dict[str, Any] = field(default_factory=dict)
    """Per-step values every layer shares, built by the first layer that needs them."""

    @property
    def has_tree_rows(self) -> bool:
        return self.batch_rows.numel() > 0


def tree_step_of(attn_metadata: Any) -> TreeStep | None:
    """The `TreeStep` the runner attached to this layer's metadata (None: no tree rows)."""
    return getattr(attn_metadata, TREE_STEP_ATTR, None) if attn_metadata is not None else None


def build_tree_step(trees: list[Any], starts: np.ndarray, compaction: bool, capture: bool) -> TreeStep | None:
    """The attention backends' view of a step's non-chain trees (None: there are none).

    `trees[i]`: request i's `step_plan.Verification` or None; `starts[i]`: its first token row.
    Sets each tree's `capture_start` (its first row among the captured ones); `capture`: the
    platform keeps the tree rows' fresh K/V for compaction (CPU)."""
    rows = [i for i, tree in enumerate(trees) if tree is not None and not tree.chain]
    if not rows:
        return None
    sizes = [trees[i].buffers.num_nodes for i in rows]
    nmax = max(sizes)
    token_rows = torch.zeros(len(rows), nmax, dtype=torch.long)
    valid = torch.zeros(len(rows), nmax, dtype=torch.bool)
    mask = torch.eye(nmax, dtype=torch.bool).repeat(len(rows), 1, 1)
    captured = []
    for r, (i, n) in enumerate(zip(rows, sizes)):
        start = int(starts[i])
        token_rows[r] = start
        token_rows[r, :n] = torch.arange(start, start + n)
        valid[r, :n] = True
        mask[r, :n, :n] = trees[i].buffers.attention_mask
        trees[i].capture_start = len(captured)
        captured.extend(range(start, start + n))
    return TreeStep(
        batch_rows=torch.tensor(rows, dtype=torch.long),
        token_rows=token_rows,
        node_valid=valid,
        tree_mask=mask,
        num_nodes=torch.tensor(sizes, dtype=torch.long),
        compaction=compaction,
        capture_rows=torch.tensor(captured, dtype=torch.long) if capture else None,
    )
