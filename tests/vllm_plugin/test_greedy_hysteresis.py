"""Greedy equality with a hysteresis policy that switches trees (on the path value, and on head 1's
top-1 probability), requests on different trees in one batch, and the batch-size fallback rule
configured (but not triggered below its size)."""

from __future__ import annotations

import pytest

from _vllm_engine import assert_all_equal, generate_ids, greedy_params, make_llm, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

@pytest.fixture(scope="module")
def bank_file(tmp_path_factory):
    """Two trees (a choices file): a 2-chain and a 6-node tree."""
    import json

    path = tmp_path_factory.mktemp("bank") / "two_trees.json"
    path.write_text(json.dumps({"small": [[0], [0, 0]], "wide": [[0], [1], [2], [0, 0], [1, 0], [0, 0, 0]]}))
    return str(path)


# s = max(p0, p0*p1, ...) >= p0, the target's top-1 probability, which for greedy SmolLM2 ranges
# from ~0.2 to ~1; head 1's top-1 probability (the drafter's confidence) averages ~0.45 with the
# shipped heads: thresholds inside those ranges switch.
FEATURES = {"path_value": (0.9, 0.6), "head_top1_1": (0.6, 0.3)}


@pytest.fixture(scope="module", params=list(FEATURES))
def llm(request, model_path, heads_folder, bank_file):
    tau_on, tau_off = FEATURES[request.param]
    settings = {
        "heads": heads_folder,
        "bank": bank_file,
        "policy": {"kind": "hysteresis", "conservative": "small", "aggressive": "wide", "tau_on": tau_on,
                   "tau_off": tau_off, "feature": request.param},
        "batch_fallback": {"max_batch": 64, "tree": "small"},
        "budget": None,  # whole trees: the policy's choices, not the machine's step costs, decide
    }
    engine = make_llm(model_path, settings)
    yield engine
    del engine


def test_switching_policy_keeps_greedy_output(llm, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    assert_all_equal(got, reference_ids)
    counters = stats(llm)
    assert counters["switches"] > 0, counters
    assert set(counters["tree_usage"]) == {"small", "wide"}, counters
    assert counters["mixed_steps"] > 0, counters  # different trees in one batch
    assert counters["fallback_steps"] == 0, counters
