"""`SampledRows`: a step's sampled requests drawn from together, depth by depth, each draw the one
vLLM's own sampler makes for that request's row without speculation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from entmtp_vllm.acceptance import TokenWalk, accept_drawn
from entmtp_vllm.topology import build_tree_buffers
from entmtp_vllm.tree import Tree
from entmtp_vllm.vllm_plugin.sampled_rows import RowSettings, SampledRows, apply_logit_bias, apply_min_p

pytestmark = pytest.mark.vllm

VOCAB = 256
# what vLLM's min_p processor reads of the engine config (its batch size)
_CONFIG = type("Config", (), {"scheduler_config": type("Scheduler", (), {"max_num_seqs": 8})()})()
CHAIN = build_tree_buffers(Tree.from_choices([[0], [0, 0], [0, 0, 0]]))
BRANCHY = build_tree_buffers(Tree.from_choices([[0], [1], [0, 0], [1, 0]]))


@pytest.fixture(scope="module")
def sampler():
    from vllm.v1.sample.sampler import Sampler

    return Sampler()


def _settings(count: int, seeds: dict[int, int], top_k: bool = True, top_p: bool = True, min_p: bool = True):
    """Four kinds of request, cycled: T=0.7; T=1 with top-k 20; T=0.9 with top-p 0.8; T=1.1 with min_p 0.05."""
    temperature = np.array([(0.7, 1.0, 0.9, 1.1)[i % 4] for i in range(count)], dtype=np.float32)
    k = np.array([20 if i % 4 == 1 else VOCAB for i in range(count)], dtype=np.int32)
    p = np.array([0.8 if i % 4 == 2 else 1.0 for i in range(count)], dtype=np.float32)
    m = np.array([0.05 if i % 4 == 3 else 0.0 for i in range(count)], dtype=np.float32)
    return RowSettings(temperature, k if top_k else None, p if top_p else None, m if min_p else None,
                       {i: torch.Generator().manual_seed(seed) for i, seed in seeds.items()})


def _vllm_steps(sampler, row: torch.Tensor, settings: RowSettings, i: int):
    """vLLM's sampler steps before the draw, for request i's `row` alone (a batch of one): the
    temperature and vLLM's own min_p processor; returns (logits, top-k, top-p) for the draw."""
    from vllm.v1.sample.logits_processor.builtin import MinPLogitsProcessor

    logits = sampler.apply_temperature(row.float().clone().unsqueeze(0), torch.tensor(settings.temperature[[i]]), True)
    if settings.min_p is not None:
        processor = MinPLogitsProcessor(_CONFIG, torch.device("cpu"), False)
        processor.min_p, processor.min_p_count = torch.tensor(settings.min_p[[i]]).unsqueeze(1), 1
        logits = processor.apply(logits)
    k = None if settings.top_k is None else torch.tensor(settings.top_k[[i]])
    p = None if settings.top_p is None else torch.tensor(settings.top_p[[i]])
    return logits, k, p


def _vllm_draw(sampler, row: torch.Tensor, settings: RowSettings, i: int, generator) -> int:
    """What vLLM's sampler draws for request i from `row` alone, with `generator`."""
    logits, k, p = _vllm_steps(sampler, row, settings, i)
    return int(sampler.topk_topp_sampler(logits, {0: generator} if generator is not None else {}, k, p)[0][0])


def test_min_p_and_logit_bias_do_what_vllms_processors_do() -> None:
    from vllm.v1.sample.logits_processor.builtin import LogitBiasLogitsProcessor, MinPLogitsProcessor

    logits = torch.randn(5, VOCAB, generator=torch.Generator().manual_seed(3)) * 4
    min_p = torch.tensor([[0.0], [0.05], [0.2], [0.0], [0.9]])
    processor = MinPLogitsProcessor(_CONFIG, torch.device("cpu"), False)
    processor.min_p, processor.min_p_count = min_p, 4
    expected = processor.apply(logits.clone())
    got = apply_min_p(logits.clone(), min_p)
    assert torch.equal(got, expected) and bool((got == -float("inf")).any())

    bias = {7: 3.5, 100: -100.0, 255: 0.25}
    processor = LogitBiasLogitsProcessor(None, torch.device("cpu"), False)
    processor.biases = {1: bias, 2: bias}
    processor.bias_tensor = torch.tensor(list(bias.values()) * 2, dtype=torch.float32)
    processor.logits_slice = (torch.tensor([1, 1, 1, 2, 2, 2]), torch.tensor(list(bias) * 2))
    expected = processor.apply(logits.clone())
    got = logits.clone()
    apply_logit_bias(got, slice(1, 3), bias)
    assert torch.equal(got, expected) and not torch.equal(got, logits)


@pytest.mark.parametrize("kinds", [(True, True, True), (False, False, False), (True, False, True)],
                         ids=["top-k,top-p,min_p", "temperature-only", "top-k,min_p"])
def test_each_draw_is_vllms_draw_for_that_row_whatever_else_is_drawn(sampler, kinds) -> None:
    """Seeded requests drawn together in any grouping get what vLLM's sampler draws for each row
    alone with the request's generator; their generators advance exactly as much."""
    logits = torch.randn(12, VOCAB, generator=torch.Generator().manual_seed(5)) * 3
    seeds = {i: 100 + i for i in range(8)}
    rows = SampledRows(sampler)
    for grouping in ([[0, 1, 2, 3, 4, 5, 6, 7]], [[3], [0, 5], [7, 1, 2], [6, 4]]):
        settings = _settings(8, seeds, *kinds)
        got: dict[int, int] = {}
        for group in grouping:
            got.update(rows.draw(logits, {i: 11 - i for i in group}, settings))
        for i in range(8):
            own = torch.Generator().manual_seed(seeds[i])
            assert got[i] == _vllm_draw(sampler, logits[11 - i], settings, i, own), (grouping, i)
            assert torch.equal(settings.generators[i].get_state(), own.get_state())


def test_seeded_rows_keep_vllms_draws_beside_unseeded_ones(sampler) -> None:
    """In a block where only some requests are seeded (the others drawn on the CPU with one uniform
    each), every seeded request still gets vLLM's own draw and nothing else from its generator."""
    logits = torch.randn(12, VOCAB, generator=torch.Generator().manual_seed(6)) * 3
    seeds = {1: 41, 4: 44, 6: 46}
    settings = _settings(8, seeds)
    got = SampledRows(sampler).draw(logits, {i: 11 - i for i in range(8)}, settings)
    assert set(got) == set(range(8)) and all(0 <= t < VOCAB for t in got.values())
    for i, seed in seeds.items():
        own = torch.Generator().manual_seed(seed)
        assert got[i] == _vllm_draw(sampler, logits[11 - i], settings, i, own)
        assert torch.equal(settings.generators[i].get_state(), own.get_state())


def _vllm_distribution(sampler, row: torch.Tensor, settings: RowSettings, i: int) -> torch.Tensor:
    """The distribution vLLM's sampler draws request i's token from (its steps up to the softmax)."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

    logits, k, p = _vllm_steps(sampler, row, settings, i)
    return apply_top_k_top_p(logits, k, p).softmax(dim=-1)[0].double()


@pytest.mark.parametrize("kind", [0, 1, 2, 3], ids=["T0.7", "top-k", "top-p", "min_p"])
def test_unseeded_draws_follow_vllms_distribution(sampler, kind) -> None:
    """Unseeded requests (drawn on the CPU with one uniform each) follow the distribution vLLM's
    sampler draws from, whatever their temperature, top-k, top-p or min_p: a chi-square test over
    20000 draws of one row; the negative control (the row at another temperature) fails it."""
    from scipy.stats import chisquare

    row = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(kind)) * 2
    count = 4000
    settings = _settings(4 * count, {})
    mine = [i for i in range(4 * count) if i % 4 == kind]
    drawn: list[int] = []
    rows = SampledRows(sampler)
    for _ in range(20):
        drawn += rows.draw(row, {i: 0 for i in mine[: count // 4]}, settings).values()
    counts = torch.bincount(torch.tensor(drawn), minlength=VOCAB).double()
    for temperature, should_pass in ((None, True), (2.5, False)):
        if temperature is not None:
            settings.temperature[kind] = temperature
        expected = _vllm_distribution(sampler, row[0], settings, kind)
        assert counts[expected == 0].sum() == 0 or not should_pass
        keep = expected * len(drawn) >= 5
        observed, wanted = counts[keep], expected[keep] * len(drawn)
        p_value = chisquare(observed.tolist(), (wanted * observed.sum() / wanted.sum()).tolist()).pvalue
        assert (p_value > 1e-3) == should_pass, (temperature, p_value)


def _step(seed: int):
    """A step of four sampled requests: a chain, a branching tree, a request without a tree, and a
    chain with top-k; rows laid out as vLLM lays them out (each request's rows in node order)."""
    g = torch.Generator().manual_seed(seed)
    trees = [CHAIN, BRANCHY, None, CHAIN]
    sizes = [1 if tree is None else tree.num_nodes for tree in trees]
    logits = torch.randn(sum(sizes), VOCAB, generator=g) * 4
    roots = [sum(sizes[:i]) for i in range(4)]
    tokens = []
    for tree, root, size in zip(trees, roots, sizes):
        if tree is None:
            tokens.append(None)
            continue
        # drafts: mostly the parent row's argmax, so walks go deep and also stop early
        tokens.append([0] + [int(logits[root + tree.parent_list[j]].argmax()) if torch.rand(1, generator=g) < 0.8
                             else int(torch.randint(0, VOCAB, (1,), generator=g)) for j in range(1, size)])
    return trees, logits, roots, tokens


def test_verify_walks_each_request_with_one_vllm_draw_per_emitted_token(sampler) -> None:
    """Every request gets what its own walk gives when each node's token is vLLM's draw from that
    node's row with the request's generator (`accept_drawn`), or for the request without a tree
    vLLM's one draw from its root row; each generator advanced once per emitted token."""
    verifier = SampledRows(sampler)
    lengths = set()
    for seed in range(40):
        trees, logits, roots, tokens = _step(seed)
        settings = _settings(4, {0: seed, 1: seed + 1, 2: seed + 2, 3: seed + 3})
        walks = {i: None if tree is None else TokenWalk(tree, tokens[i]) for i, tree in enumerate(trees)}
        results = verifier.verify(logits, dict(enumerate(roots)), walks, settings)
        for i, tree in enumerate(trees):
            own = torch.Generator().manual_seed(seed + i)
            draw = lambda node: _vllm_draw(sampler, logits[roots[i] + node], settings, i, own)  # noqa: E731
            if tree is None:
                assert results[i].accepted == [0] and results[i].bonus_token == draw(0)
            else:
                assert results[i] == accept_drawn(tree, tokens[i], draw)
                lengths.add(len(results[i].accepted))
            assert torch.equal(settings.generators[i].get_state(), own.get_state())
    assert lengths >= {1, 2, 3}  # walks stopped at the root, went deeper, and reached a leaf


def test_the_buffer_is_kept_and_grows_only_when_a_step_needs_more_rows(sampler) -> None:
    logits = torch.randn(12, 64)
    rows = SampledRows(sampler)
    settings = RowSettings(np.full(12, 0.7, dtype=np.float32), None, None, None)
    rows.draw(logits, {0: 3, 1: 7}, settings)
    first = rows._buffer
    rows.draw(logits, {0: 9}, settings)
    assert rows._buffer is first  # the same buffer, no new [rows, V] tensor
    assert set(rows.draw(logits, {i: i for i in range(12)}, settings)) == set(range(12))
    assert rows._buffer.shape[0] >= 12
    assert rows.draw(logits, {}, settings) == {}
