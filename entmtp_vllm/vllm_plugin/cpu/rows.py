"""Which requests of an EntMTP step on vLLM's CPU backend take EntMTP's rows attention
(`entmtp_vllm/cpu_attention`), and the layer call that splits the step between it and vLLM's op.

A request with 2 to `CPU_ROWS_ATTENTION.max_rows` rows in the step (a root and its drafts, or a
short prefill chunk) and, with `on`, at least `CPU_ROWS_ATTENTION.min_context` tokens in the cache
takes the kernel: its K and V are read once for all its rows, and a tree's
rows get their ancestor masks in the same pass (no torch recompute). Every other request (one
row, or a longer prefill chunk) goes through vLLM's own op, as a sub-batch with its own scheduler
metadata. The plan is built once per step, by the first layer, and kept on the step's attention
metadata. Only EntMTP's runner marks a step's metadata (`TREE_STEP_ATTR`), so servers without
EntMTP (vLLM without speculation, ngram) never take this path. `$ENTMTP_CPU_ROWS_ATTENTION`
(`on`, `all`, `off`) chooses; see `CpuRowsAttentionConfig`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from vllm import _custom_ops as ops

from entmtp_vllm.config import CPU_ROWS_ATTENTION
from entmtp_vllm.cpu_attention import rows
from entmtp_vllm.vllm_plugin.tree_step import TREE_STEP_ATTR, TreeStep

PLAN_ATTR = "entmtp_rows_plan"
"""Attribute of the step's attention metadata holding its `RowsPlan` (None: vLLM's op only)."""


@dataclass
class RowsPlan:
    """One step's split: the kernel's requests, and vLLM's op's sub-batch."""

    row_start: torch.Tensor
    """int64[R]: first token row of each kernel request."""
    row_count: torch.Tensor
    """int32[R]: its rows in this step."""
    seq_lens: torch.Tensor
    """int32[R]: its tokens in the cache, these rows included."""
    block_table: torch.Tensor
    """int32[R, B]: its blocks."""
    visible: torch.Tensor | None
    """int64[T] per token row: bit j lets the row see its request's new row j (None: all causal)."""
    run: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None] | None = None
    """The kernel's call for these requests, `run(query, kv_cache, output)` per layer."""
    plain_rows: torch.Tensor | None = None
    """long[Tp]: token rows of the requests left to vLLM's op (None: there are none)."""
    plain_query_start: torch.Tensor | None = None
    plain_seq_lens: torch.Tensor | None = None
    plain_block_table: torch.Tensor | None = None
    plain_scheduler: torch.Tensor | None = None


def _chain_masks(count: int) -> list[int]:
    """Causal masks of `count` rows as int64 values (row 63's is all 64 bits: -1)."""
    return [(1 << (i + 1)) - 1 if i < 63 else -1 for i in range(count)]


def _visible(step: TreeStep | None, starts: torch.Tensor, counts: torch.Tensor, num_tokens: int) -> torch.Tensor | None:
    """Per token row, its visibility mask: causal for every kernel request, the tree's ancestor
    masks for tree requests (None when the step has no tree: the kernel is causal then)."""
    if step is None or not step.has_tree_rows:
        return None
    visible = torch.zeros(num_tokens, dtype=torch.int64)
    for start, count in zip(starts.tolist(), counts.tolist()):
        visible[start : start + count] = torch.tensor(_chain_masks(count), dtype=torch.int64)
    weights = torch.tensor([1 << j for j in range(63)] + [-(1 << 63)], dtype=torch.int64)  # bit j of an int64
    for r in range(len(step.batch_rows)):
        n = int(step.num_nodes[r])
        bits = (step.tree_mask[r, :n, :n].to(torch.int64) * weights[:n]).sum(dim=1)
        visible[step.token_rows[r, :n]] = bits
    return visible


def build_plan(impl, layer, metadata, kv_cache: torch.Tensor) -> RowsPlan | None:
    """This step's split, or None where vLLM's op takes every request: no EntMTP runner, the
    kernel not turned on or unable to run here, no request it takes, or a tree too large for it."""
    if TREE_STEP_ATTR not in vars(metadata):
        return None
    least_context = rows.min_context()
    if least_context is None:
        return None
    if getattr(layer, "isa", None) != "vec" or impl.sliding_window != -1 or impl.alibi_slopes is not None:
        return None
    if impl.sinks is not None or impl.logits_soft_cap or impl.is_fp8_kv_cache or metadata.causal is not True:
        return None
    num_blocks, num_kv_heads, block_size, _ = kv_cache.shape
    if rows.unsupported(kv_cache.dtype, impl.head_size, block_size) or rows.load_library()[0] is None:
        return None
    step: TreeStep | None = getattr(metadata, TREE_STEP_ATTR)
    if step is not None and step.has_tree_rows and int(step.num_nodes.max()) > CPU_ROWS_ATTENTION.max_rows:
        return None
    num_reqs = len(metadata.seq_lens)
    starts = metadata.query_start_loc[: num_reqs + 1].to(torch.int64)
    counts = starts[1:] - starts[:-1]
    seq_lens = metadata.seq_lens[:num_reqs]
    taken = (counts >= 2) & (counts <= CPU_ROWS_ATTENTION.max_rows)
    if least_context:
        taken &= seq_lens >= least_context
    if not bool(taken.any()):
        return None
    plan = RowsPlan(
        row_start=starts[:-1][taken].contiguous(),
        row_count=counts[taken].to(torch.int32).contiguous(),
        seq_lens=seq_lens[taken].to(torch.int32).contiguous(),
        block_table=metadata.block_table[:num_reqs][taken].to(torch.int32).contiguous(),
        visible=_visible(step, starts[:-1][taken], counts[taken], metadata.num_actual_tokens),
    )
    plan.run = rows.prepare(plan.row_start, plan.row_count, plan.seq_lens, plan.block_table, plan.visible, impl.scale)
    plain = ~taken
    if bool(plain.any()):
        plain_counts = counts[plain]
        plan.plain_rows = torch.cat([torch.arange(int(s), int(s) + int(n)) for s, n in zip(starts[:-1][plain], plain_counts)])
        plan.plain_query_start = torch.zeros(len(plain_counts) + 1, dtype=torch.int32)
        plan.plain_query_start[1:] = torch.cumsum(plain_counts, 0)
        plan.plain_seq_lens = seq_lens[plain].to(torch.int32).contiguous()
        plan.plain_block_table = metadata.block_table[:num_reqs][plain].contiguous()
        plan.plain_scheduler = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=len(plain_counts), num_heads=impl.num_heads, num_kv_heads=num_kv_heads,
            head_dim=impl.head_size, seq_lens=plan.plain_seq_lens, dtype=kv_cache.dtype,
            query_start_loc=plan.plain_query_start, causal=True, sliding_window_size=-1, isa=layer.isa,
            enable_kv_split=False, kv_cache_dtype=impl.kv_cache_dtype,
        )
    return plan


def step_plan(impl, layer, metadata, kv_cache: torch.Tensor) -> RowsPlan | None:
    """`build_plan`, once per step (kept on the metadata every layer shares)."""
    if PLAN_ATTR not in vars(metadata):
        setattr(metadata, PLAN_ATTR, build_plan(impl, layer, metadata, kv_cache))
    return getattr(metadata, PLAN_ATTR)


def split_forward(impl, layer, plan: RowsPlan, query: torch.Tensor, kv_cache: torch.Tensor, output: torch.Tensor) -> None:
    """The layer's attention with the plan's split: vLLM's op on the plain sub-batch, EntMTP's
    kernel on the rest; both write `output` ([T, H * D] or [T, H, D])."""
    num_blocks, num_kv_heads, block_size, _ = kv_cache.shape
    out = output.view(output.shape[0], impl.num_heads, impl.head_size)
    if plan.plain_rows is not None:
        key_cache, value_cache = kv_cache.view(num_blocks, num_kv_heads, block_size * 2, -1).chunk(2, dim=2)
        plain_out = torch.empty(len(plan.plain_rows), impl.num_heads, impl.head_size, dtype=out.dtype)
        ops.cpu_attention_with_kv_cache(
            query=query.index_select(0, plan.plain_rows), key_cache=key_cache, value_cache=value_cache,
            output=plain_out, query_start_loc=plan.plain_query_start, seq_lens=plan.plain_seq_lens,
            scale=impl.scale, causal=True, alibi_slopes=None, sliding_window=-1,
            block_table=plan.plain_block_table, softcap=0.0, scheduler_metadata=plan.plain_scheduler,
            s_aux=None, k_scale=layer._k_scale_float, v_scale=layer._v_scale_float,
            kv_cache_dtype=impl.kv_cache_dtype,
        )
        out.index_copy_(0, plan.plain_rows, plain_out)
    plan.run(query, kv_cache, out)
