"""The GPU call sites (`vllm_plugin/gpu.py`) against dense references, with the kernels' torch
references standing in for the Triton kernels (no GPU here)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")
kernels = pytest.importorskip("entmtp_kernels")

from entmtp_vllm.topology import build_tree_buffers  # noqa: E402
from entmtp_vllm.tree import Tree  # noqa: E402
from entmtp_vllm.vllm_plugin.attention import TreeStep  # noqa: E402
from entmtp_vllm.vllm_plugin.gpu import compact_kv_gpu, tree_rows_attention_gpu  # noqa: E402

HKV, GROUP, D, BLOCK = 2, 2, 32, 16


def _case(seed=0):
    gen = torch.Generator().manual_seed(seed)
    trees = [build_tree_buffers(Tree.from_spec(s)) for s in ("full:2,1", "full:3,2")]
    contexts = [21, 5]
    seq_lens = [c + t.num_nodes for c, t in zip(contexts, trees)]
    per = [-(-s // BLOCK) for s in seq_lens]
    order = torch.randperm(sum(per) + 2, generator=gen)
    table = torch.zeros(2, max(per), dtype=torch.int32)
    table[0, : per[0]] = order[: per[0]].int()
    table[1, : per[1]] = order[per[0] : per[0] + per[1]].int()
    cache = torch.zeros(2, sum(per) + 2, BLOCK, HKV, D)
    kv = []
    for r, s in enumerate(seq_lens):
        k, v = torch.randn(s, HKV, D, generator=gen), torch.randn(s, HKV, D, generator=gen)
        pos = torch.arange(s)
        cache[0, table[r, pos // BLOCK].long(), pos % BLOCK] = k
        cache[1, table[r, pos // BLOCK].long(), pos % BLOCK] = v
        kv.append((k, v))
    starts = [0, trees[0].num_nodes, trees[0].num_nodes + trees[1].num_nodes]
    query = torch.randn(starts[-1], HKV * GROUP, D, generator=gen)
    nmax = max(t.num_nodes for t in trees)
    rows = torch.zeros(2, nmax, dtype=torch.long)
    valid = torch.zeros(2, nmax, dtype=torch.bool)
    mask = torch.eye(nmax, dtype=torch.bool).repeat(2, 1, 1)
    for r, t in enumerate(trees):
        rows[r] = starts[r]
        rows[r, : t.num_nodes] = torch.arange(starts[r], starts[r] + t.num_nodes)
        valid[r, : t.num_nodes] = True
        mask[r, : t.num_nodes, : t.num_nodes] = t.attention_mask
    step = TreeStep(torch.arange(2), rows, valid, mask, torch.tensor([t.num_nodes for t in trees]))
    return trees, contexts, seq_lens, table, cache, kv, starts, query, step


def test_tree_rows_match_dense_reference():
    trees, contexts, seq_lens, table, cache, kv, starts, query, step = _case()
    out = torch.zeros_like(query)
    tree_rows_attention_gpu(step, query, cache, torch.tensor(seq_lens), table, D**-0.5, out,
                            kernel=kernels.paged_tree_attention_ref)
    for r, t in enumerate(trees):
        n, c = t.num_nodes, contexts[r]
        visible = torch.ones(n, c + n, dtype=torch.bool)
        visible[:, c:] = t.attention_mask
        q = query[starts[r] : starts[r] + n].view(n, HKV, GROUP, D)
        k, v = kv[r]
        probs = (torch.einsum("nkgd,lkd->kgnl", q, k) * D**-0.5).masked_fill(~visible, float("-inf")).softmax(-1)
        expected = torch.einsum("kgnl,lkd->nkgd", probs, v).reshape(n, HKV * GROUP, D)
        torch.testing.assert_close(out[starts[r] : starts[r] + n], expected, atol=1e-5, rtol=1e-5)


def test_compaction_moves_paths_in_every_layer():
    trees, contexts, seq_lens, table, cache, kv, starts, query, step = _case(1)
    layers = [cache.clone(), cache.clone()]
    accepted = [[0, 2], [0, 3, 8]]
    compact_kv_gpu(layers, accepted, contexts, table, kernel=kernels.compact_kv_ref)
    for layer in layers:
        for r, path in enumerate(accepted):
            for i, node in enumerate(path):
                p = contexts[r] + i
                got = layer[:, table[r, p // BLOCK].long(), p % BLOCK]
                torch.testing.assert_close(got[0], kv[r][0][contexts[r] + node])
                torch.testing.assert_close(got[1], kv[r][1][contexts[r] + node])
