"""Greedy equality under the step budget with a mixed batch: in the same engine step some requests
draft a branching tree, some a chain (their tree cut to its first node) and some nothing. The
step-cost model is pinned (`online: false`), so the plan does not depend on this machine's speed: a
draft token costs a sixtieth of a one-request step and a branch costs nothing extra, so only unsure requests stop drafting and only
confident ones keep branches (the online fit is tested in test_step_cost.py and test_proposer.py)."""

from __future__ import annotations

import pytest

from _vllm_engine import assert_all_equal, generate_ids, greedy_params, make_llm, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def llm(model_path, heads_folder):
    settings = {
        "heads": heads_folder,
        "bank": "full:2,2",  # node order (0), (1), (0,0), (0,1), (1,0), (1,1): one node is a chain
        # a pinned cost model (not learnt from this machine's steps): the same plan on any machine
        "budget": {"online": False,
                   "prior": {"fixed_ms": 30.0, "per_request_ms": 1.0, "per_token_ms": 0.5, "per_tree_token_ms": 0.0}},
    }
    engine = make_llm(model_path, settings, num_speculative_tokens=6)
    yield engine
    del engine


def test_budgeted_mixed_batch_keeps_greedy_output(llm, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    assert_all_equal(got, reference_ids)
    counters = stats(llm)
    shown = {k: counters[k] for k in ("shape_mixed_steps", "budget_cut_nodes", "budget_empty", "drafted_nodes",
                                      "accepted_tokens", "head_scale")}
    assert counters["shape_mixed_steps"] > 0, str(shown)  # trees, chains and no drafts in one step
    assert counters["budget_cut_nodes"] > 0 and counters["budget_empty"] > 0, counters
    assert 0 < counters["accepted_tokens"] <= counters["drafted_nodes"], counters
    assert counters["step_cost"]["steps"] == 0, counters  # pinned: nothing learnt
    assert counters["step_cost"]["per_token_ms"] == 0.5, counters
    assert counters["steps_timed"] > 0, counters
    assert set(counters["overhead_seconds"]) >= {"plan", "verify", "draft"}, counters
    assert sum(counters["overhead_seconds"].values()) < counters["step_seconds"], counters
