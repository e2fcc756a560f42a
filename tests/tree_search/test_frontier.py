"""(b) Greedy growth: budget, depth, the frontier children and the tie-breaks."""

from __future__ import annotations

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import LOOKUP, Tree
from tree_search.trajectories import UNRANKED, Calibration, Trajectory
from tree_search.frontier import choose, next_children, search_frontier
from tree_search.scoring import ForwardScorer, RankScorer


def constructed(rows: list[list[int]], max_tokens: int) -> Calibration:
    """A calibration with hand-made oracle rank paths (one trajectory, no EOS)."""
    tokens = list(range(100, 100 + len(rows)))
    trajectory = Trajectory("c", "constructed", [1, 2, 3], tokens, [list(r) for r in rows])
    return Calibration([trajectory], max_tokens=max_tokens, eos_ids=frozenset(), rank_depth=len(rows[0]), rank_cap=16)


def test_next_children_are_the_next_unused_rank_of_each_shallow_node():
    assert next_children(set(), 3) == [(0,)]
    assert next_children({(0,)}, 1) == [(1,)]
    assert next_children({(0,), (1,), (0, 0)}, 2) == [(2,), (0, 1), (1, 0)]
    assert next_children({(0,), (1,), (0, 0)}, 3) == [(2,), (0, 1), (1, 0), (0, 0, 0)]


def test_choose_breaks_ties_by_rank_sum_then_depth_then_path_order():
    zero = dict.fromkeys([(2,), (0, 1), (1, 0), (0, 0, 1), (1,)], 0)
    assert choose([(2,), (0, 1), (1, 0)], zero) == (0, 1)  # sums 2, 1, 1; same depth; path order
    assert choose([(1,), (0, 0, 1)], zero) == (1,)  # same sum: the shallower
    assert choose([(2,), (0, 1)], {(2,): 3, (0, 1): 2}) == (2,)  # the score comes first


def test_growth_with_all_scores_tied_follows_the_tie_breaks_exactly():
    calibration = constructed([[UNRANKED, UNRANKED]] * 40, max_tokens=30)  # no draft is ever right
    history = search_frontier(RankScorer(calibration), 6, 2, progress=False)
    assert [s.added for s in history] == [(0,), (0, 0), (1,), (0, 1), (1, 0), (2,)]
    assert all(s.tau == 1.0 and s.base_tau == 1.0 for s in history)
    assert all(all(c["tau"] == 1.0 for c in s.candidates) for s in history)


def test_equal_nonzero_gains_go_to_the_smaller_rank_sum():
    # With T = {(0)}: roots at i = 0, 3, 6, ... have oracle path [1]: (1) would be accepted;
    # roots at i = 1, 4, 7, ... have [0, 0]: T accepts (0), and (0, 0) would be accepted.
    rows = [[[1, UNRANKED], [0, 0], [UNRANKED, UNRANKED]][i % 3] for i in range(40)]
    calibration = constructed(rows, max_tokens=31)
    scorer = RankScorer(calibration)
    score = scorer.score({(0,)}, [(1,), (0, 0)])
    assert score.gains[(1,)] == score.gains[(0, 0)] > 0
    history = search_frontier(scorer, 2, 2, progress=False)
    assert history[1].added == (0, 0)
    assert history[1].tau == score.what_if_tau((0, 0)) > history[1].base_tau


def test_a_better_score_beats_the_tie_breaks():
    rows = [[1, 0]] * 40  # the true path is always rank 1, then rank 0
    history = search_frontier(RankScorer(constructed(rows, max_tokens=30)), 3, 2, progress=False)
    assert [s.added for s in history] == [(0,), (1,), (1, 0)]
    assert history[-1].tau == 3.0 and history[1].tau == 2.0


def test_growth_on_a_real_tiny_model_respects_budget_and_depth(calibration):
    budget, depth = 9, 2
    history = search_frontier(RankScorer(calibration), budget, depth, progress=False)
    assert [s.size for s in history] == list(range(1, budget + 1))
    tree: set = set()
    for step in history:
        assert step.added in next_children(tree, depth)
        tree.add(step.added)
        assert {tuple(p) for p in step.tree} == tree
        Tree.from_choices(step.tree, max_depth=depth)  # a valid tree within the depth
        assert step.depth == max(len(p) for p in tree) <= depth
        best = max(c["tau"] for c in step.candidates)
        assert step.tau == best  # the chosen node has the best what-if score
        assert step.tau >= step.base_tau >= 1.0
    assert history[-1].tau > 1.0  # drafts are accepted on this model
    # the what-if τ of the new tree equals its score on the parent's rollout, recomputed
    scorer = RankScorer(calibration)
    parent = {tuple(p) for p in history[-2].tree}
    again = scorer.score(parent, [history[-1].added])
    assert again.what_if_tau(history[-1].added) == history[-1].tau


def test_rank_and_forward_scorers_grow_the_same_frontier(tiny, calibration):
    model, drafter = tiny
    by_rank = search_frontier(RankScorer(calibration), 6, 3, progress=False)
    by_forward = search_frontier(ForwardScorer(model, drafter, calibration), 6, 3, progress=False)
    strip = lambda steps: [{k: v for k, v in s.as_record().items() if k != "time_s"} for s in steps]  # noqa: E731
    assert strip(by_rank) == strip(by_forward)


def test_depth_beyond_the_ranked_heads_is_refused(calibration):
    with pytest.raises(EntMTPError, match="needs 4 heads"):
        RankScorer(calibration).score({(0,), (0, 0), (0, 0, 0)}, [(0, 0, 0, 0)])


@pytest.mark.parametrize("budget, depth, message", [(0, 2, "--budget must be at least 1"), (3, 0, "--max-depth must be at least 1")])
def test_bad_growth_arguments(calibration, budget, depth, message):
    with pytest.raises(EntMTPError, match=message):
        search_frontier(RankScorer(calibration), budget, depth, progress=False)


def test_next_children_offer_the_lookup_chain_and_heads_under_it():
    L = LOOKUP
    assert next_children(set(), 2, lookup=3) == [(L,), (0,)]
    assert next_children({(L,)}, 2, lookup=3) == [(0,), (L, L), (L, 0)]  # path order: shallow first
    assert next_children({(L,), (L, L)}, 1, lookup=2) == [(0,)]  # chain at its length; heads at max depth
    assert next_children({(L,), (L, L), (L, L, L)}, 4, lookup=3) == [(0,), (L, 0), (L, L, 0), (L, L, L, 0)]
    assert choose([(L, 0), (1,)], {(L, 0): 0, (1,): 0}) == (L, 0)  # a copy counts as rank 0 in ties


def test_hybrid_growth_respects_budget_depth_and_chain(calibration):
    budget, depth, chain = 10, 2, 3
    history = search_frontier(RankScorer(calibration), budget, depth, progress=False, lookup=chain)
    assert [s.size for s in history] == list(range(1, budget + 1))
    tree: set = set()
    for step in history:
        assert step.added in next_children(tree, depth, chain)
        tree.add(step.added)
        grown = Tree.from_choices(step.tree)
        assert grown.head_depth <= depth and grown.lookup_length <= chain
        assert step.tau == max(c["tau"] for c in step.candidates)
    assert Tree.from_choices(history[-1].tree).lookup_length > 0  # copies pay on this model
    heads_only = search_frontier(RankScorer(calibration), budget, depth, progress=False)
    assert history[-1].tau >= heads_only[-1].tau
    with pytest.raises(EntMTPError, match="--lookup must be at least 0"):
        search_frontier(RankScorer(calibration), 3, 2, progress=False, lookup=-1)
