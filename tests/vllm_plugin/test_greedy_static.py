"""Greedy output through EntMTP (static default tree, Hydra heads) equals vLLM's own greedy output.

24 chat prompts (MT-bench + GSM8K, mixed lengths) in one batch; one engine for the module.
"""

from __future__ import annotations

import pytest

from _vllm_engine import assert_all_equal, generate_ids, greedy_params, make_llm, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def llm(model_path, heads_folder):
    engine = make_llm(model_path, {"heads": heads_folder})
    yield engine
    del engine


def test_greedy_equals_vllm_without_speculation(llm, chat_prompts, reference_ids):
    assert len(chat_prompts) >= 20
    got = generate_ids(llm, chat_prompts, greedy_params())
    assert_all_equal(got, reference_ids)
    counters = stats(llm)
    assert counters["verified"] > 0, counters
    assert counters["requests_seen"] == len(chat_prompts)


def test_request_state_is_freed(llm, chat_prompts):
    """Finished requests' states go at the engine's next step (vLLM reports them then)."""
    generate_ids(llm, chat_prompts[:1], greedy_params(4))
    counters = stats(llm)
    assert counters["live_requests"] <= 1, counters
    assert counters["requests_freed"] >= len(chat_prompts)
