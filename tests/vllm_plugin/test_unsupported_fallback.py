"""Known gap, pinned: sampler features the EntMTP runner does not apply (here repetition_penalty;
also presence/frequency penalties, logit bias, bad words, min_tokens, min_p, logprobs) are
ignored for EntMTP requests (a warning is logged once) instead of falling back to vLLM's
sampler. Pausing drafts for such batches was tried: vLLM's stock sampler then still returned
the unpenalised tokens under the EntMTP runner (vLLM's own ngram method applies the penalty),
so the fallback is not in place yet. This strict xfail turns red when the gap is closed."""

from __future__ import annotations

import pytest

from _vllm_engine import assert_all_equal, generate_ids, make_llm, run_reference, sampling_params

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MAX_TOKENS = 24
PENALTY = {"repetition_penalty": 1.3}


@pytest.fixture(scope="module")
def llm(model_path, heads_folder):
    engine = make_llm(model_path, {"heads": heads_folder})  # the shipped default bank
    yield engine
    del engine


@pytest.mark.xfail(strict=True, reason="known gap: sampler penalties are not applied to EntMTP requests")
def test_penalised_outputs_equal_vllm_without_speculation(request, llm, model_path, chat_prompts):
    prompts = chat_prompts[:2] + chat_prompts[-2:]
    expected = run_reference(request, {"model": model_path, "prompts": prompts, "max_tokens": MAX_TOKENS, "extra": PENALTY})
    assert_all_equal(generate_ids(llm, prompts, sampling_params(MAX_TOKENS, **PENALTY)), expected)
