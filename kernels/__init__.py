"""EntMTP's Triton kernels and their torch references (imports torch and triton only).

- `paged_tree_attention` / `paged_tree_attention_ref`: attention of every request's draft tree
  over its paged KV cache (prefix fully visible, inside the tree self + ancestors from a packed
  per-request bit mask built by `pack_tree_mask`). Head dims 64, 80, 96, 128 and 256
  (`SUPPORTED_HEAD_DIMS`), grouped-query attention, optional logits soft-capping (`softcap=`,
  vLLM's `logits_soft_cap`), fp16/bf16 on CUDA. Layout: `tree_attention.py`'s docstring.
- `compact_kv` / `compact_kv_ref`: after verification, move each request's accepted path to the
  slots right after its prefix, in all layers' K/V caches with one launch (`compaction.py`).
- `warm_up_launches(dtype, head_dim, softcap)`: the calls that compile, ahead of serving, every
  kernel variant a model's serving loop can launch (the integer arguments that change between
  steps are not specialized, so no step compiles again; `configs.py` lists them).

Dispatch: the kernel functions run Triton on CUDA tensors, or on CPU tensors when
`TRITON_INTERPRET=1` was set before triton was imported (then bf16 attention is refused: the
interpreter computes it wrongly). Anywhere else they raise RuntimeError pointing at the `_ref`
function, which is the CPU path; there is no silent fallback.
"""

from .compaction import compact_kv, compact_kv_ref
from .configs import SUPPORTED_HEAD_DIMS, WarmUpLaunch, warm_up_launches
from .tree_attention import pack_tree_mask, paged_tree_attention, paged_tree_attention_ref

__all__ = [
    "SUPPORTED_HEAD_DIMS",
    "WarmUpLaunch",
    "compact_kv",
    "compact_kv_ref",
    "pack_tree_mask",
    "paged_tree_attention",
    "paged_tree_attention_ref",
    "warm_up_launches",
]
