"""KV compaction after tree verification: move the accepted path's K/V next to the prefix.

Request b accepted the tree nodes a_0 < a_1 < … < a_{k-1} (a_0 = 0, the root; node indices in the
tree's node order). Node a_i's K/V sits at logical position prefix_lens[b] + a_i and must move to
position prefix_lens[b] + i, in every K and V cache of every layer. Cache layout and block tables
as in `tree_attention.py`: `[num_blocks, block_size, num_kv_heads, head_dim]`, position p at
`cache[block_tables[b, p // block_size], p % block_size]`.

Inputs: `accepted_indices` int32 (the k_b node indices of every request, concatenated),
`accepted_start_loc` int32 [B + 1] (request b's are `accepted_indices[start[b]:start[b+1]]`),
`prefix_lens` int32 [B], `block_tables` int32 [B, max_blocks]. `caches` lists every cache tensor to
update (e.g. `[t for kv in layer_kv_caches for t in kv.unbind(0)]` for vLLM's per-layer
`[2, num_blocks, block_size, Hkv, D]` tensors); all must share shape, dtype, strides and device.

Why a pointer table: vLLM allocates each layer's cache separately (and K and V are views into it),
so a stacked `[L, …]` tensor would mean a copy or a change to vLLM's allocator. The kernel instead
receives the caches' base addresses as an int64 tensor (built once per set of caches and memoised)
and one launch covers all requests × all caches: program (b, c) copies request b's path inside
cache c. It copies raw 32-bit words, so one compiled variant serves fp16, bf16 and fp32.

Race freedom: a program copies its rows in increasing i, and since a_j ≥ j every source still to
be read (a_j, j > i) lies strictly after the destination i being written. Within a row, each 32-bit
word offset is loaded and stored by the same thread in every iteration (each word of the tile
belongs to exactly one lane: no replicated lanes), so program order puts every read of a slot
(for an earlier copy, a_j = i with j < i) before the write into it.
Different programs touch disjoint memory: different caches, or different requests' tree slots (a
block holding a request's tree positions is never shared with another request).
"""

import functools

import torch
import triton
import triton.language as tl

from . import configs
from ._dispatch import check_runnable


def _check_inputs(
    caches: list[torch.Tensor],
    accepted_indices: torch.Tensor,
    accepted_start_loc: torch.Tensor,
    prefix_lens: torch.Tensor,
    block_tables: torch.Tensor,
) -> None:
    """Raise ValueError naming the argument that does not fit the layout above."""
    if not caches:
        raise ValueError("compact_kv: no caches given")
    first = caches[0]
    if first.dim() != 4:
        raise ValueError(f"compact_kv: caches must be [num_blocks, block_size, Hkv, D], got "
                         f"{tuple(first.shape)}")
    for i, cache in enumerate(caches):
        if (cache.shape != first.shape or cache.dtype != first.dtype
                or cache.stride() != first.stride() or cache.device != first.device):
            raise ValueError(f"compact_kv: caches[{i}] differs from caches[0] in shape, dtype, "
                             "strides or device")
    batch = prefix_lens.shape[0]
    for name, t, ndim in (("accepted_indices", accepted_indices, 1),
                          ("accepted_start_loc", accepted_start_loc, 1),
                          ("prefix_lens", prefix_lens, 1), ("block_tables", block_tables, 2)):
        if t.dtype != torch.int32 or t.dim() != ndim:
            raise ValueError(f"compact_kv: {name} must be a {ndim}-d int32 tensor, got "
                             f"{t.dtype} {tuple(t.shape)}")
    if accepted_start_loc.shape[0] != batch + 1 or block_tables.shape[0] != batch:
        raise ValueError(f"compact_kv: {batch} requests in prefix_lens, but accepted_start_loc "
                         f"has {accepted_start_loc.shape[0]} entries and block_tables "
                         f"{block_tables.shape[0]} rows")


def compact_kv_ref(
    caches: list[torch.Tensor],
    accepted_indices: torch.Tensor,
    accepted_start_loc: torch.Tensor,
    prefix_lens: torch.Tensor,
    block_tables: torch.Tensor,
) -> None:
    """Torch reference of `compact_kv` (the CPU path): in place, request by request, in order."""
    _check_inputs(caches, accepted_indices, accepted_start_loc, prefix_lens, block_tables)
    block_size = caches[0].shape[1]
    starts = accepted_start_loc.tolist()
    accepted = accepted_indices.tolist()
    for b, prefix in enumerate(prefix_lens.tolist()):
        for i, node in enumerate(accepted[starts[b]:starts[b + 1]]):
            if node == i:
                continue
            src, dst = prefix + node, prefix + i
            src_block = int(block_tables[b, src // block_size])
            dst_block = int(block_tables[b, dst // block_size])
            for cache in caches:
                cache[dst_block, dst % block_size] = cache[src_block, src % block_size]


@triton.jit(do_not_specialize=configs.COMPACT_NOT_SPECIALIZED)
def _compact_kv_kernel(
    cache_ptrs_ptr, accepted_ptr, accepted_start_loc_ptr, prefix_lens_ptr, block_tables_ptr,
    stride_bt, block_size, stride_block_words, stride_slot_words, row_words,
    BLOCK_WORDS: tl.constexpr,
):
    """Grid (B, num_caches): copy request b's accepted rows inside cache c, in path order.

    Slot offsets are computed in int64 (a cache may hold more than 2^31 words).
    """
    b = tl.program_id(0)
    base = tl.load(cache_ptrs_ptr + tl.program_id(1)).to(tl.pointer_type(tl.int32))
    first = tl.load(accepted_start_loc_ptr + b)
    count = tl.load(accepted_start_loc_ptr + b + 1) - first
    prefix = tl.load(prefix_lens_ptr + b)
    bt_row = block_tables_ptr + b.to(tl.int64) * stride_bt
    offs = tl.arange(0, BLOCK_WORDS)
    for i in range(1, count):
        node = tl.load(accepted_ptr + first + i)
        if node != i:
            src = prefix + node
            dst = prefix + i
            src_row = (tl.load(bt_row + src // block_size).to(tl.int64) * stride_block_words
                       + (src % block_size).to(tl.int64) * stride_slot_words)
            dst_row = (tl.load(bt_row + dst // block_size).to(tl.int64) * stride_block_words
                       + (dst % block_size).to(tl.int64) * stride_slot_words)
            for w in range(0, row_words, BLOCK_WORDS):
                word_ok = w + offs < row_words
                x = tl.load(base + src_row + w + offs, mask=word_ok)
                tl.store(base + dst_row + w + offs, x, mask=word_ok)


@functools.lru_cache(maxsize=16)
def _pointer_table(device: torch.device, pointers: tuple[int, ...]) -> torch.Tensor:
    """The caches' base addresses as an int64 tensor on `device`, memoised per address set.

    Keyed on the addresses themselves, so a hit is always right. Build it once outside CUDA-graph
    capture (a host-to-device copy cannot be captured); later calls reuse it.
    """
    return torch.tensor(pointers, dtype=torch.int64, device=device)


def compact_kv(
    caches: list[torch.Tensor],
    accepted_indices: torch.Tensor,
    accepted_start_loc: torch.Tensor,
    prefix_lens: torch.Tensor,
    block_tables: torch.Tensor,
) -> None:
    """Compact every cache in place with one Triton launch (layout: module docstring).

    Needs each slot's [num_kv_heads, head_dim] row contiguous and a multiple of 4 bytes (vLLM's
    layout is). Runs on CUDA tensors, or on CPU tensors under TRITON_INTERPRET=1; raises
    RuntimeError otherwise (call `compact_kv_ref` there).
    """
    _check_inputs(caches, accepted_indices, accepted_start_loc, prefix_lens, block_tables)
    first = caches[0]
    check_runnable("compact_kv", first.device, bf16_math=False)
    _, block_size, num_kv_heads, head_dim = first.shape
    item = first.element_size()
    row_bytes = num_kv_heads * head_dim * item
    if (first.stride(3) != 1 or first.stride(2) != head_dim or row_bytes % 4
            or (first.stride(0) * item) % 4 or (first.stride(1) * item) % 4):
        raise ValueError("compact_kv: each slot's [num_kv_heads, head_dim] row must be contiguous "
                         "and a multiple of 4 bytes, as are the block and slot strides")
    pointers = tuple(cache.data_ptr() for cache in caches)
    if any(p % 4 for p in pointers):
        raise ValueError("compact_kv: cache base addresses must be 4-byte aligned")
    batch = prefix_lens.shape[0]
    if batch == 0:
        return
    # Small index tensors: the kernel assumes unit strides along their last dim (no-ops usually).
    accepted_indices = accepted_indices.contiguous()
    accepted_start_loc = accepted_start_loc.contiguous()
    prefix_lens, block_tables = prefix_lens.contiguous(), block_tables.contiguous()
    launch = configs.compact_launch()
    _compact_kv_kernel[(batch, len(caches))](
        _pointer_table(first.device, pointers), accepted_indices, accepted_start_loc,
        prefix_lens, block_tables,
        block_tables.stride(0), block_size, first.stride(0) * item // 4,
        first.stride(1) * item // 4, row_bytes // 4,
        **launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages,
    )
