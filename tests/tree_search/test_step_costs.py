"""The step-cost probe: one engine run, a random tree per step, every tree timed under the same load."""

from __future__ import annotations

import pytest

from entmtp_vllm.bench.offline import OfflineBenchConfig, parse_methods
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.features import StepFeatures
from entmtp_vllm.tree import Tree
from tree_search.step_costs import RandomTreePolicy, probe_step_costs


def test_random_tree_policy_draws_every_tree_reproducibly():
    def draws(seed):
        policy = RandomTreePolicy(3, seed)
        state = policy.new_state()
        return [policy.choose(state, StepFeatures(0.5, 0.5, [], 1.0, {}, 0.0, 0.0, 0.0, 0)) for _ in range(300)]

    first = draws(7)
    assert first == draws(7) and first != draws(8)
    assert all(80 < first.count(k) < 120 for k in range(3))  # about uniform
    policy = RandomTreePolicy(3)
    assert policy.heads_read == 0 and not policy.reads_verifier


def test_probe_times_every_tree_in_one_run(tiny_folders):
    model, heads = tiny_folders
    config = OfflineBenchConfig(datasets=["mt_bench"], methods=parse_methods("ar"), num_prompts=2, max_tokens=16,
                                model=str(model), heads=str(heads), acceptance="greedy")
    trees = [("one", Tree.from_spec("chain:1")), ("wide", Tree.from_spec("full:3,2"))]
    result = probe_step_costs(config, trees, seed=1, progress=False, log=lambda message: None)
    assert set(result["trees"]) == {"one", "wide"} and result["prompts"] == 2
    for row in result["trees"].values():
        assert row["steps"] >= 2 and row["step_ms"] > 0 and row["se_ms"] >= 0
    assert result["prefill_ms_per_token"] > 0
    with pytest.raises(EntMTPError, match="at least one tree"):
        probe_step_costs(config, [], progress=False, log=lambda message: None)
