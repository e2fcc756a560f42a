"""Accepted paths through later siblings (so KV compaction runs) keep greedy output exact.

The drafter is a test double (`_oracle.OracleEntMTP`) that drafts from a bigram table of the
reference outputs with sibling ranks swapped at random; everything else is the real plugin.
The worker class is given explicitly (a proposer subclass is not auto-detected).
"""

from __future__ import annotations

import pytest

import _oracle
from _vllm_engine import assert_all_equal, generate_ids, greedy_params, make_llm, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def llm(model_path, reference_ids):
    _oracle.TABLE = _oracle.bigram_table(reference_ids)
    engine = make_llm(
        model_path, {"bank": "full:2,2,1", "budget": None}, num_speculative_tokens=10, proposer="_oracle.OracleEntMTP",
        worker_cls="entmtp_vllm.vllm_plugin.worker.EntMTPCPUWorker",
    )
    yield engine
    del engine


def test_sibling_paths_are_compacted_and_output_is_exact(llm, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    counters = stats(llm)
    assert counters["compaction_moves"] > 0, counters
    assert counters["accepted_tokens"] > len(chat_prompts), counters
    assert_all_equal(got, reference_ids)
