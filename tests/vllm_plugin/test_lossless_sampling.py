"""Lossless tree acceptance at temperature 1: EntMTP samples what vLLM samples without speculation.

One chat prompt, N samples of a few tokens from each engine; for every token position a
chi-square two-sample test compares the token distributions (position 0 is sampled from the
prefill row; later ones come out of tree verification: each token drawn at the node the
draft-independent walk stands on, an accepted draft or the step's last token). The drafter is the
oracle test double (drafts the greedy continuation, ranks swapped at random), so both acceptances
and misses happen often. Negative control: the same engine with a walk that keeps a drafted child
whatever was drawn (a draft-biased rule) fails the same test.
"""

from __future__ import annotations

from collections import Counter

import pytest

import _oracle
from _vllm_engine import generate_ids, make_llm, run_reference, sampling_params, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SAMPLES = 400
TOKENS = 4
ALPHA = 0.001  # per position; a wrong rule shifts these distributions far more than that


QUESTION = "Name three colours of the rainbow."


@pytest.fixture(scope="module")
def prompt(model_path):
    """One short chat prompt (built here: the test needs no prompt set)."""
    from transformers import AutoTokenizer

    from entmtp_vllm.prompts import chat_text

    return chat_text(AutoTokenizer.from_pretrained(model_path), QUESTION)


@pytest.fixture(scope="module")
def greedy_ids(request, model_path, prompt):
    """vLLM's greedy continuation of the prompt (the oracle drafts from it too)."""
    return run_reference(request, {"model": model_path, "prompts": [prompt], "max_tokens": 32})


@pytest.fixture(scope="module")
def reference_samples(request, model_path, prompt):
    # No per-request seeds: vLLM 0.32 on CPU crashes when a seeded request is in a partial
    # prefill ("CPU Generator does not use offset", gpu_model_runner._bookkeeping_sync).
    job = {"model": model_path, "prompts": [prompt] * SAMPLES, "max_tokens": TOKENS, "temperature": 1.0}
    return run_reference(request, job)


@pytest.fixture(scope="module")
def llm(model_path, greedy_ids, reference_samples):
    _oracle.TABLE = _oracle.bigram_table(greedy_ids + reference_samples)
    engine = make_llm(
        model_path, {"bank": "full:2,2,1", "acceptance": "lossless", "budget": None}, num_speculative_tokens=10,
        proposer="_oracle.OracleEntMTP", worker_cls="entmtp_vllm.vllm_plugin.cpu.worker.EntMTPCPUWorker",
    )
    yield engine
    del engine


def _table(a: list[int], b: list[int]) -> list[list[int]]:
    """2 x K contingency table; categories with fewer than 10 samples in total pooled."""
    ca, cb = Counter(a), Counter(b)
    common = [t for t in set(ca) | set(cb) if ca[t] + cb[t] >= 10]
    rows = [[ca[t] for t in common], [cb[t] for t in common]]
    rest = [len(a) - sum(rows[0]), len(b) - sum(rows[1])]
    if sum(rest) > 0:
        rows[0].append(rest[0])
        rows[1].append(rest[1])
    return rows


def _p_values(got: list[list[int]], reference: list[list[int]]) -> list[float]:
    """Per token position, the chi-square p-value of the two engines' token distributions."""
    from scipy.stats import chi2_contingency

    found = []
    for position in range(TOKENS):
        ours = [seq[position] for seq in got if len(seq) > position]
        theirs = [seq[position] for seq in reference if len(seq) > position]
        table = _table(ours, theirs)
        if len(table[0]) >= 2:
            found.append(chi2_contingency(table).pvalue)
    return found


def test_lossless_matches_vllm_sampling(llm, prompt, reference_samples):
    got = generate_ids(llm, [prompt] * SAMPLES, sampling_params(TOKENS, 1.0))
    counters = stats(llm)
    assert counters["accepted_tokens"] > SAMPLES // 4, counters  # acceptance really happened
    p_values = _p_values(got, reference_samples)
    assert len(p_values) >= TOKENS - 1 and min(p_values) > ALPHA, p_values


def test_negative_control_a_draft_biased_walk_fails(llm, prompt, reference_samples, monkeypatch):
    """A walk that keeps the first child whatever token was drawn (drafts always win) must fail
    the same test: the statistic sees a rule that favours the drafts."""
    from entmtp_vllm.acceptance import TokenWalk

    real = TokenWalk.visit

    def biased(walk, token):
        children = walk.buffers.children[walk.node]
        return real(walk, walk.tokens[children[0]] if children else token)

    monkeypatch.setattr(TokenWalk, "visit", biased)
    got = generate_ids(llm, [prompt] * SAMPLES, sampling_params(TOKENS, 1.0))
    assert min(_p_values(got, reference_samples)) < ALPHA
