"""`StepCostModel` (`entmtp_vllm/step_cost.py`): prior, online fit, forgetting."""

from __future__ import annotations

import numpy as np
import pytest

from entmtp_vllm.config import StepBudgetConfig, StepCostPrior
from entmtp_vllm.step_cost import StepCostModel


def steps(rng, true_ms, n):
    for _ in range(n):
        requests = int(rng.integers(1, 17))
        tokens = requests + int(rng.integers(0, 4 * requests + 1))
        tree = int(rng.integers(0, tokens + 1)) if rng.random() < 0.3 else 0
        seconds = (true_ms @ np.array([1, requests, tokens, tree])) / 1e3 * (1 + 0.03 * rng.standard_normal())
        yield requests, tokens, tree, seconds


def test_prior_before_any_step():
    model = StepCostModel(StepBudgetConfig(prior=StepCostPrior(fixed_ms=10, per_request_ms=1, per_token_ms=2, per_tree_token_ms=0)))
    assert model.cost(4, 10, 0) == pytest.approx((10 + 4 + 20) / 1e3)


@pytest.mark.parametrize("true_ms", [(3.0, 0.5, 1.2, 0.3), (60.0, 2.0, 9.0, 1.5)])
def test_online_fit_recovers_the_machine_from_a_wrong_prior(true_ms):
    true_ms = np.array(true_ms)
    model = StepCostModel(StepBudgetConfig())  # the CPU prior: far off for the first case
    for shape in steps(np.random.default_rng(0), true_ms, 400):
        model.observe(*shape)
    got = np.array([model.as_dict()[k] for k in ("fixed_ms", "per_request_ms", "per_token_ms", "per_tree_token_ms")])
    assert got[2] == pytest.approx(true_ms[2], rel=0.1)  # the marginal token, what the budget reads
    for shape in [(1, 1, 0), (8, 20, 0), (16, 40, 12)]:
        assert model.cost(*shape) == pytest.approx(true_ms @ np.array([1, *shape]) / 1e3, rel=0.1)


def test_forgets_an_old_machine_state():
    model = StepCostModel(StepBudgetConfig(memory=50))
    rng = np.random.default_rng(1)
    for shape in steps(rng, np.array([20.0, 1.0, 2.0, 0.0]), 300):
        model.observe(*shape)
    for shape in steps(rng, np.array([20.0, 1.0, 6.0, 0.0]), 300):  # tokens got 3x dearer (a load beside)
        model.observe(*shape)
    assert model.as_dict()["per_token_ms"] == pytest.approx(6.0, rel=0.15)


def test_ignores_bad_measurements():
    model = StepCostModel(StepBudgetConfig())
    model.observe(0, 0, 0, 0.1)
    model.observe(2, 4, 0, float("nan"))
    model.observe(2, 4, 0, -1.0)
    assert model.steps == 0
