"""The tree step's kernel call sites on vLLM's CUDA caches (the `entmtp_kernels` Triton kernels).

vLLM 0.32's CUDA backends FLASH_ATTN and TRITON_ATTN both receive one cache tensor per layer in
the logical order `(blocks, Hkv, block_size, 2 * D)` (K in the first D channels, V in the
last; `v1/kv_cache_interface.py` `compute_layer_kv_cache_shape_bytes`), whatever its physical
stride order (HND or NHD), and split it as `kv_cache.transpose(1, 2).split(D, -1)` into
`[blocks, block_size, Hkv, D]` views (`flash_attn.py:1252`, `triton_attn.py:627`). `split_kv`
takes the same views, and the kernels read strides, so nothing is copied. Compaction moves each
(slot, head) row of 2 * D channels (K and V together): one `[blocks, block_size, 1, 2 * D]` view
per layer and KV head (`compaction_views`), all in one launch.

- `tree_rows_attention_gpu`: after the stock attention of a layer, recompute the rows of the
  tree requests with `paged_tree_attention` (prefix fully visible, tree part from packed
  ancestor masks, built once per step) and write them into the layer's output;
- `compact_kv_gpu`: after verification, move every request's accepted path next to its prefix
  in all layers' caches with one `compact_kv` launch (each cache memory once: layers that share
  another layer's KV are bound to the same tensor).

The kernel functions are parameters (default: the Triton kernels) so the plumbing is tested on
CPU against the torch references as well as with the kernels under the Triton interpreter
(`tests/vllm_plugin/cuda/test_cuda_attention.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.tree_step import TreeStep

TREE_BACKEND_ATTR = "entmtp_tree_backend"
"""Class attribute (True) of the EntMTP CUDA attention backends (`cuda/attention.py`)."""


def _kernels():
    import entmtp_kernels

    return entmtp_kernels


def check_tree_backend(backend: type) -> None:
    """One-line error unless `backend` is an EntMTP CUDA tree backend."""
    if not getattr(backend, TREE_BACKEND_ATTR, False):
        raise EntMTPError(
            f"EntMTP on a GPU needs its tree attention backend (FLASH_ATTN or TRITON_ATTN), but the engine runs "
            f"{getattr(backend, '__name__', backend)}: pass --attention-backend FLASH_ATTN or TRITON_ATTN"
        )


def split_kv(kv_cache: torch.Tensor, head_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(key_cache, value_cache) views `[blocks, block_size, Hkv, D]` of one layer's cache
    `(blocks, Hkv, block_size, 2 * D)`, exactly as vLLM's FLASH_ATTN / TRITON_ATTN split it."""
    if kv_cache.dim() != 4 or kv_cache.shape[-1] != 2 * head_size:
        raise EntMTPError(f"EntMTP: unexpected KV cache shape {tuple(kv_cache.shape)} for head size {head_size}")
    key_cache, value_cache = kv_cache.transpose(1, 2).split(head_size, dim=-1)
    return key_cache, value_cache


def distinct_caches(kv_caches: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """`kv_caches` with each cache memory listed once. A layer that reads another layer's KV
    (cross-layer KV sharing, `kv_sharing_target_layer_name`) is bound to the same tensor as its
    target (`bind_kv_cache`), and moving one cache's rows twice in one compaction would move
    already-moved rows again."""
    seen: set[tuple] = set()
    distinct = []
    for cache in kv_caches:
        key = (cache.data_ptr(), tuple(cache.shape), cache.stride(), cache.dtype)
        if key not in seen:
            seen.add(key)
            distinct.append(cache)
    return distinct


def compaction_views(kv_caches: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """`[blocks, block_size, 1, 2 * D]` views, one per distinct layer cache and KV head: each
    slot's K and V channels of one head are contiguous in every physical order vLLM uses."""
    return [cache[:, head].unsqueeze(2) for cache in distinct_caches(kv_caches) for head in range(cache.shape[1])]


def kernel_block_table(block_table: torch.Tensor, manager_block_size: int, kernel_block_size: int) -> torch.Tensor:
    """The block table in the cache's (kernel) blocks when vLLM splits each KV manager block
    into `manager_block_size // kernel_block_size` kernel blocks (`group_kernel_blocks`)."""
    if kernel_block_size == manager_block_size:
        return block_table
    ratio = manager_block_size // kernel_block_size
    column = torch.arange(block_table.shape[1] * ratio, device=block_table.device)
    return block_table[:, column // ratio] * ratio + column % ratio


def _step_inputs(step: TreeStep, device: torch.device, seq_lens: torch.Tensor, block_table: torch.Tensor) -> tuple:
    """(rows, block tables, query_start_loc, prefix_lens, packed masks) of the tree requests,
    built on the first layer of the step and reused by the others (one block table per step)."""
    found = step.cache.get("gpu_inputs")
    if found is None:
        kernels = _kernels()
        rows = step.token_rows[step.node_valid].to(device, non_blocking=True)
        sizes = step.num_nodes.to(device)
        query_start_loc = torch.zeros(sizes.numel() + 1, dtype=torch.int32, device=device)
        query_start_loc[1:] = torch.cumsum(sizes, 0)
        batch_rows = step.batch_rows.to(device)
        prefix_lens = (seq_lens[batch_rows].to(torch.int64) - sizes).to(torch.int32)
        masks = [step.tree_mask[r, :n, :n] for r, n in enumerate(step.num_nodes.tolist())]
        packed = kernels.pack_tree_mask(masks).to(device)
        tables = block_table[batch_rows].to(torch.int32)
        found = step.cache["gpu_inputs"] = (rows, tables, query_start_loc, prefix_lens, packed)
    return found


def tree_rows_attention_gpu(
    step: TreeStep,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    output: torch.Tensor,
    kernel: Callable | None = None,
    softcap: float = 0.0,
) -> None:
    """Overwrite `output` rows [T, Hq, D] of the tree requests with tree attention.

    `key_cache`, `value_cache`: [blocks, block_size, Hkv, D] (views, `split_kv`);
    `seq_lens`, `block_table`: the batch's (seq_lens include this step's tokens); `softcap`: the
    layer's logits soft-cap (`impl.logits_soft_cap`; 0: none).
    """
    kernels = _kernels()
    kernel = kernel or kernels.paged_tree_attention
    rows, tables, query_start_loc, prefix_lens, packed = _step_inputs(step, query.device, seq_lens, block_table)
    extra = {"max_query_len": int(step.num_nodes.max())} if kernel is kernels.paged_tree_attention else {}
    result = kernel(query[rows], key_cache, value_cache, tables, query_start_loc, prefix_lens, packed, scale,
                    softcap=softcap, **extra)
    out = output.view(output.shape[0], -1, query.shape[-1]) if output.dim() == 2 else output
    out[rows] = result.to(out.dtype)


def compact_kv_gpu(
    kv_caches: Sequence[torch.Tensor],
    accepted: Sequence[Sequence[int]],
    prefix_lens: Sequence[int],
    block_tables: torch.Tensor,
    kernel: Callable | None = None,
) -> None:
    """Move request b's accepted nodes `accepted[b]` (root first) to positions prefix + i.

    `kv_caches`: every layer's `(blocks, Hkv, block_size, 2 * D)` cache; `block_tables`: the rows
    of the requests in `accepted`, in the caches' blocks. Requests whose path needs no move may
    be left out. One kernel launch for all requests, layers and heads.
    """
    if not accepted:
        return
    kernels = _kernels()
    kernel = kernel or kernels.compact_kv
    device = block_tables.device
    flat = [node for path in accepted for node in path]
    starts = [0]
    for path in accepted:
        starts.append(starts[-1] + len(path))
    kernel(
        compaction_views(kv_caches),
        torch.tensor(flat, dtype=torch.int32, device=device),
        torch.tensor(starts, dtype=torch.int32, device=device),
        torch.tensor(list(prefix_lens), dtype=torch.int32, device=device),
        block_tables.to(torch.int32),
    )
