"""`StepPlanner` (`entmtp_vllm/step_planner.py`) on synthetic trees, no model."""

from __future__ import annotations

import time

import pytest
import torch

from entmtp_vllm.config import StepBudgetConfig, StepCostPrior
from entmtp_vllm.heads.drafting import Draft
from entmtp_vllm.lookup import LookupStats
from entmtp_vllm.step_planner import StepPlanner
from entmtp_vllm.topology import build_tree_buffers
from entmtp_vllm.tree import Tree

CHAIN = build_tree_buffers(Tree.from_spec("chain:3"), "cpu")
LOOKUP = build_tree_buffers(Tree.from_spec("lookup:3"), "cpu")


def planner(online: bool, fixed: float = 40.0, per_token: float = 4.0) -> StepPlanner:
    prior = StepCostPrior(fixed_ms=fixed, per_request_ms=1.0, per_token_ms=per_token, per_tree_token_ms=0.0)
    return StepPlanner(StepBudgetConfig(prior=prior, online=online))


def test_the_limit_drafts_deeper_only_for_requests_whose_depth_has_paid():
    plan = planner(online=False)
    for k in range(300):  # depth 2 accepted 9 times in 10 after an accepted depth 1
        plan.calibration.observe((1.0, 0.9, 0.9, 0.9), [-1, 0, 1, 2], [0, 1, 2] if k % 10 else [0, 1])
    lookups = [LookupStats(), LookupStats(), LookupStats()]
    limit = plan.limit([CHAIN, CHAIN, LOOKUP], lookups, batch_size=4, started=time.perf_counter())
    # before head 2: a sure request, an unsure one, and a copied chain (all its nodes known)
    probs = [[1.0, 0.95, None, None], [1.0, 0.1, None, None], [1.0, -1.0, -1.0, -1.0]]
    caps = limit(2, probs)
    assert caps[0] >= 3 and caps[1] == 2 and caps[2] == 4  # the unsure one keeps only what is drafted
    # pinned: no time enters, so the same probabilities give the same caps on any machine
    assert limit(2, probs) == caps and plan.level_seconds is None


def test_an_online_limit_times_the_head_levels_and_a_dear_level_stops_drafting():
    plan = planner(online=True, fixed=2.0, per_token=0.05)
    plan.start_heads()
    time.sleep(0.02)  # a head level of ~20 ms, ten steps' fixed cost
    limit = plan.limit([CHAIN], [LookupStats()], batch_size=1, started=time.perf_counter())
    assert limit(2, [[1.0, 0.9, None, None]]) == [2]  # not worth another such level
    assert plan.level_seconds == pytest.approx(0.02, abs=0.015)


def test_the_plan_and_what_the_cost_model_learns():
    plan = planner(online=False)
    drafts = [Draft(torch.tensor([5, 6, 7, 8]), None, (1.0, 0.99, 0.99, 0.99)), Draft(torch.tensor([5, 6]), None, (1.0, 0.01))]
    kept = plan.plan(drafts, [CHAIN, CHAIN], [LookupStats(), LookupStats()], batch_size=3, spent=0.0).kept
    assert kept[0] == 3 and kept[1] == 0  # a prefix of what was drafted, the unsure node cut
    assert not plan.observe_step(0.05, (3, 4, 0)) and plan.cost_model.steps == 0  # pinned: learns nothing
    online = planner(online=True)
    assert online.observe_step(0.05, (3, 4, 0)) and online.cost_model.steps == 1
