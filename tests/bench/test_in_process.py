"""The in-process measurement runner (`entmtp_vllm.bench.in_process`): counter differences, bad
input, and a real vLLM engine with and without EntMTP timed over a few prompts."""

from __future__ import annotations

import pytest

from entmtp_vllm.bench import in_process
from entmtp_vllm.errors import EntMTPError


def test_difference_subtracts_numbers_and_dicts_of_numbers_and_keeps_the_rest():
    before = {"steps": 3, "step_seconds": 0.5, "tree_usage": {"hydra": 2}, "head_gemm": "vllm", "flag": True,
              "overhead_seconds": {"draft": 0.25}}
    after = {"steps": 10, "step_seconds": 2.0, "tree_usage": {"hydra": 5, "loop": 4}, "head_gemm": "vllm", "flag": True,
             "overhead_seconds": {"draft": 1.0, "plan": 0.5}}
    assert in_process._difference(after, before) == {
        "steps": 7, "step_seconds": 1.5, "tree_usage": {"hydra": 3, "loop": 4}, "head_gemm": "vllm", "flag": True,
        "overhead_seconds": {"draft": 0.75, "plan": 0.5}}


def test_timed_run_derives_rates_and_shares():
    run = in_process.TimedRun(tokens=300, wall_s=2.0, engine_step_seconds=[0.1, 0.3],
                              entmtp={"steps_timed": 4, "step_seconds": 0.4, "drafted_nodes": 10,
                                      "overhead_seconds": {"draft": 0.02, "verify": 0.02}})
    assert run.tok_s == 150.0
    assert run.engine_step_ms == pytest.approx(200.0)
    assert run.per_step("drafted_nodes") == 2.5
    assert run.phase_ms() == pytest.approx({"draft": 5.0, "verify": 5.0})
    assert run.share() == pytest.approx(0.1)
    assert in_process.TimedRun(tokens=1, wall_s=1.0).timed_steps == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"seqs": 4, "method": "ngram"}, "method must be one of"),
    ({"seqs": 0}, "seqs must be positive"),
    ({"seqs": 4, "method": "none", "settings": {"budget": {}}}, "without speculation"),
])
def test_bad_engine_arguments_are_named(kwargs, message):
    with pytest.raises(EntMTPError, match=message):
        in_process.in_process_engine(**kwargs)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("method", ["entmtp", "none"])
def test_a_real_engine_is_timed_over_the_prompts(method, monkeypatch):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # restored after the test
    llm = in_process.in_process_engine(4, method, dtype="float32", kv_cache_bytes=256 << 20, max_model_len=1024)
    prompts = in_process.chat_prompts(llm, "mt_bench", "test", 6)
    assert len(prompts) == 6 and all("<|im_start|>" in p for p in prompts)
    step = llm.llm_engine.step
    run = in_process.timed_generate(llm, prompts, max_tokens=12, warm_up=2)
    assert llm.llm_engine.step == step  # the timing wrapper is removed again
    assert 6 <= run.tokens <= 6 * 12 and run.wall_s > 0
    # every request needs at least one engine step; no step emits more than 6 tokens a request
    assert 12 / 6 <= len(run.engine_step_seconds) <= run.tokens + 2
    if method == "none":
        assert run.entmtp is None and run.entmtp_after is None
        return
    assert run.entmtp["requests_seen"] == 6  # the warm-up's requests are not counted
    assert run.entmtp_after["requests_seen"] == 8
    assert 0 < run.timed_steps <= len(run.engine_step_seconds)
    assert run.entmtp["accepted_tokens"] <= run.entmtp["drafted_nodes"]
    assert set(run.phase_ms()) >= {"plan", "draft", "verify"}
    assert 0 < run.share() < 1
