"""Negative control: without KV compaction (a debug flag) the greedy outputs must differ.

Same oracle drafter as test_compaction_oracle.py, so accepted paths through later siblings
happen for sure; this proves the equality tests can fail.
"""

from __future__ import annotations

import pytest

import _oracle
from _vllm_engine import generate_ids, greedy_params, make_llm, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def llm(model_path, reference_ids):
    _oracle.TABLE = _oracle.bigram_table(reference_ids)
    engine = make_llm(
        model_path, {"bank": "full:2,2,1", "debug_disable_compaction": True, "budget": None}, num_speculative_tokens=10,
        proposer="_oracle.OracleEntMTP", worker_cls="entmtp_vllm.vllm_plugin.cpu.worker.EntMTPCPUWorker",
    )
    yield engine
    del engine


def test_disabling_compaction_breaks_equality(llm, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    counters = stats(llm)
    assert counters["compaction_moves"] > 0, counters  # moves were needed and skipped
    differ = sum(a != b for a, b in zip(got, reference_ids))
    assert differ > 0, "outputs stayed equal without compaction: the equality tests could not fail"
