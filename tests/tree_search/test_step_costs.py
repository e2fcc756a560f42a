"""The step-cost probe: every tree decodes the prompts statically, the trees taking turns step by step."""

from __future__ import annotations

import math

import pytest

from entmtp_vllm.bench.offline_config import OfflineBenchConfig, parse_methods
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import Tree
from tree_search.step_costs import probe_step_costs


def test_probe_times_every_tree_side_by_side(tiny_folders):
    model, heads = tiny_folders
    config = OfflineBenchConfig(datasets=["mt_bench"], methods=parse_methods("ar"), num_prompts=2, max_tokens=16,
                                model=str(model), heads=str(heads), acceptance="greedy")
    trees = [("one", Tree.from_spec("chain:1")), ("wide", Tree.from_spec("full:3,2"))]
    result = probe_step_costs(config, trees, progress=False, log=lambda message: None)
    assert set(result["trees"]) == {"one", "wide"} and result["prompts"] == 2
    for name, depth in (("one", 1), ("wide", 2)):
        # both prompts to 16 tokens (the first from the prefill): 15 tokens, at most depth + 1 per step
        row = result["trees"][name]
        assert 2 * math.ceil(15 / (depth + 1)) <= row["steps"] <= 2 * 15 and row["step_ms"] > 0 and row["se_ms"] >= 0
    assert result["prefill_ms_per_token"] > 0
    with pytest.raises(EntMTPError, match="at least one tree"):
        probe_step_costs(config, [], progress=False, log=lambda message: None)
    with pytest.raises(EntMTPError, match="fewer than two decode steps"):
        probe_step_costs(OfflineBenchConfig(**{**config.__dict__, "num_prompts": 1, "max_tokens": 2}), trees,
                         progress=False, log=lambda message: None)
