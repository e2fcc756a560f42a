"""`SampledRows`: a step's sampled requests verified together, depth by depth, over a kept buffer."""

from __future__ import annotations

import pytest
import torch

import entmtp_vllm.vllm_plugin.sampled_rows as sampled_rows
from entmtp_vllm.acceptance import LosslessWalk, accept_lossless_host
from entmtp_vllm.config import SamplingParams
from entmtp_vllm.sampling import processed_probs, sample
from entmtp_vllm.topology import build_tree_buffers
from entmtp_vllm.tree import Tree
from entmtp_vllm.vllm_plugin.sampled_rows import SampledRows

T07 = SamplingParams(temperature=0.7)
T1_TOPK = SamplingParams(temperature=1.0, top_k=5)
GREEDY = SamplingParams()
CHAIN = build_tree_buffers(Tree.from_choices([[0], [0, 0], [0, 0, 0]]))
BRANCHY = build_tree_buffers(Tree.from_choices([[0], [1], [0, 0], [1, 0]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_request_gets_its_row_processed_under_its_own_setting(dtype: torch.dtype) -> None:
    logits = (torch.randn(9, 300, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    params = [T07, T1_TOPK, T07, GREEDY]
    rows = {0: 5, 1: 2, 2: 0}  # request 3 (greedy) is not asked for
    out = SampledRows().compute(logits, rows, params)
    assert set(out) == {0, 1, 2}
    for i, row in rows.items():
        assert out[i].shape == (300,) and out[i].dtype == torch.float32
        assert torch.allclose(out[i], processed_probs(logits[row], params[i]), atol=1e-7)


def test_the_buffer_is_kept_and_grows_only_when_a_step_needs_more_rows() -> None:
    logits = torch.randn(12, 64)
    rows = SampledRows()
    first = rows.compute(logits, {0: 3, 1: 7}, [T07, T07])[0]
    again = rows.compute(logits, {0: 9}, [T07])[0]
    assert again.data_ptr() == first.data_ptr()  # the same buffer, no new [rows, V] tensor
    grown = rows.compute(logits, {i: i for i in range(12)}, [T07] * 12)
    assert all(torch.allclose(grown[i], processed_probs(logits[i], T07)) for i in range(12))
    assert rows.compute(logits, {}, [T07]) == {}


def _step(seed: int, vocab: int = 40):
    """A step of four sampled requests: a chain, a branching tree, a request without a tree,
    and a chain with top-k sampling; rows laid out as vLLM lays them out (each request's rows
    in node order, one after another)."""
    g = torch.Generator().manual_seed(seed)
    trees = [CHAIN, BRANCHY, None, CHAIN]
    params = [T07, T07, T07, T1_TOPK]
    sizes = [1 if tree is None else tree.num_nodes for tree in trees]
    logits = torch.randn(sum(sizes), vocab, generator=g) * 2
    roots = [sum(sizes[:i]) for i in range(4)]
    tokens = []
    for tree, root, size in zip(trees, roots, sizes):
        if tree is None:
            tokens.append(None)
            continue
        # drafts: mostly the parent row's argmax, so walks go deep and also stop early
        picked = [0] + [int(logits[root + tree.parent_list[j]].argmax()) if torch.rand(1, generator=g) < 0.7
                        else int(torch.randint(0, vocab, (1,), generator=g)) for j in range(1, size)]
        tokens.append(picked)
    return trees, params, logits, roots, tokens


def test_verify_makes_each_requests_own_walk_and_processes_only_the_rows_reached(monkeypatch) -> None:
    """Every request gets what its own walk over all its rows gives (the same generator seeds):
    the path and bonus of `accept_lossless_host`, or for the request without a tree the token
    `sample` draws from its processed root row. Only the rows the walks reach are processed."""
    processed = []
    real = sampled_rows.processed_probs

    def counting(rows, params, out=None):
        processed.append(rows.shape[0])
        return real(rows, params, out=out)

    monkeypatch.setattr(sampled_rows, "processed_probs", counting)
    reached = 0
    lengths = set()
    verifier = SampledRows()
    for seed in range(60):
        trees, params, logits, roots, tokens = _step(seed)
        generators = {i: torch.Generator().manual_seed(100 * seed + i) for i in range(4)}
        walks = {i: None if tree is None else LosslessWalk(tree, tokens[i], generators[i]) for i, tree in enumerate(trees)}
        results = verifier.verify(logits, dict(enumerate(roots)), walks, params, generators)
        for i, tree in enumerate(trees):
            own = torch.Generator().manual_seed(100 * seed + i)
            if tree is None:
                expected_token = sample(processed_probs(logits[roots[i]], params[i]), own)
                assert results[i].accepted == [0] and results[i].bonus_token == expected_token
                reached += 1
                continue
            rows = processed_probs(logits[roots[i] : roots[i] + tree.num_nodes], params[i])
            assert results[i] == accept_lossless_host(tree, tokens[i], rows, own)
            reached += len(results[i].accepted)
            lengths.add(len(results[i].accepted))
    assert lengths >= {1, 2, 3}  # walks stopped at the root, went deeper, and reached a leaf
    assert sum(processed) == reached
