"""Greedy equality under the step budget with a mixed batch: in the same engine step some requests
draft a branching tree, some a chain (their tree cut to its first node) and some nothing, while
the step-cost model learns from the served steps. The prior makes a draft token cost about a
sixth of a step, so unsure requests stop drafting and only confident ones keep branches."""

from __future__ import annotations

import pytest

from _vllm_engine import assert_all_equal, generate_ids, greedy_params, make_llm, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def llm(model_path, heads_folder):
    settings = {
        "heads": heads_folder,
        "bank": "full:2,2",  # node order (0), (1), (0,0), (0,1), (1,0), (1,1): one node is a chain
        "budget": {"prior": {"fixed_ms": 30.0, "per_request_ms": 1.0, "per_token_ms": 5.0, "per_tree_token_ms": 1.0}},
    }
    engine = make_llm(model_path, settings, num_speculative_tokens=6)
    yield engine
    del engine


def test_budgeted_mixed_batch_keeps_greedy_output(llm, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    assert_all_equal(got, reference_ids)
    counters = stats(llm)
    assert counters["shape_mixed_steps"] > 0, counters  # trees, chains and no drafts in one step
    assert counters["budget_cut_nodes"] > 0 and counters["budget_empty"] > 0, counters
    assert 0 < counters["accepted_tokens"] <= counters["drafted_nodes"], counters
    assert counters["step_cost"]["steps"] > 0, counters  # the cost model learnt from served steps
    assert counters["steps_timed"] >= counters["step_cost"]["steps"], counters
    assert set(counters["overhead_seconds"]) >= {"plan", "verify", "draft"}, counters
    assert sum(counters["overhead_seconds"].values()) < counters["step_seconds"], counters
