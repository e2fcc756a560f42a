"""Tree attention on vLLM's CPU backend (`CPU_ATTN`), from a plugin.

The C++ kernel only knows causal masks. `TreeCPUAttentionBackend` is a `CPU_ATTN` subclass
(installed with `register_backend` by the general plugin) whose impl runs the stock kernel,
then, when the step has tree rows (a `TreeStep` on the metadata), recomputes in torch the
rows of the requests whose draft is a real tree (not a chain): every context position visible,
inside the tree only the node itself and its ancestors. The requests of one layer are batched
(padded to the largest tree and the longest sequence); the gather indices and the visibility
mask are built once per step and reused by every layer.

The model runner hands the step's `TreeStep` to every layer on the attention metadata vLLM builds
for the step (`tree_step_of`); without one the impl is exactly the stock one.

When the recompute runs, every node's K/V is already in the paged cache at its index-based slot
(the backend writes K/V before attention), so all K/V is read from the cache through the
block table. The CPU cache layout inside a block depends on the ISA (with `vec` each K tile is
stored transposed); `block_layout` learns it once per shape by writing index-coded K/V through
the real `cpu_attn_reshape_and_cache` op and reading the block back.

The impl also keeps this step's fresh K/V rows of the tree requests (`TreeStep.capture_rows`),
which the runner re-writes to their compacted slots after verification (`compact_kv_cpu`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vllm import _custom_ops as ops
from vllm.model_executor.layers.attention.attention import get_attention_context
from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.cpu_attn import (
    CPUAttentionBackend,
    CPUAttentionBackendImpl,
    CPUAttentionMetadata,
)

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.cpu.rows import split_forward, step_plan
from entmtp_vllm.vllm_plugin.tree_step import TreeStep, tree_step_of

@dataclass
class CapturedKV:
    """One layer's fresh K/V rows of this step (tree requests only), for compaction."""

    layer: torch.nn.Module
    kv_cache: torch.Tensor
    kv_cache_dtype: str
    key: torch.Tensor
    """[len(capture_rows), Hkv, D]: rows in the order of `TreeStep.capture_rows`."""
    value: torch.Tensor


# --------------------------------------------------------------------------- layout probe


def _digits(limit: int, base: int) -> int:
    count, reach = 1, base
    while reach < limit:
        count, reach = count + 1, reach * base
    return count


@functools.lru_cache(maxsize=16)
def block_layout(
    num_kv_heads: int, block_size: int, head_dim: int, dtype: torch.dtype, isa: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the op stores each K and V element inside one cache block.

    Returns (k_offsets, v_offsets), long[block_size * Hkv * D] each: entry (t, h, d) in that
    row-major order is the flat index, inside the block's `[Hkv, block_size, 2 * D]` storage,
    of token t's K (V) element (h, d). Learnt by writing index-coded values through the real
    `cpu_attn_reshape_and_cache` (digits in base 64, exact in fp16/bf16/fp32).
    """
    base = 64
    shape = (block_size, num_kv_heads, head_dim)
    numel = block_size * num_kv_heads * head_dim
    t, h, d = torch.meshgrid(
        torch.arange(block_size), torch.arange(num_kv_heads), torch.arange(head_dim), indexing="ij"
    )
    slots = torch.arange(block_size, dtype=torch.long)

    def write(key_values: torch.Tensor, value_values: torch.Tensor) -> torch.Tensor:
        cache = torch.zeros(1, num_kv_heads, block_size, 2 * head_dim, dtype=dtype)
        view = cache.view(1, num_kv_heads, block_size * 2, head_dim)
        key_cache, value_cache = view.chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(
            key_values.to(dtype).contiguous(),
            value_values.to(dtype).contiguous(),
            key_cache,
            value_cache,
            slots,
            isa,
        )
        return cache.view(-1).float()

    # Which flat positions hold K (1) and which hold V (2).
    marks = write(torch.ones(shape), torch.full(shape, 2.0))
    decoded = {}
    for name, index in (("t", t), ("h", h), ("d", d)):
        limit = int(index.max()) + 1
        value = torch.zeros(marks.shape, dtype=torch.long)
        scale = 1
        for _ in range(_digits(limit, base)):
            digit = ((index // scale) % base + 1).float()
            stored = write(digit, digit).round().long() - 1
            value += stored * scale
            scale *= base
        decoded[name] = value
    flat_code = (decoded["t"] * num_kv_heads + decoded["h"]) * head_dim + decoded["d"]
    positions = torch.arange(marks.numel())
    offsets = []
    for mark in (1.0, 2.0):
        where = positions[marks == mark]
        codes = flat_code[where]
        if where.numel() != numel or not torch.equal(codes.sort().values, torch.arange(numel)):
            raise EntMTPError(
                f"tree attention: cannot learn the CPU KV cache layout for isa={isa!r}, dtype={dtype}; "
                "this cache layout is not supported (fp8 caches are not)"
            )
        offset = torch.empty(numel, dtype=torch.long)
        offset[codes] = where
        offsets.append(offset)
    return offsets[0], offsets[1]


def affine_layout(offsets: torch.Tensor, block_size: int, num_kv_heads: int, head_dim: int):
    """(base, t_stride, h_stride, d_stride) when `offsets` (from `block_layout`) is affine in
    (t, h, d) -- then K/V are plain strided views of the cache (the `vec` ISA stores each K tile
    transposed, which is affine) -- else None (e.g. packed layouts): gather by index instead."""
    grid = offsets.view(block_size, num_kv_heads, head_dim)
    base = int(grid[0, 0, 0])
    strides = [
        int(grid[1, 0, 0]) - base if block_size > 1 else 0,
        int(grid[0, 1, 0]) - base if num_kv_heads > 1 else 0,
        int(grid[0, 0, 1]) - base if head_dim > 1 else 0,
    ]
    t, h, d = torch.meshgrid(
        torch.arange(block_size), torch.arange(num_kv_heads), torch.arange(head_dim), indexing="ij"
    )
    expected = base + t * strides[0] + h * strides[1] + d * strides[2]
    return (base, *strides) if torch.equal(expected, grid) else None


USE_STRIDED_VIEWS = True
"""Read K/V through strided views when the layout allows (False: always gather by index)."""


@functools.lru_cache(maxsize=16)
def layout_strides(num_kv_heads: int, block_size: int, head_dim: int, dtype: torch.dtype, isa: str):
    """`affine_layout` of the K and of the V offsets of `block_layout` (cached)."""
    k_offsets, v_offsets = block_layout(num_kv_heads, block_size, head_dim, dtype, isa)
    return (
        affine_layout(k_offsets, block_size, num_kv_heads, head_dim),
        affine_layout(v_offsets, block_size, num_kv_heads, head_dim),
    )


def _cache_rows(kv_cache: torch.Tensor, block_ids: torch.Tensor, offsets: torch.Tensor, affine, longest: int) -> torch.Tensor:
    """[R, longest, Hkv, D] float32: the K (or V) of positions 0..longest-1 of each tree request."""
    num_blocks, num_kv_heads, block_size, _ = kv_cache.shape
    head_dim = offsets.numel() // (block_size * num_kv_heads)
    num_trees, num_cols = block_ids.shape
    per_block = num_kv_heads * block_size * kv_cache.shape[-1]
    affine = affine if USE_STRIDED_VIEWS else None
    if affine is not None and kv_cache[0].is_contiguous():
        base, t_stride, h_stride, d_stride = affine
        view = kv_cache.as_strided(
            (num_blocks, block_size, num_kv_heads, head_dim),
            (kv_cache.stride(0), t_stride, h_stride, d_stride),
            kv_cache.storage_offset() + base,
        )
        rows = view[block_ids]  # [R, nb, block_size, Hkv, D], only the needed blocks
    else:
        blocks = kv_cache[block_ids].reshape(num_trees, num_cols, per_block)
        rows = blocks[:, :, offsets]
    return rows.reshape(num_trees, num_cols * block_size, num_kv_heads, head_dim)[:, :longest].float()


# --------------------------------------------------------------------------- tree rows


def _gather_plan(step: TreeStep, metadata: CPUAttentionMetadata, num_blocks: int, block_size: int):
    """Block ids and the visibility mask of the tree requests, shared by every layer."""
    if "cpu_gather" not in step.cache:
        seq_lens = metadata.seq_lens.to(torch.long)[step.batch_rows]
        longest = int(seq_lens.max())
        num_block_cols = -(-longest // block_size)
        block_ids = metadata.block_table[step.batch_rows, :num_block_cols].to(torch.long)
        block_ids = block_ids.clamp(0, num_blocks - 1)
        context = (seq_lens - step.num_nodes).view(-1, 1, 1)
        position = torch.arange(longest).view(1, 1, -1)
        inside = position - context  # index of the tree node at each position
        in_tree = (inside >= 0) & (inside < step.num_nodes.view(-1, 1, 1))
        nmax = step.tree_mask.shape[-1]
        node = inside.clamp(0, nmax - 1).expand(-1, nmax, -1)
        tree_part = step.tree_mask.gather(2, node) & in_tree
        visible = (position < context) | tree_part  # [R, Nmax, L]
        step.cache["cpu_gather"] = (block_ids, longest, visible)
    return step.cache["cpu_gather"]


def _output_plan(step: TreeStep, visible: torch.Tensor, group: int):
    """Shared by every layer: the additive mask with the query heads of one K/V head folded into
    the query rows ([R, 1, group * Nmax, L]: 0 visible, -inf not), the output rows of the real
    nodes, and where they sit in the flattened [R * Nmax] results."""
    if "cpu_rows" not in step.cache:
        num_trees, nmax, longest = visible.shape
        folded = visible[:, None, None].expand(num_trees, 1, group, nmax, longest).reshape(num_trees, 1, group * nmax, longest)
        additive = torch.zeros(folded.shape).masked_fill_(~folded, float("-inf"))
        picks = step.node_valid.reshape(-1).nonzero().squeeze(1)
        step.cache["cpu_rows"] = (additive, step.token_rows.reshape(-1)[picks], picks)
    return step.cache["cpu_rows"]


def tree_rows_attention(
    impl: CPUAttentionBackendImpl,
    layer: torch.nn.Module,
    step: TreeStep,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: CPUAttentionMetadata,
    output: torch.Tensor,
) -> None:
    """Overwrite the output rows of the tree requests with ancestor-masked attention."""
    num_blocks, num_kv_heads, block_size, _ = kv_cache.shape
    head_dim = impl.head_size
    k_offsets, v_offsets = block_layout(num_kv_heads, block_size, head_dim, kv_cache.dtype, layer.isa)
    block_ids, longest, visible = _gather_plan(step, metadata, num_blocks, block_size)
    num_trees, nmax = step.token_rows.shape
    group = impl.num_heads // num_kv_heads

    k_affine, v_affine = layout_strides(num_kv_heads, block_size, head_dim, kv_cache.dtype, layer.isa)
    keys = _cache_rows(kv_cache, block_ids, k_offsets, k_affine, longest)
    values = _cache_rows(kv_cache, block_ids, v_offsets, v_affine, longest)

    # Queries [R, Hkv, group * Nmax, D]: the heads that share a K/V head become its query rows.
    q = query[step.token_rows].float().view(num_trees, nmax, num_kv_heads, group, head_dim)
    q = q.permute(0, 2, 3, 1, 4).reshape(num_trees, num_kv_heads, group * nmax, head_dim)
    additive, rows, picks = _output_plan(step, visible, group)
    if impl.logits_soft_cap:
        scores = torch.matmul(q, keys.permute(0, 2, 3, 1)) * impl.scale
        scores = impl.logits_soft_cap * torch.tanh(scores / impl.logits_soft_cap) + additive
        attended = torch.matmul(scores.softmax(dim=-1), values.transpose(1, 2))
    else:  # one fused kernel (torch's CPU flash attention) instead of four ops
        attended = F.scaled_dot_product_attention(
            q, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=additive, scale=impl.scale
        )
    attended = attended.view(num_trees, num_kv_heads, group, nmax, head_dim).permute(0, 3, 1, 2, 4)
    attended = attended.reshape(num_trees * nmax, impl.num_heads, head_dim)
    out = output.view(output.shape[0], impl.num_heads, head_dim)
    out[rows] = attended.index_select(0, picks).to(out.dtype)


def _layer_tree_step(layer) -> TreeStep | None:
    """This step's `TreeStep` from the layer's attention metadata in vLLM's forward context
    (`do_kv_cache_update` is not handed the metadata)."""
    try:
        metadata = get_attention_context(layer.layer_name)[0]
    except (AssertionError, AttributeError, KeyError):  # no forward context (tests, dummy runs)
        return None
    return tree_step_of(metadata)


class TreeCPUAttentionImpl(CPUAttentionBackendImpl):
    """The stock CPU impl, plus tree rows and K/V capture when a tree step is announced; with
    `ENTMTP_CPU_ROWS_ATTENTION=on` or `all`, in EntMTP's steps the requests with a few rows (with
    `on`, and a long context) take EntMTP's rows attention instead (`cpu_rows.py`)."""

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        if attn_metadata is not None and self.attn_type == AttentionType.DECODER and output_scale is None:
            plan = step_plan(self, layer, attn_metadata, kv_cache)
            if plan is not None:
                split_forward(self, layer, plan, query, kv_cache, output)
                return output
        result = super().forward(
            layer, query, key, value, kv_cache, attn_metadata, output, output_scale, output_block_scale
        )
        step = tree_step_of(attn_metadata)
        if step is None or not step.has_tree_rows:
            return result
        if self.attn_type != AttentionType.DECODER:
            return result
        self._check_supported()
        tree_rows_attention(self, layer, step, query, kv_cache, attn_metadata, output)
        return result

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        super().do_kv_cache_update(layer, key, value, kv_cache, slot_mapping)
        step = _layer_tree_step(layer)
        if step is not None and step.capture_rows is not None and self.attn_type == AttentionType.DECODER:
            # Copies: under torch.compile the op's inputs may be reused buffers.
            step.captured.append(
                CapturedKV(
                    layer=layer,
                    kv_cache=kv_cache,
                    kv_cache_dtype=self.kv_cache_dtype,
                    key=key.index_select(0, step.capture_rows),
                    value=value.index_select(0, step.capture_rows),
                )
            )

    def _check_supported(self) -> None:
        problems = []
        if self.sliding_window != -1:
            problems.append("sliding-window attention")
        if self.alibi_slopes is not None:
            problems.append("ALiBi")
        if self.sinks is not None:
            problems.append("attention sinks")
        if self.is_fp8_kv_cache:
            problems.append("an fp8 KV cache")
        if problems:
            raise EntMTPError(
                f"EntMTP tree attention on CPU does not support {', '.join(problems)}; "
                "use a model without them (or kv_cache_dtype=auto)"
            )


class TreeCPUAttentionBackend(CPUAttentionBackend):
    """`CPU_ATTN` with an impl that can apply per-request tree masks."""

    @staticmethod
    def get_impl_cls() -> type[TreeCPUAttentionImpl]:
        return TreeCPUAttentionImpl


def compact_kv_cpu(step: TreeStep, sources: torch.Tensor, destinations: torch.Tensor) -> None:
    """Re-write captured K/V rows to their compacted slots, in every layer.

    `sources` long[m]: positions in `step.capture_rows` (the accepted nodes' fresh K/V);
    `destinations` long[m]: the slots they move to. Written through the real op, so the
    layout is whatever the kernel uses. The sources are copies taken during the forward pass,
    so no move can overwrite a row another move still reads: one call per layer.
    """
    if sources.numel() == 0:
        return
    for captured in step.captured:
        cache = captured.kv_cache
        num_blocks, num_kv_heads, block_size, _ = cache.shape
        view = cache.view(num_blocks, num_kv_heads, block_size * 2, -1)
        key_cache, value_cache = view.chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(
            captured.key.index_select(0, sources).contiguous(),
            captured.value.index_select(0, sources).contiguous(),
            key_cache,
            value_cache,
            destinations,
            captured.layer.isa,
            k_scale=captured.layer._k_scale_float,
            v_scale=captured.layer._v_scale_float,
            kv_cache_dtype=captured.kv_cache_dtype,
        )
