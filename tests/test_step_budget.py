"""The step budget on synthetic batches (`entmtp_vllm/step_budget.py`), no model."""

from __future__ import annotations

import pytest

from entmtp_vllm.config import StepBudgetConfig, StepCostPrior
from entmtp_vllm.step_budget import (
    BudgetPlan,
    BudgetRequest,
    DraftGate,
    HeadCalibration,
    LookupRate,
    node_values,
    plan_budget,
    plan_deeper,
)
from entmtp_vllm.step_cost import StepCostModel
from entmtp_vllm.topology import chain_nodes


def cost_model(fixed: float, per_request: float, per_token: float, per_tree_token: float = 0.0) -> StepCostModel:
    prior = StepCostPrior(fixed_ms=fixed, per_request_ms=per_request, per_token_ms=per_token, per_tree_token_ms=per_tree_token)
    return StepCostModel(StepBudgetConfig(prior=prior))


def expected_rate(requests, kept, model) -> float:
    """Expected tokens per second of a plan (one token per request plus the kept values)."""
    tokens = len(requests) + sum(kept)
    tree = sum(n + 1 for r, n in zip(requests, kept) if n > r.chain_nodes)
    expected = len(requests) + sum(sum(r.values[:n]) for r, n in zip(requests, kept))
    return expected / model.cost(len(requests), tokens, tree)


CHAIN5 = [0, 0, 1, 2, 3, 4]  # parents of a 5-node chain, root first
TREE = [-1, 0, 0, 1, 1, 2]  # root, two children, two grandchildren under the first, one under the second


def test_values_multiply_along_paths_and_calibrate():
    parents = [-1] + CHAIN5[1:]
    probs = [1.0, 0.8, 0.5, 0.5, 0.5, 0.5]
    assert node_values(probs, parents, 1.0, 0.0) == pytest.approx([0.8, 0.4, 0.2, 0.1, 0.05])
    assert node_values(probs, parents, 2.0, 0.0) == pytest.approx([1.0, 1.0, 1.0, 1.0, 1.0])  # capped at 1
    lookup = [1.0, -1.0, -1.0, 0.9]
    assert node_values(lookup, [-1, 0, 1, 2], 1.0, 0.5) == pytest.approx([0.5, 0.25, 0.225])
    assert chain_nodes(parents) == 5 and chain_nodes(TREE) == 1 and chain_nodes([-1]) == 0


def test_batch_one_with_a_cheap_token_keeps_the_whole_tree():
    """A step whose cost is mostly fixed (a GPU, or vLLM's step at batch 1) keeps the policy's
    whole tree, as before the budget."""
    model = cost_model(50.0, 1.0, 0.5)
    tree = BudgetRequest(node_values([1.0, 0.7, 0.2, 0.6, 0.3, 0.3], TREE, 1.0, 0.0), chain_nodes(TREE))
    assert plan_budget([tree], model).kept == [5]
    chain = BudgetRequest([0.6, 0.35, 0.2, 0.1, 0.05], 5)
    assert plan_budget([chain], model).kept == [5]


def test_plan_respects_the_budget_and_is_never_worse_than_not_drafting():
    model = cost_model(40.0, 1.0, 4.0, 2.0)
    requests = [
        BudgetRequest([0.9, 0.8, 0.7, 0.1, 0.05], 5),
        BudgetRequest([0.3, 0.09, 0.02], 3),
        BudgetRequest(node_values([1.0, 0.9, 0.05, 0.9, 0.1, 0.5], TREE, 1.0, 0.0), chain_nodes(TREE)),
        BudgetRequest([], 0),
    ]
    kept = plan_budget(requests, model).kept
    assert all(0 <= n <= len(r.values) for r, n in zip(requests, kept))
    rate = expected_rate(requests, kept, model)
    assert rate >= expected_rate(requests, [0] * 4, model)
    # no single node more or less would raise the expected rate
    for i, r in enumerate(requests):
        for n in (kept[i] - 1, kept[i] + 1):
            if 0 <= n <= len(r.values):
                other = list(kept)
                other[i] = n
                assert expected_rate(requests, other, model) <= rate + 1e-12
    # the confident chain drafts deepest; the unsure request drafts nothing
    assert kept[0] == 3 and kept[1] == 0


def test_most_confident_requests_draft_first_and_trees_shrink_with_load():
    model = cost_model(40.0, 1.0, 4.0)
    confident = BudgetRequest([0.95, 0.9, 0.85, 0.8], 4)
    unsure = BudgetRequest([0.4, 0.15, 0.05, 0.01], 4)
    totals = []
    for batch in (1, 4, 8, 16):
        kept = plan_budget([confident] * (batch // 2 or 1) + [unsure] * (batch // 2), model).kept
        sure, rest = kept[: batch // 2 or 1], kept[batch // 2 or 1 :]
        assert min(sure) >= max(rest, default=0)  # confident ones never get fewer nodes
        assert min(sure) >= 1  # and keep drafting at every batch size
        totals.append(sum(kept) / batch)
    assert totals == sorted(totals, reverse=True) and totals[-1] < totals[0]  # drafts per request shrink


def test_nothing_drafts_when_nothing_pays():
    model = cost_model(10.0, 1.0, 20.0)  # a token costs twice a step's fixed part
    kept = plan_budget([BudgetRequest([0.5, 0.3], 2), BudgetRequest([0.4], 1)], model).kept
    assert kept == [0, 0]
    assert plan_budget([], model).kept == []


def test_plan_reports_its_gain_and_seconds_and_counts_spent_drafting():
    model = cost_model(40.0, 1.0, 4.0)
    requests = [BudgetRequest([0.9, 0.6, 0.3], 3), BudgetRequest([0.5, 0.2], 2)]
    plan = plan_budget(requests, model)
    assert plan.gain == pytest.approx(sum(sum(r.values[:n]) for r, n in zip(requests, plan.kept)))
    assert plan.seconds == pytest.approx(4e-3 * sum(plan.kept))
    # the drafting already spent makes the step longer, so a marginal node pays more easily
    spent = plan_budget(requests, model, spent=0.2)
    assert all(a >= b for a, b in zip(spent.kept, plan.kept)) and sum(spent.kept) > sum(plan.kept)


def test_gate_skips_drafting_where_it_does_not_pay_and_explores():
    config = StepBudgetConfig(gate_memory=4, gate_explore_every=4)
    model = cost_model(100.0, 0.0, 5.0)  # 16 requests: a 180 ms step without drafts
    gate = DraftGate(config)
    assert gate.drafts(16, model)  # nothing known at 16 yet: draft, and learn
    # the plan kept 1 expected token for 10 ms of verification, after 12 ms of drafting:
    # 17 tokens in 202 ms against 16 in 180 ms, a loss
    gate.observe(16, BudgetPlan([1] + [0] * 15, 1.0, 0.010), drafting=0.012)
    decisions = [gate.drafts(16, model) for _ in range(8)]
    assert decisions == [False, False, False, True] * 2  # every 4th step explores
    # one request: 2 expected tokens for 8 ms of verification and 2 ms of drafting pays
    gate.observe(1, BudgetPlan([3], 2.0, 0.008), drafting=0.002)
    assert all(gate.drafts(1, model) for _ in range(5))
    # when drafting pays again at 16 (a cheaper draft, surer heads), the averages follow
    for _ in range(12):
        gate.observe(16, BudgetPlan([2] * 16, 20.0, 0.16), drafting=0.004)
    assert all(gate.drafts(16, model) for _ in range(5))


def test_head_calibration_learns_overconfident_heads():
    calibration = HeadCalibration(StepBudgetConfig())
    assert calibration.scale == 1.0
    # heads say 0.8 at both children of the root; the target accepts the first one half the time
    for k in range(400):
        accepted = [0, 1] if k % 2 else [0]
        calibration.observe([1.0, 0.8, 0.8], [-1, 0, 0], accepted)
    assert calibration.scale == pytest.approx(0.5 / 1.6, rel=0.1)
    # nodes whose parent was rejected had no chance and do not count
    before = (calibration.predicted, calibration.accepted)
    calibration.observe([1.0, 0.9, 0.9], [-1, 0, 1], [0])  # node 2's parent (1) was rejected
    assert calibration.predicted == pytest.approx(before[0] * (1 - 1 / 2000) + 0.9)


def test_lookup_rate_counts_tried_tokens():
    rate = LookupRate(StepBudgetConfig(lookup_prior=0.5, lookup_prior_weight=4.0))
    assert rate.rate == 0.5
    for _ in range(50):
        rate.observe(5, 2)  # 2 accepted, the third tried and rejected
    assert rate.rate == pytest.approx(2 / 3, abs=0.02)


def test_nodes_not_drafted_yet_take_their_depths_rate():
    parents = [-1, 0, 1, 2]  # a 3-node chain
    rates = {2: 0.5, 3: 0.25}.get
    assert node_values([1.0, 0.8, None, None], parents, 1.0, 0.0, rates) == pytest.approx([0.8, 0.4, 0.1])
    with pytest.raises(ValueError, match="no depth rate"):
        node_values([1.0, 0.8, None], parents[:3], 1.0, 0.0)


def test_plan_deeper_calls_the_next_head_only_where_it_pays():
    model = cost_model(40.0, 1.0, 4.0)
    known = [BudgetRequest([0.9], 1), BudgetRequest([0.3], 1), BudgetRequest([0.95, 0.9], 2)]  # the third: copied

    def predicted(rate):
        return [BudgetRequest([0.9, 0.9 * rate], 2), BudgetRequest([0.3, 0.3 * rate], 2), BudgetRequest([0.95, 0.9], 2)]

    # a sure depth 2 and a cheap head call: the sure request drafts on, the unsure one not even
    # its first node (the plan would not keep it), the copied one keeps its known nodes
    assert plan_deeper(known, predicted(0.9), model, 0.0, 0.001) == [2, 1, 2]
    # the same call, dear: stop here (every request keeps only what is known)
    assert plan_deeper(known, predicted(0.9), model, 0.0, 0.05) == [1, 1, 2]
    # an unsure depth 2: its nodes would not pay even with a free call
    assert plan_deeper(known, predicted(0.05), model, 0.0, 0.0) == [1, 1, 2]
    assert plan_deeper([], [], model, 0.0, 0.0) == []


def test_head_calibration_measures_each_depth():
    calibration = HeadCalibration(StepBudgetConfig())
    assert calibration.depth_rate(1) == calibration.depth_rate(2) == 1.0  # not seen: predicted to pay
    for k in range(400):  # a chain of 2: depth 1 accepted 3 times in 4, depth 2 (when tried) 1 in 3
        accepted = [0] if k % 4 == 0 else [0, 1, 2] if k % 3 == 0 else [0, 1]
        calibration.observe([1.0, 0.9, 0.9], [-1, 0, 1], accepted)
    assert calibration.depth_rate(1) == pytest.approx(0.75, abs=0.03)
    assert calibration.depth_rate(2) == pytest.approx(1 / 3, abs=0.05)


def _plan_by_passes(requests, model, spent=0.0):
    """The greedy rule written as it reads (a pass over the batch per extension): the reference the
    heap in `plan_budget` must reproduce, ties included."""
    from entmtp_vllm.step_budget import _best_extension

    rows = len(requests)
    kept = [0] * rows
    _, _, per_token, per_tree_token = (float(c) for c in model.coefficients)
    expected, seconds = float(rows), model.cost(rows, rows, 0) + spent
    best = [_best_extension(r, 0, per_token, per_tree_token) for r in requests]
    while True:
        candidates = [i for i in range(rows) if best[i] is not None and best[i][2] > 0]
        if not candidates:
            return kept
        i = max(candidates, key=lambda j: best[j][0])
        _, n, gain, extra = best[i]
        if (expected + gain) * seconds <= expected * (seconds + extra):
            return kept
        kept[i], expected, seconds = n, expected + gain, seconds + extra
        best[i] = _best_extension(requests[i], n, per_token, per_tree_token)


@pytest.mark.parametrize("seed", range(40))
def test_plan_budget_equals_the_greedy_rule_pass_by_pass(seed: int) -> None:
    """Random batches of 1-24 chains and trees, some requests sharing values (ties go to the lower
    request index), costs from cheap to dear, with and without spent drafting seconds."""
    import random

    rng = random.Random(seed)
    model = cost_model(rng.uniform(5, 60), rng.uniform(0, 2), rng.uniform(0.2, 6), rng.choice([0.0, 1.0, 3.0]))
    shared = sorted((rng.random() for _ in range(4)), reverse=True)
    requests = []
    for _ in range(rng.randint(1, 24)):
        if rng.random() < 0.3:
            values = list(shared)  # ties with other requests
        else:
            values, value = [], 1.0
            for _ in range(rng.randint(0, 7)):
                value *= rng.random()
                values.append(value)
        requests.append(BudgetRequest(values, rng.randint(0, len(values))))
    spent = rng.choice([0.0, 0.002])
    assert plan_budget(requests, model, spent).kept == _plan_by_passes(requests, model, spent)


def test_nodes_past_the_requests_end_are_worth_nothing():
    parents = [-1] + CHAIN5[1:]
    probs = [1.0, 0.8, 0.5, 0.5, 0.5, 0.5]
    assert node_values(probs, parents, 1.0, 0.0, max_depth=2) == pytest.approx([0.8, 0.4, 0.0, 0.0, 0.0])
    tree = [1.0, 0.7, 0.2, 0.6, 0.3, 0.3]
    assert node_values(tree, TREE, 1.0, 0.0, max_depth=1) == pytest.approx([0.7, 0.2, 0.0, 0.0, 0.0])
    assert node_values(probs, parents, 1.0, 0.0, max_depth=0) == [0.0] * 5
    model = cost_model(50.0, 1.0, 0.5)  # a cheap token: without the end every node would be kept
    assert plan_budget([BudgetRequest(node_values(probs, parents, 1.0, 0.0), 5)], model).kept == [5]
    assert plan_budget([BudgetRequest(node_values(probs, parents, 1.0, 0.0, max_depth=2), 5)], model).kept == [2]
