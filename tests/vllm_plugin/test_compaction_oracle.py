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
        worker_cls="entmtp_vllm.vllm_plugin.cpu.worker.EntMTPCPUWorker",
    )
    yield engine
    del engine


def test_sibling_paths_are_compacted_and_output_is_exact(llm, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    counters = stats(llm)
    assert counters["compaction_moves"] > 0, counters
    assert counters["accepted_tokens"] > len(chat_prompts), counters
    assert_all_equal(got, reference_ids)


def _probe_dummy_runs(worker, action: str):
    """In the worker: on `install`, make every other step skip drafting (as vLLM does when a
    request's context would not fit the drafter) and run one of vLLM's dummy forward passes
    (attention included, as data-parallel ranks without work run between steps) after each
    step, recording whether its attention metadata carried a tree step; on `remove`, undo that
    and return the records."""
    from entmtp_vllm.vllm_plugin.tree_step import TREE_STEP_ATTR

    runner = worker.model_runner
    cls = type(runner)
    if action == "remove":
        for name in ("_input_fits_in_drafter", "_build_attention_metadata", "sample_tokens", "propose_draft_token_ids"):
            runner.__dict__.pop(name, None)
        return runner.__dict__.pop("_probe")
    probe = runner._probe = {"calls": 0, "drafted": False, "in_dummy": False, "after_skip": 0, "stale": 0}

    def fits(common):
        probe["calls"] += 1
        return probe["calls"] % 2 == 1 and cls._input_fits_in_drafter(runner, common)

    def propose(*args, **kwargs):
        probe["drafted"] = True
        return cls.propose_draft_token_ids(runner, *args, **kwargs)

    def build(*args, **kwargs):
        metadata, spec = cls._build_attention_metadata(runner, *args, **kwargs)
        if probe["in_dummy"]:
            groups = metadata if isinstance(metadata, list) else [metadata]
            probe["stale"] += any(getattr(m, TREE_STEP_ATTR, None) is not None for g in groups for m in g.values())
        return metadata, spec

    def sample_tokens(grammar_output):
        plan = runner._entmtp_plan
        verified_tree = plan is not None and plan.tree_step is not None
        probe["drafted"] = False
        output = cls.sample_tokens(runner, grammar_output)
        probe["after_skip"] += verified_tree and not probe["drafted"]
        probe["in_dummy"] = True
        try:
            runner._dummy_run(4, force_attention=True)
        finally:
            probe["in_dummy"] = False
        return output

    runner._input_fits_in_drafter = fits
    runner.propose_draft_token_ids = propose
    runner._build_attention_metadata = build
    runner.sample_tokens = sample_tokens
    return None


def test_a_dummy_run_after_a_skipped_drafting_step_sees_no_tree_step(llm, chat_prompts, reference_ids):
    """The step plan lives one step: a dummy forward pass after a step that verified a tree
    but did not draft (vLLM skips the drafter then) must not see that step's tree masks."""
    llm.collective_rpc(_probe_dummy_runs, args=("install",))
    try:
        got = generate_ids(llm, chat_prompts[:6], greedy_params(16))
    finally:
        probe = llm.collective_rpc(_probe_dummy_runs, args=("remove",))[0]
    assert probe["after_skip"] > 0, probe  # the case happened: a tree verified, drafting skipped
    assert probe["stale"] == 0, probe
    assert got == [ids[:16] for ids in reference_ids[:6]]  # and the dummy runs left serving intact
