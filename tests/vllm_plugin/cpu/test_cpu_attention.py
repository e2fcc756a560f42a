"""Tree rows of the CPU attention backend against the stock kernel and a dense reference.

No engine: K/V are written through vLLM's real `cpu_attn_reshape_and_cache` into a paged cache
with a shuffled block table, so the ISA-dependent block layout is exercised for real.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.vllm

ops = pytest.importorskip("vllm._custom_ops")

from entmtp_vllm.topology import build_tree_buffers  # noqa: E402
from entmtp_vllm.tree import Tree  # noqa: E402
from entmtp_vllm.vllm_plugin.cpu import attention  # noqa: E402
from entmtp_vllm.vllm_plugin.cpu.attention import (  # noqa: E402
    TreeStep,
    block_layout,
    compact_kv_cpu,
    tree_rows_attention,
    CapturedKV,
)

HKV, GROUP, D, BLOCK = 3, 3, 64, 32
ISA = "vec"


def _isa(dtype: torch.dtype) -> str:
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    return _get_attn_isa(dtype, BLOCK, D, "auto")


def _setup(dtype, contexts, trees, seed=0):
    """Paged cache holding every request's context + tree K/V; queries for the tree rows."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [t.num_nodes for t in trees]
    seq_lens = [c + n for c, n in zip(contexts, sizes)]
    blocks_per_req = [-(-s // BLOCK) for s in seq_lens]
    num_blocks = sum(blocks_per_req) + 3
    order = torch.randperm(num_blocks, generator=gen)
    block_table = torch.zeros(len(trees), max(blocks_per_req), dtype=torch.int32)
    used = 0
    for r, nb in enumerate(blocks_per_req):
        block_table[r, :nb] = order[used : used + nb].to(torch.int32)
        used += nb
    isa = _isa(dtype)
    cache = torch.zeros(num_blocks, HKV, BLOCK, 2 * D, dtype=dtype)
    view = cache.view(num_blocks, HKV, 2 * BLOCK, D)
    key_cache, value_cache = view.chunk(2, dim=2)
    keys, values = [], []
    for r, s in enumerate(seq_lens):
        k = torch.randn(s, HKV, D, generator=gen).to(dtype)
        v = torch.randn(s, HKV, D, generator=gen).to(dtype)
        pos = torch.arange(s)
        slots = block_table[r, pos // BLOCK].long() * BLOCK + pos % BLOCK
        ops.cpu_attn_reshape_and_cache(k, v, key_cache, value_cache, slots, isa)
        keys.append(k)
        values.append(v)
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n)
    query = torch.randn(starts[-1], HKV * GROUP, D, generator=gen).to(dtype)
    metadata = SimpleNamespace(
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_table=block_table,
        query_start_loc=torch.tensor(starts, dtype=torch.int32),
    )
    return cache, keys, values, query, metadata, starts, isa


def _step(trees, starts):
    nmax = max(t.num_nodes for t in trees)
    rows = torch.zeros(len(trees), nmax, dtype=torch.long)
    valid = torch.zeros(len(trees), nmax, dtype=torch.bool)
    mask = torch.eye(nmax, dtype=torch.bool).repeat(len(trees), 1, 1)
    for r, t in enumerate(trees):
        n = t.num_nodes
        rows[r] = starts[r]
        rows[r, :n] = torch.arange(starts[r], starts[r] + n)
        valid[r, :n] = True
        mask[r, :n, :n] = t.attention_mask
    return TreeStep(
        batch_rows=torch.arange(len(trees)),
        token_rows=rows,
        node_valid=valid,
        tree_mask=mask,
        num_nodes=torch.tensor([t.num_nodes for t in trees]),
    )


def _impl(soft_cap: float = 0):
    return SimpleNamespace(num_heads=HKV * GROUP, head_size=D, scale=D**-0.5, logits_soft_cap=soft_cap)


def _dense(query, keys, values, trees, contexts, starts, soft_cap=0):
    out = torch.zeros(query.shape, dtype=torch.float32)
    for r, t in enumerate(trees):
        n, c = t.num_nodes, contexts[r]
        visible = torch.ones(n, c + n, dtype=torch.bool)
        visible[:, c:] = t.attention_mask
        q = query[starts[r] : starts[r] + n].float().view(n, HKV, GROUP, D)
        k, v = keys[r].float(), values[r].float()
        scores = torch.einsum("nkgd,lkd->kgnl", q, k) * D**-0.5
        if soft_cap:
            scores = soft_cap * torch.tanh(scores / soft_cap)
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        out[starts[r] : starts[r] + n] = torch.einsum("kgnl,lkd->nkgd", probs, v).reshape(n, HKV * GROUP, D)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layout_probe_is_a_permutation(dtype):
    k_off, v_off = block_layout(HKV, BLOCK, D, dtype, _isa(dtype))
    both = torch.cat([k_off, v_off]).sort().values
    assert torch.equal(both, torch.arange(2 * HKV * BLOCK * D))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_tree_matches_stock_kernel(dtype):
    """A chain's ancestor mask is causal: the torch rows must equal the C++ kernel's."""
    contexts = [37, 70, 5]
    trees = [build_tree_buffers(Tree.from_spec(s)) for s in ("chain:4", "chain:6", "chain:2")]
    cache, keys, values, query, meta, starts, isa = _setup(dtype, contexts, trees)
    num_blocks = cache.shape[0]
    view = cache.view(num_blocks, HKV, 2 * BLOCK, D)
    key_cache, value_cache = view.chunk(2, dim=2)
    scheduler = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(trees), num_heads=HKV * GROUP, num_kv_heads=HKV, head_dim=D, seq_lens=meta.seq_lens,
        dtype=dtype, query_start_loc=meta.query_start_loc, causal=True, sliding_window_size=-1, isa=isa,
        enable_kv_split=False,
    )
    stock = torch.zeros_like(query)
    ops.cpu_attention_with_kv_cache(
        query=query, key_cache=key_cache, value_cache=value_cache, output=stock,
        query_start_loc=meta.query_start_loc, seq_lens=meta.seq_lens, scale=D**-0.5, causal=True,
        alibi_slopes=None, sliding_window=-1, block_table=meta.block_table, softcap=0,
        scheduler_metadata=scheduler, s_aux=None,
    )
    ours = torch.zeros_like(query)
    tree_rows_attention(_impl(), SimpleNamespace(isa=isa), _step(trees, starts), query, cache, meta, ours)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(ours.float(), stock.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("soft_cap", [0, 5.0])
@pytest.mark.parametrize("strided", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tree_mask_matches_dense_reference(dtype, strided, soft_cap, monkeypatch):
    """Both ways of reading K/V: strided views (affine layouts) and index gathers (any layout);
    the fused kernel, and the matmul path that applies a logits soft cap."""
    monkeypatch.setattr(attention, "USE_STRIDED_VIEWS", strided)
    contexts = [33, 64, 9]
    trees = [build_tree_buffers(Tree.from_spec(s)) for s in ("full:2,1,1", "full:3,2", "full:2^2")]
    cache, keys, values, query, meta, starts, isa = _setup(dtype, contexts, trees, seed=1)
    ours = torch.zeros_like(query)
    tree_rows_attention(_impl(soft_cap), SimpleNamespace(isa=isa), _step(trees, starts), query, cache, meta, ours)
    expected = _dense(query, keys, values, trees, contexts, starts, soft_cap)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(ours.float(), expected, atol=tol, rtol=tol)


def test_compaction_moves_accepted_rows():
    """Accepted nodes [0, 2, 5] of a tree move to the slots of nodes 0, 1, 2."""
    dtype = torch.float32
    tree = build_tree_buffers(Tree.from_spec("full:2,1,1"))
    cache, keys, values, query, meta, starts, isa = _setup(dtype, [40], [tree], seed=2)
    n = tree.num_nodes
    fresh_k, fresh_v = keys[0][40:].clone(), values[0][40:].clone()
    step = _step([tree], starts)
    step.captured.append(
        CapturedKV(layer=SimpleNamespace(isa=isa, _k_scale_float=1.0, _v_scale_float=1.0), kv_cache=cache,
                   kv_cache_dtype="auto", key=fresh_k, value=fresh_v)
    )
    pos = torch.arange(40, 40 + n)
    slots = meta.block_table[0, pos // BLOCK].long() * BLOCK + pos % BLOCK
    accepted = [0, 2, 4]
    moves = [(a, j) for j, a in enumerate(accepted) if a != j]
    compact_kv_cpu(step, torch.tensor([a for a, _ in moves]), slots[torch.tensor([j for _, j in moves])])
    k_off, v_off = block_layout(HKV, BLOCK, D, dtype, isa)
    flat = cache.reshape(cache.shape[0], -1)
    for j, a in enumerate(accepted):
        p = 40 + j
        block = int(meta.block_table[0, p // BLOCK])
        got_k = flat[block, k_off].view(BLOCK, HKV, D)[p % BLOCK]
        got_v = flat[block, v_off].view(BLOCK, HKV, D)[p % BLOCK]
        torch.testing.assert_close(got_k, fresh_k[a])
        torch.testing.assert_close(got_v, fresh_v[a])
