"""The CUDA tree path (`cuda/attention.py`, `cuda/kernels.py`) on CPU: vLLM 0.32's FLASH_ATTN / TRITON_ATTN
cache layout, the Triton kernels under TRITON_INTERPRET=1 (and their torch references), against a
dense torch reference.

A step's batch mixes a prefill chunk, a chain request, an ordinary decode row and two branching
trees; block tables are shuffled, attention is GQA. The cache is what vLLM hands each layer:
logical `(blocks, Hkv, block_size, 2 * D)`, physically HND (contiguous) or NHD (a permuted view).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.triton]

pytest.importorskip("vllm")
kernels = pytest.importorskip("entmtp_kernels")

from entmtp_vllm.topology import build_tree_buffers  # noqa: E402
from entmtp_vllm.tree import Tree  # noqa: E402
from entmtp_vllm.vllm_plugin.cuda.kernels import (  # noqa: E402
    compact_kv_gpu,
    compaction_views,
    kernel_block_table,
    split_kv,
)
from entmtp_vllm.vllm_plugin.cuda.attention import apply_tree_rows  # noqa: E402
from entmtp_vllm.vllm_plugin.tree_step import TREE_STEP_ATTR, TreeStep  # noqa: E402

HKV, GROUP, D, BLOCK = 2, 2, 64, 16
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# (kind, context tokens before this step, tree spec or query length)
REQUESTS = [("prefill", 0, 19), ("tree", 21, "full:2,1"), ("decode", 40, 1), ("chain", 7, 4), ("tree", 5, "full:3,2")]


def _vllm_cache(num_blocks: int, layout: str) -> torch.Tensor:
    """A layer's cache as vLLM's CUDA backends receive it: logical (B, Hkv, N, 2D)."""
    if layout == "HND":
        return torch.zeros(num_blocks, HKV, BLOCK, 2 * D)
    return torch.zeros(num_blocks, BLOCK, HKV, 2 * D).permute(0, 2, 1, 3)  # NHD physically


def _case(layout: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    sizes, trees = [], []
    for kind, _, what in REQUESTS:
        tree = build_tree_buffers(Tree.from_spec(what)) if kind == "tree" else None
        trees.append(tree)
        sizes.append(tree.num_nodes if tree else what)
    seq_lens = [ctx + n for (_, ctx, _), n in zip(REQUESTS, sizes)]
    per = [-(-s // BLOCK) for s in seq_lens]
    order = torch.randperm(sum(per) + 3, generator=gen)
    table = torch.zeros(len(REQUESTS), max(per), dtype=torch.int32)
    used = 0
    for r, n in enumerate(per):
        table[r, :n] = order[used : used + n].int()
        used += n
    cache = _vllm_cache(sum(per) + 3, layout)
    key_cache, value_cache = split_kv(cache, D)
    kv = []
    for r, s in enumerate(seq_lens):
        k, v = torch.randn(s, HKV, D, generator=gen), torch.randn(s, HKV, D, generator=gen)
        pos = torch.arange(s)
        key_cache[table[r, pos // BLOCK].long(), pos % BLOCK] = k
        value_cache[table[r, pos // BLOCK].long(), pos % BLOCK] = v
        kv.append((k, v))
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n)
    query = torch.randn(starts[-1], HKV * GROUP, D, generator=gen)
    tree_rows = [r for r, t in enumerate(trees) if t is not None]
    nmax = max(trees[r].num_nodes for r in tree_rows)
    rows = torch.zeros(len(tree_rows), nmax, dtype=torch.long)
    valid = torch.zeros(len(tree_rows), nmax, dtype=torch.bool)
    mask = torch.eye(nmax, dtype=torch.bool).repeat(len(tree_rows), 1, 1)
    for i, r in enumerate(tree_rows):
        n = trees[r].num_nodes
        rows[i] = starts[r]
        rows[i, :n] = torch.arange(starts[r], starts[r] + n)
        valid[i, :n] = True
        mask[i, :n, :n] = trees[r].attention_mask
    step = TreeStep(torch.tensor(tree_rows), rows, valid, mask, torch.tensor([trees[r].num_nodes for r in tree_rows]))
    return SimpleNamespace(trees=trees, sizes=sizes, seq_lens=seq_lens, table=table, cache=cache, kv=kv,
                           starts=starts, query=query, step=step)


def _dense(case, r: int, softcap: float = 0.0) -> torch.Tensor:
    """Request r's attention output: causal over the prefix and its own rows, or its tree mask
    (scores soft-capped to softcap * tanh(score / softcap) when softcap > 0)."""
    ctx, n = REQUESTS[r][1], case.sizes[r]
    visible = torch.ones(n, ctx + n, dtype=torch.bool)
    tree = case.trees[r]
    visible[:, ctx:] = tree.attention_mask if tree is not None else torch.ones(n, n, dtype=torch.bool).tril()
    q = case.query[case.starts[r] : case.starts[r] + n].view(n, HKV, GROUP, D)
    k, v = case.kv[r]
    scores = torch.einsum("nkgd,lkd->kgnl", q, k) * D**-0.5
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
    return torch.einsum("kgnl,lkd->nkgd", probs, v).reshape(n, HKV * GROUP, D)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("kernel", ["triton", "reference"])
@pytest.mark.parametrize("softcap", [0.0, 1.5])
def test_tree_rows_on_vllm_cache_layouts(layout, kernel, softcap, monkeypatch):
    if kernel == "triton" and not INTERPRETED:
        pytest.skip("the Triton kernel runs on CPU only under TRITON_INTERPRET=1")
    if kernel == "reference":
        from entmtp_vllm.vllm_plugin.cuda import kernels as gpu

        monkeypatch.setattr(gpu, "tree_rows_attention_gpu", _with_reference(gpu.tree_rows_attention_gpu))
        import entmtp_vllm.vllm_plugin.cuda.attention as gpu_attention

        monkeypatch.setattr(gpu_attention, "tree_rows_attention_gpu", gpu.tree_rows_attention_gpu)
    case = _case(layout)
    # The stock kernel's output for every row (causal): what vLLM's FLASH_ATTN/TRITON_ATTN leave.
    stock = torch.cat([_dense_causal(case, r, softcap) for r in range(len(REQUESTS))])
    output = stock.clone()
    metadata = SimpleNamespace(seq_lens=torch.tensor(case.seq_lens, dtype=torch.int32), block_table=case.table)
    impl = SimpleNamespace(head_size=D, scale=D**-0.5, attn_type="decoder", logits_soft_cap=softcap or None)
    apply_tree_rows(impl, case.query, case.cache, metadata, output)
    assert torch.equal(output, stock)  # no TreeStep on the metadata: the stock result stands
    setattr(metadata, TREE_STEP_ATTR, case.step)
    apply_tree_rows(impl, case.query, case.cache, metadata, output)
    for r, (kind, _, _) in enumerate(REQUESTS):
        rows = slice(case.starts[r], case.starts[r + 1])
        if kind == "tree":
            torch.testing.assert_close(output[rows], _dense(case, r, softcap), atol=2e-5, rtol=2e-5)
            if softcap:  # the cap changed the result: it is applied, not ignored
                assert not torch.allclose(output[rows], _dense(case, r), atol=1e-3)
        else:  # prefill, decode and chain rows keep the stock kernel's result, bit for bit
            assert torch.equal(output[rows], stock[rows])
    assert "gpu_inputs" in case.step.cache  # built once per step, reused by the next layer


def _dense_causal(case, r: int, softcap: float = 0.0) -> torch.Tensor:
    saved = case.trees[r]
    case.trees[r] = None
    try:
        return _dense(case, r, softcap)
    finally:
        case.trees[r] = saved


def _with_reference(function):
    def call(*args, **kwargs):
        return function(*args, kernel=kernels.paged_tree_attention_ref, **kwargs)

    return call


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("kernel", ["triton", "reference"])
def test_compaction_moves_paths_in_every_layer_and_head(layout, kernel):
    if kernel == "triton" and not INTERPRETED:
        pytest.skip("the Triton kernel runs on CPU only under TRITON_INTERPRET=1")
    case = _case(layout, seed=1)
    layers = [case.cache.clone(), case.cache.clone()]
    if layout == "NHD":
        layers = [layer.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3) for layer in layers]
    tree_rows = [1, 4]
    accepted = [[0, 2], [0, 3, 8]]  # both skip a sibling
    prefix = [REQUESTS[r][1] for r in tree_rows]
    untouched = [layer.clone() for layer in layers]
    compact_kv_gpu(layers, accepted, prefix, case.table[tree_rows],
                   kernel=kernels.compact_kv if kernel == "triton" else kernels.compact_kv_ref)
    moved = set()
    for layer in layers:
        key_cache, value_cache = split_kv(layer, D)
        for r, path, ctx in zip(tree_rows, accepted, prefix):
            for i, node in enumerate(path):
                p = ctx + i
                block, slot = case.table[r, p // BLOCK].long(), p % BLOCK
                torch.testing.assert_close(key_cache[block, slot], case.kv[r][0][ctx + node], atol=0, rtol=0)
                torch.testing.assert_close(value_cache[block, slot], case.kv[r][1][ctx + node], atol=0, rtol=0)
                moved.add((int(block), int(slot)))
    for layer, before in zip(layers, untouched):  # nothing else changed
        for block in range(layer.shape[0]):
            for slot in range(BLOCK):
                if (block, slot) not in moved:
                    assert torch.equal(layer[block, :, slot], before[block, :, slot])


def test_compaction_views_cover_each_head_once():
    cache, other = _vllm_cache(4, "HND"), _vllm_cache(4, "HND")
    views = compaction_views([cache, other])
    assert len(views) == 2 * HKV and all(tuple(v.shape) == (4, BLOCK, 1, 2 * D) for v in views)
    views[1][2, 3, 0, :] = 7.0  # layer 0, head 1, block 2, slot 3: K and V channels
    assert torch.all(cache[2, 1, 3] == 7.0) and cache.sum() == 7.0 * 2 * D
    # a layer that reads another layer's KV is bound to the same tensor: its memory once
    assert len(compaction_views([cache, other, cache])) == 2 * HKV


@pytest.mark.parametrize("kernel", ["triton", "reference"])
def test_compaction_moves_a_shared_cache_once(kernel):
    """Cross-layer KV sharing: vLLM lists a layer that reads another layer's KV with that layer's
    tensor (`bind_kv_cache`). Moving that memory twice would move moved rows again: a path
    [0, 2, 3] moves node 2 to 1 and node 3 to 2, and a second pass would copy node 3 to 1."""
    if kernel == "triton" and not INTERPRETED:
        pytest.skip("the Triton kernel runs on CPU only under TRITON_INTERPRET=1")
    case = _case("HND", seed=2)
    shared, alone = case.cache.clone(), case.cache.clone()
    accepted, r = [[0, 2, 3]], 4
    ctx = REQUESTS[r][1]
    run = kernels.compact_kv if kernel == "triton" else kernels.compact_kv_ref
    compact_kv_gpu([shared, alone, shared], accepted, [ctx], case.table[[r]], kernel=run)
    for layer in (shared, alone):
        key_cache, _ = split_kv(layer, D)
        for i, node in enumerate(accepted[0]):
            p = ctx + i
            assert torch.equal(key_cache[case.table[r, p // BLOCK].long(), p % BLOCK], case.kv[r][0][ctx + node])


def test_kernel_block_table_splits_manager_blocks():
    table = torch.tensor([[5, 2]], dtype=torch.int32)
    assert kernel_block_table(table, 32, 32) is table
    assert kernel_block_table(table, 32, 16).tolist() == [[10, 11, 4, 5]]
