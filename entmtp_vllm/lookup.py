"""Prompt lookup: draft tokens by copying the context (no model), for hybrid trees.

    lookup = PromptLookup(LookupConfig(min_ngram=1, max_ngram=4))
    found = lookup.propose(context, max_tokens=4)   # context: prompt + output, root last
    found.tokens         # the continuation of the longest recent suffix match ([] if none)
    found.match_length   # n of the matched n-gram (0 if none)

The suffix of `context` of length n (max_ngram down to min_ngram) is searched earlier in
the context; the most recent earlier occurrence wins (loops repeat their latest turn), and
the tokens that followed it are the proposal. When the copy reaches the end of the context
(the match is a loop whose period is shorter than the proposal), it goes on copying the
proposal itself, i.e. it assumes the loop continues.

`LookupStats` keeps a request's recent lookup acceptance (an EMA of accepted/proposed),
which the scheduler may read next to the match length, and its token hit rate, which also
learns from the proposals that were not drafted (`expect`, then `settle` against the tokens the
request emitted: lossless decoding emits exactly the tokens a verification would have accepted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from entmtp_vllm.errors import EntMTPError


class LookupConfig(BaseModel):
    """Settings of the prompt-lookup drafter."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)

    min_ngram: int = Field(1, ge=1)
    """Shortest suffix (in tokens) that may be matched."""

    max_ngram: int = Field(4, ge=1)
    """Longest suffix tried first; the longest matching n wins."""

    window: int = Field(4096, ge=1)
    """Only the last `window` context tokens are searched (bounds the cost per step)."""

    ema_alpha: float = Field(0.3, gt=0.0, le=1.0)
    """Weight of the newest step in the recent-acceptance EMA."""

    @model_validator(mode="after")
    def _order(self) -> "LookupConfig":
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({self.min_ngram}) must be at most max_ngram ({self.max_ngram})")
        return self


@dataclass(frozen=True)
class LookupMatch:
    """One proposal of the lookup drafter."""

    tokens: list[int]
    """Proposed continuation (up to max_tokens; empty when nothing matched)."""

    match_length: int
    """Length n of the matched suffix; 0 when nothing matched."""

    position: int
    """Index in the context where the continuation was copied from; -1 when nothing matched."""


NO_MATCH = LookupMatch([], 0, -1)


def _rfind_aligned(data: bytes, needle: bytes, end: int, unit: int) -> int:
    """Byte offset of the last occurrence of `needle` in `data[:end]` that starts on a token
    boundary (a multiple of `unit`), or -1."""
    while True:
        found = data.rfind(needle, 0, end)
        if found < 0 or found % unit == 0:
            return found
        end = found + len(needle) - 1  # an occurrence across token boundaries: look before it


class PromptLookup:
    """Finds the longest recent suffix match in a context and proposes what followed it."""

    def __init__(self, config: LookupConfig = LookupConfig()) -> None:
        self.config = config

    def propose(self, context: Sequence[int] | np.ndarray, max_tokens: int) -> LookupMatch:
        """The continuation of the longest (then most recent) earlier match of the context's suffix."""
        if max_tokens < 0:
            raise EntMTPError(f"lookup: max_tokens must be >= 0, got {max_tokens}")
        if max_tokens == 0:
            return NO_MATCH
        seq = np.ascontiguousarray(np.asarray(context)[-self.config.window :])
        n_total = seq.shape[0]
        if n_total < 2:
            return NO_MATCH
        offset = len(context) - n_total
        # The context's bytes searched for its last n tokens, n = 1, 2, ...: the most recent
        # occurrence of each suffix before the context's last token (`bytes.rfind`, one C search a
        # length instead of several array passes); the first n with none ends the search, and the
        # longest suffix found, at its most recent place, is the match.
        data, unit = seq.tobytes(), seq.itemsize
        before_last = len(data) - unit
        best, end = 0, -1
        for n in range(1, min(self.config.max_ngram, n_total - 1) + 1):
            found = _rfind_aligned(data, data[len(data) - n * unit :], before_last, unit)
            if found < 0:
                break
            best, end = n, found // unit + n - 1  # index of the match's last token
        if best < self.config.min_ngram:
            return NO_MATCH
        start = end + 1  # what followed the most recent longest match
        tokens = seq[start : start + max_tokens].tolist()
        while len(tokens) < max_tokens:  # past the end: the loop repeats (period n_total - start)
            tokens.append(tokens[len(tokens) - (n_total - start)])
        return LookupMatch(tokens, best, offset + start)  # tolist(): Python ints


class LookupStats:
    """A request's recent lookup acceptance: EMA of accepted / proposed lookup tokens."""

    def __init__(self, alpha: float = LookupConfig().ema_alpha) -> None:
        self.alpha = alpha
        self.accept_rate = 0.0
        """EMA of the accepted fraction; 0 before any proposal was verified."""
        self.proposed = 0
        """Lookup tokens verified so far."""
        self.accepted = 0
        """Lookup tokens accepted so far."""
        self.hits = 0.0
        self.trials = 0.0
        """Lookup tokens accepted / verified with their parent accepted (a chain of `proposed`
        with `accepted` accepted tried accepted + 1 of them, or all when all were accepted),
        each step's counts added after the older ones were scaled by 1 - alpha; proposals that were
        not drafted count too (`settle`)."""
        self.pending: tuple[int, list[int]] | None = None
        """An undrafted proposal (context position it would have followed, its tokens), scored by
        the next `settle`."""

    def observe(self, proposed: int, accepted: int) -> None:
        """Record a verified step that drafted `proposed` lookup tokens, `accepted` of them accepted."""
        if proposed <= 0:
            return
        rate = accepted / proposed
        self.accept_rate = rate if self.proposed == 0 else self.accept_rate + self.alpha * (rate - self.accept_rate)
        self.proposed += proposed
        self.accepted += accepted
        self._add_trial(proposed, accepted)

    def _add_trial(self, offered: int, hits: int) -> int:
        """One step's `hits` among `offered` lookup tokens, into the hit rate: the tokens tried are
        the hits and the first miss (all of them when all hit), after the older counts were scaled
        by 1 - alpha; returns how many were tried."""
        tried = min(offered, hits + 1)
        keep = 1.0 - self.alpha
        self.hits = keep * self.hits + hits
        self.trials = keep * self.trials + tried
        return tried

    def expect(self, position: int, tokens: list[int]) -> None:
        """A proposal that was not drafted: `tokens` would have followed the context's first
        `position` tokens. The next `settle` scores it against what the request emits."""
        self.pending = (position, list(tokens)) if tokens else None

    def settle(self, context: Sequence[int] | np.ndarray) -> tuple[int, int]:
        """Score the pending undrafted proposal against the request's context now (prompt +
        output): (tokens tried, tokens hit), as a verification of it would have counted them
        (hits: the matching prefix; tried: one more, or all the emitted ones when all matched).
        Only the token hit rate (`token_rate`) learns from it; the acceptance EMA the policies
        read and the verified counts do not. (0, 0) when nothing is pending or emitted yet."""
        if self.pending is None:
            return 0, 0
        position, tokens = self.pending
        emitted = context[position : position + len(tokens)]
        if not len(emitted):
            return 0, 0
        self.pending = None
        hits = 0
        for want, got in zip(tokens, emitted):
            if int(got) != want:
                break
            hits += 1
        return self._add_trial(len(emitted), hits), hits

    def token_rate(self, prior: float, prior_weight: float) -> float:
        """Chance that a lookup token is accepted when its parent is: the hit rate, starting at
        `prior` worth `prior_weight` tokens."""
        return (self.hits + prior * prior_weight) / (self.trials + prior_weight)

    def features(self, match: LookupMatch) -> dict[str, float]:
        """The scheduler's lookup features for this step."""
        return {
            "lookup_match": float(match.match_length),
            "lookup_tokens": float(len(match.tokens)),
            "lookup_accept_rate": self.accept_rate,
        }
