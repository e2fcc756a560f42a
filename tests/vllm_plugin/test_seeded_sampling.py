"""Seeded sampling through a real vLLM engine on CPU (float32): a seeded request gives the same
token ids with EntMTP as vLLM without speculation, whatever its batch drafts, and the same ids
again with other traffic around it. The batch mixes temperatures 0.7 and 1.0, top-p, top-k, min_p
and logit bias, and greedy requests; at most four requests run at once, so later prompts are
prefilled (drawn without a tree) while earlier ones verify; a policy switches each request between
a chain and a branching tree on the heads' own confidence."""

from __future__ import annotations

import json

import pytest

from _vllm_engine import assert_all_equal, generate_ids, make_llm, run_reference, sampling_params, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MAX_TOKENS = 32
QUESTIONS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What is 17 times 23? Show your steps.",
    "List five fruits and their colours.",
    "Explain how a refrigerator works to a ten year old.",
    "Give me three tips for learning a new language.",
    "Why is the sky blue?",
    "Write a limerick about a cat who loves rain.",
    "Describe the water cycle in a few sentences.",
    "What are the main differences between a violin and a cello?",
]
# One per prompt: T 0.7 and 1.0, with top-p, top-k, min_p, logit bias, and greedy requests.
PER_PROMPT = [
    {"temperature": 0.7, "seed": 11},
    {"temperature": 1.0, "seed": 12},
    {"temperature": 0.7, "top_p": 0.9, "seed": 13},
    {"temperature": 1.0, "top_k": 20, "seed": 14},
    {"temperature": 0.8, "min_p": 0.1, "seed": 15},
    {"temperature": 1.0, "logit_bias": {"28": 4.0, "30": -5.0}, "seed": 16},
    {"temperature": 0.0, "logit_bias": {"28": 2.5}},
    {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.02, "seed": 17},
    {"temperature": 0.0},
]


@pytest.fixture(scope="module")
def prompts(model_path) -> list[str]:
    from transformers import AutoTokenizer

    from entmtp_vllm.prompts import chat_text

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return [chat_text(tokenizer, question) for question in QUESTIONS]


@pytest.fixture(scope="module")
def bank_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bank") / "chain_and_tree.json"
    path.write_text(json.dumps({
        "chain": [[0], [0, 0], [0, 0, 0]],
        "tree": [[0], [1], [2], [0, 0], [1, 0], [0, 0, 0], [0, 1]],
    }))
    return str(path)


@pytest.fixture(scope="module")
def llm(model_path, heads_folder, bank_file):
    settings = {
        "heads": heads_folder,
        "bank": bank_file,
        # confident heads draft the chain, unsure ones the wide tree: requests switch as they go
        "policy": "hysteresis@head_top1_1:0.6,0.4:tree,chain",
        "budget": None,
    }
    engine = make_llm(model_path, settings, num_speculative_tokens=7, max_num_seqs=4)
    yield engine
    del engine


def _params(per_prompt: list[dict]):
    fields = []
    for extra in per_prompt:
        extra = dict(extra)
        if "logit_bias" in extra:
            extra["logit_bias"] = {int(k): v for k, v in extra["logit_bias"].items()}
        fields.append(sampling_params(MAX_TOKENS, **extra))
    return fields


def _reference(request, model_path, prompts, per_prompt):
    return run_reference(request, {"model": model_path, "prompts": prompts, "max_tokens": MAX_TOKENS,
                                   "per_prompt": per_prompt})


def test_seeded_batch_equals_vllm_without_speculation(request, llm, model_path, prompts):
    expected = _reference(request, model_path, prompts, PER_PROMPT)
    before = stats(llm)
    got = generate_ids(llm, prompts, _params(PER_PROMPT))
    assert_all_equal(got, expected)
    after = stats(llm)
    assert after["accepted_tokens"] > before["accepted_tokens"], after  # drafts were really accepted
    assert set(after["tree_usage"]) == {"chain", "tree"}, after


def test_a_seeded_request_gives_the_same_ids_whatever_runs_beside_it(request, llm, model_path, prompts):
    """The same seeded request alone, then among other requests (different prompts and settings):
    the same ids both times, and vLLM's without speculation."""
    target = {"temperature": 0.9, "top_p": 0.95, "seed": 1234}
    expected = _reference(request, model_path, prompts[:1], [target])[0]
    alone = generate_ids(llm, prompts[:1], _params([target]))[0]
    traffic = [{"temperature": 1.0, "seed": 7}, {"temperature": 0.0}, {"temperature": 0.6, "top_k": 5}]
    crowded = generate_ids(llm, prompts[3:6] + prompts[:1], _params(traffic + [target]))[-1]
    assert alone == expected
    assert crowded == expected
