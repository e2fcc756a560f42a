"""Sampler features the tree path does not apply (penalties, bad words, allowed tokens,
min_tokens, logprobs) fall back to vLLM's own sampler: while a request using one is in the batch,
nothing is verified or drafted, so every request of the batch decodes exactly as vLLM without
speculation. Checked against vLLM without speculation on one batch mixing such requests with
plain ones, and on a batch where every request uses a penalty. (min_p and logit bias are applied
on the tree path: `test_seeded_sampling.py`; vLLM's refusal of both for its own speculative
methods stays: `test_install.py`.)"""

from __future__ import annotations

import pytest

from _vllm_engine import assert_all_equal, generate_ids, make_llm, run_reference, sampling_params, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MAX_TOKENS = 24
PENALTY = {"repetition_penalty": 1.3}


@pytest.fixture(scope="module")
def llm(model_path, heads_folder):
    # the shipped default bank, whole trees (the step budget would make drafting depend on the
    # machine's measured step costs; this module tests the sampler fallback)
    engine = make_llm(model_path, {"heads": heads_folder, "budget": None})
    yield engine
    del engine


def test_penalised_outputs_equal_vllm_without_speculation(request, llm, model_path, chat_prompts):
    prompts = chat_prompts[:2] + chat_prompts[-2:]
    expected = run_reference(request, {"model": model_path, "prompts": prompts, "max_tokens": MAX_TOKENS, "extra": PENALTY})
    assert_all_equal(generate_ids(llm, prompts, sampling_params(MAX_TOKENS, **PENALTY)), expected)


def test_mixed_batch_falls_back_while_needed(request, llm, model_path, chat_prompts):
    """Plain greedy requests next to penalised ones, one with bad words and min_tokens, and one
    asking for logprobs (the short ones finish first, then the rest draft again)."""
    prompts = chat_prompts[2:8]
    per_prompt = [
        {},
        {"max_tokens": 8, **PENALTY},
        {},
        {"max_tokens": 8, "min_tokens": 8, "bad_words": [" the", " a"]},
        {"max_tokens": 6, "logprobs": 2},
        {"presence_penalty": 0.8, "max_tokens": 10},
    ]
    fields = [{"max_tokens": MAX_TOKENS, **extra} for extra in per_prompt]
    expected = run_reference(request, {"model": model_path, "prompts": prompts, "max_tokens": MAX_TOKENS, "per_prompt": per_prompt})
    before = stats(llm)["steps"]
    outputs = llm.generate(prompts, [sampling_params(**f) for f in fields], use_tqdm=False)
    assert_all_equal([list(o.outputs[0].token_ids) for o in outputs], expected)
    logprobs = outputs[4].outputs[0].logprobs
    assert logprobs is not None and len(logprobs) == len(outputs[4].outputs[0].token_ids)
    assert all(len(entry) >= 2 for entry in logprobs)
    assert stats(llm)["steps"] > before, "plain requests never drafted after the others finished"


def test_n_samples_and_prompt_logprobs_are_served(llm, chat_prompts):
    """n > 1 (vLLM fans a sampled request out into n requests; it refuses n > 1 for greedy itself)
    and prompt logprobs (computed by vLLM from the prefill) work with EntMTP."""
    from vllm import SamplingParams

    prompt = chat_prompts[0]
    greedy = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=12, prompt_logprobs=1, ignore_eos=True),
                          use_tqdm=False)[0]
    assert len(greedy.outputs[0].token_ids) == 12
    assert greedy.prompt_logprobs is not None and len(greedy.prompt_logprobs) == len(greedy.prompt_token_ids)
    sampled = llm.generate([prompt], SamplingParams(temperature=1.0, max_tokens=12, n=3, seed=7, ignore_eos=True),
                           use_tqdm=False)[0]
    assert [len(o.token_ids) for o in sampled.outputs] == [12, 12, 12]
