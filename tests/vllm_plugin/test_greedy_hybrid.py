"""Greedy equality with hybrid trees (a prompt-lookup chain beside the heads' tree) that a
policy switches on the lookup match length; lookup tokens must actually get accepted."""

from __future__ import annotations

import pytest

from _vllm_engine import assert_all_equal, generate_ids, greedy_params, make_llm, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def bank_file(tmp_path_factory):
    """Two hybrid trees (a choices file): lookup:3 beside a 3-node head tree, and lookup:5+chain:1."""
    import json

    path = tmp_path_factory.mktemp("bank") / "hybrid_trees.json"
    path.write_text(json.dumps({
        "hybrid": [[-1], [-1, -1], [-1, -1, -1], [0], [1], [0, 0]],
        "loop": [[-1], [-1, -1], [-1, -1, -1], [-1, -1, -1, -1], [-1, -1, -1, -1, -1], [0]],
    }))
    return str(path)


@pytest.fixture(scope="module")
def llm(model_path, heads_folder, bank_file):
    settings = {
        "heads": heads_folder,
        "bank": bank_file,
        "policy": "hysteresis@lookup_match:2.5,1.5:hybrid,loop",
        "budget": None,  # whole trees: the policy's choices, not the machine's step costs, decide
    }
    engine = make_llm(model_path, settings)
    yield engine
    del engine


def test_hybrid_trees_keep_greedy_output(llm, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    assert_all_equal(got, reference_ids)
    counters = stats(llm)
    assert counters["lookup_accepted"] > 0, counters
    assert counters["lookup_proposed"] >= counters["lookup_accepted"], counters
    assert counters["switches"] > 0, counters
    assert set(counters["tree_usage"]) == {"hybrid", "loop"}, counters
    # the heads ran on vLLM's own matrix multiply for CPU layers (the shipped 4-layer heads:
    # 4 x (2 input layers + 3 residual blocks), and the draft LM head's projection)
    assert (counters["head_gemm"], counters["head_gemm_layers"]) == ("vllm", 4 * 5 + 1), counters
