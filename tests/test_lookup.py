"""Tests for entmtp_vllm/lookup.py: the prompt-lookup drafter on hand-made sequences."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.lookup import NO_MATCH, LookupConfig, LookupMatch, LookupStats, PromptLookup

LOOKUP = PromptLookup(LookupConfig(min_ngram=1, max_ngram=4))


def test_loop_continues_with_the_latest_turn() -> None:
    # ... 7 8 9 | 1 2 3 4 | ... 7 8 9 -> copy what followed "7 8 9" last time
    found = LOOKUP.propose([5, 7, 8, 9, 1, 2, 3, 4, 6, 7, 8, 9], 3)
    assert found.tokens == [1, 2, 3] and found.match_length == 3 and found.position == 4


def test_no_match_proposes_nothing() -> None:
    found = LOOKUP.propose([1, 2, 3, 4, 5], 4)
    assert found.tokens == [] and found.match_length == 0 and found.position == -1
    assert LOOKUP.propose([7], 4).tokens == []  # a single token has nothing before it
    assert LOOKUP.propose([1, 1, 2], 0).tokens == []


def test_longest_match_wins_over_a_more_recent_shorter_one() -> None:
    # "2 3" occurs recently followed by 9, but "1 2 3" occurs earlier followed by 4
    found = LOOKUP.propose([1, 2, 3, 4, 0, 2, 3, 9, 1, 2, 3], 1)
    assert found.match_length == 3 and found.tokens == [4]


def test_most_recent_of_equal_length_matches_wins() -> None:
    found = LOOKUP.propose([8, 1, 8, 2, 8], 1)
    assert found.match_length == 1 and found.tokens == [2]


def test_overlapping_match_repeats_the_loop() -> None:
    # period-2 loop: the copy runs into the suffix and goes on repeating
    found = LOOKUP.propose([1, 2, 1, 2, 1, 2], 5)
    assert found.tokens == [1, 2, 1, 2, 1]
    # the match at the very end: "3 3" matched one position earlier
    assert LOOKUP.propose([4, 3, 3], 3).tokens == [3, 3, 3]


def test_min_ngram_is_respected() -> None:
    strict = PromptLookup(LookupConfig(min_ngram=2, max_ngram=3))
    assert strict.propose([8, 1, 8, 2, 8], 2).tokens == []  # only 1-token matches exist
    assert strict.propose([5, 8, 1, 5, 8], 1).tokens == [1]


def test_window_limits_the_search_but_positions_stay_absolute() -> None:
    windowed = PromptLookup(LookupConfig(window=4))
    assert windowed.propose([1, 2, 3, 9, 9, 9, 1, 2], 1).tokens == []  # the old "1 2" is outside
    found = windowed.propose([0, 0, 0, 5, 6, 5], 1)
    assert found.tokens == [6] and found.position == 4


def test_a_suffix_found_across_token_boundaries_is_not_a_match() -> None:
    """The search runs over the context's bytes: an occurrence of the last token's bytes that
    straddles two tokens is skipped, an aligned one before it still found."""
    straddle = [0x02010000, 0x00000403]  # little endian: 00 00 01 02 | 03 04 00 00
    last = 0x04030201  # bytes 01 02 03 04: inside the pair above, on no token boundary
    for dtype in (np.int32, np.int64):
        assert LOOKUP.propose(np.asarray(straddle + [last], dtype=dtype), 2) == NO_MATCH
        found = LOOKUP.propose(np.asarray([last, 9] + straddle + [last], dtype=dtype), 2)
        assert (found.tokens, found.match_length, found.position) == ([9, straddle[0]], 1, 1)


@given(st.lists(st.integers(0, 3), min_size=2, max_size=40), st.integers(1, 6))
def test_proposal_is_a_true_continuation(context: list[int], k: int) -> None:
    """Whatever matched, the suffix really occurs at the reported place, and the proposal is
    what follows it there (extended periodically past the end)."""
    found = LOOKUP.propose(context, k)
    if not found.tokens:
        return
    n, start = found.match_length, found.position
    assert context[start - n : start] == context[len(context) - n :]
    assert start - n < len(context) - n
    for i, token in enumerate(found.tokens):
        assert token == (context + found.tokens)[start + i]
    assert len(found.tokens) == k


def _brute_force(context: list[int], k: int, config: LookupConfig) -> LookupMatch:
    """The rule as documented, one n-gram size at a time: the longest suffix (max_ngram down
    to min_ngram) with an earlier occurrence, its most recent one, then what followed it."""
    seq = context[-config.window :]
    offset = len(context) - len(seq)
    for n in range(min(config.max_ngram, len(seq) - 1), config.min_ngram - 1, -1):
        starts = [s for s in range(len(seq) - n) if seq[s : s + n] == seq[len(seq) - n :]]
        if starts:
            start = starts[-1] + n
            tokens = list(seq[start : start + k])
            while len(tokens) < k:
                tokens.append(tokens[len(tokens) - (len(seq) - start)])
            return LookupMatch(tokens, n, offset + start)
    return LookupMatch([], 0, -1)


@given(
    st.lists(st.integers(0, 4), min_size=0, max_size=60),
    st.integers(1, 7),
    st.integers(1, 3),
    st.integers(1, 5),
    st.integers(2, 80),
)
def test_matches_the_rule_one_ngram_size_at_a_time(context, k, min_ngram, extra, window) -> None:
    config = LookupConfig(min_ngram=min_ngram, max_ngram=min_ngram + extra - 1, window=window)
    assert PromptLookup(config).propose(context, k) == _brute_force(context, k, config)
    as_array = PromptLookup(config).propose(np.asarray(context, dtype=np.int32), k)
    assert as_array == _brute_force(context, k, config)


def test_bad_config_and_arguments() -> None:
    with pytest.raises(ValueError, match="min_ngram"):
        LookupConfig(min_ngram=3, max_ngram=2)
    with pytest.raises(ValueError):
        LookupConfig(min_ngram=0)
    with pytest.raises(EntMTPError, match="max_tokens"):
        LOOKUP.propose([1, 2], -1)


def test_stats_ema_of_accepted_fraction() -> None:
    stats = LookupStats(alpha=0.5)
    assert stats.accept_rate == 0.0
    stats.observe(4, 4)
    assert stats.accept_rate == 1.0
    stats.observe(4, 0)
    assert stats.accept_rate == 0.5
    stats.observe(0, 0)  # no lookup this step: unchanged
    assert stats.accept_rate == 0.5 and stats.proposed == 8 and stats.accepted == 4
    found = LOOKUP.propose([1, 2, 1], 2)
    assert stats.features(found) == {"lookup_match": 1.0, "lookup_tokens": 2.0, "lookup_accept_rate": 0.5}


def test_an_undrafted_proposal_is_scored_against_what_the_request_emitted() -> None:
    stats = LookupStats(alpha=0.5)
    context = [1, 2, 3]
    stats.expect(len(context), [10, 11, 12])
    assert stats.settle(context) == (0, 0) and stats.pending is not None  # nothing emitted yet
    assert stats.settle(context + [10, 11, 5, 9]) == (3, 2)  # two hit, the third tried and missed
    assert (stats.hits, stats.trials) == (2.0, 3.0)
    assert stats.pending is None and stats.settle(context + [10, 11, 12]) == (0, 0)  # scored once
    assert stats.accept_rate == 0.0 and stats.proposed == 0  # the policies' feature is untouched
    stats.expect(3, [10, 11, 12])
    assert stats.settle(np.array(context + [10])) == (1, 1)  # one emitted so far, and it hit
    assert (stats.hits, stats.trials) == (0.5 * 2 + 1, 0.5 * 3 + 1)
    stats.expect(3, [])
    assert stats.pending is None


@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=6),
    st.lists(st.integers(0, 3), min_size=6, max_size=8),
)
def test_scoring_an_undrafted_proposal_counts_what_verifying_it_would_have(proposal, emitted) -> None:
    """Lossless decoding emits the tokens a verification accepts, so scoring a proposal against
    them adds the hits and trials its verification would have added."""
    accepted = next((k for k, (a, b) in enumerate(zip(proposal, emitted)) if a != b), len(proposal))
    verified, scored = LookupStats(alpha=0.3), LookupStats(alpha=0.3)
    verified.observe(4, 1)
    scored.observe(4, 1)
    verified.observe(len(proposal), accepted)
    scored.expect(5, proposal)
    assert scored.settle([9] * 5 + emitted) == (min(len(proposal), accepted + 1), accepted)
    assert (scored.hits, scored.trials) == pytest.approx((verified.hits, verified.trials))
