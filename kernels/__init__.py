"""EntMTP's Triton kernels and their torch references (imports torch and triton only).

- `paged_tree_attention` / `paged_tree_attention_ref`: attention of every request's draft tree
  over its paged KV cache (prefix fully visible, inside the tree self + ancestors from a packed
  per-request bit mask built by `pack_tree_mask`). Layout: `tree_attention.py`'s docstring.
- `compact_kv` / `compact_kv_ref`: after verification, move each request's accepted path to the
  slots right after its prefix, in all layers' K/V caches with one launch (`compaction.py`).

Dispatch: the kernel functions run Triton on CUDA tensors, or on CPU tensors when
`TRITON_INTERPRET=1` was set before triton was imported (then bf16 attention is refused: the
interpreter computes it wrongly). Anywhere else they raise RuntimeError pointing at the `_ref`
function, which is the CPU path; there is no silent fallback.
"""

from .compaction import compact_kv, compact_kv_ref
from .tree_attention import pack_tree_mask, paged_tree_attention, paged_tree_attention_ref

__all__ = [
    "compact_kv",
    "compact_kv_ref",
    "pack_tree_mask",
    "paged_tree_attention",
    "paged_tree_attention_ref",
]
