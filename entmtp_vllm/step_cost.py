"""`StepCostModel`: what one engine step costs, `cost(requests, tokens, tree_tokens)`, learnt
from the engine's own steps.

    model = StepCostModel(STEP_BUDGET)              # starts at the configured prior
    model.observe(requests=8, tokens=20, tree_tokens=0, seconds=0.061)   # after every decode step
    model.cost(8, 24, 0)                            # predicted seconds of a step with 4 more drafts

A linear model, seconds = fixed + per_request·requests + per_token·tokens + per_tree_token·tree_tokens
(`tokens`: rows the target computes, roots included; `tree_tokens`: rows of requests whose tree
branches, which the CPU attention recomputes with a mask). It is fitted by exponentially
forgetting least squares over the served steps (the last `memory` steps count most), with a
ridge toward the prior scaled so that the prior holds each coefficient to within its own size
against steps measured to within `noise_ms`: the first steps, and a batch that never varies
some feature, still give sane coefficients, and whatever the steps do vary they decide within
a few steps. Coefficients are kept non-negative.

Why online and not a probe: the step a request pays for is vLLM's whole step (scheduling,
input preparation, forward, sampling, drafting), on this machine, under whatever else runs
beside it; the served steps measure exactly that, at every batch size the load reaches, for
free. A start-up probe would time a dummy forward only, once, in an idle process.
"""

from __future__ import annotations

import numpy as np

from entmtp_vllm.config import StepBudgetConfig

_FEATURES = 4  # 1, requests, tokens, tree tokens


def _row(requests: float, tokens: float, tree_tokens: float) -> np.ndarray:
    return np.array([1.0, requests, tokens, tree_tokens])


def _nonnegative_solve(gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """argmin over theta >= 0 of the quadratic with this Gram matrix and moment: solve, fix the
    negative coefficients at 0 and solve again for the rest, until none is negative."""
    free = np.ones(len(moment), dtype=bool)
    theta = np.zeros(len(moment))
    while free.any():
        theta[:] = 0.0
        theta[free] = np.linalg.solve(gram[np.ix_(free, free)], moment[free])
        if (theta >= 0).all():
            break
        free &= theta > 0
    return np.maximum(theta, 0.0)


class StepCostModel:
    """Seconds per engine step as a function of its shape, prior + online fit."""

    def __init__(self, config: StepBudgetConfig) -> None:
        self.config = config
        prior = config.prior
        self.prior = np.array([prior.fixed_ms, prior.per_request_ms, prior.per_token_ms, prior.per_tree_token_ms]) / 1e3
        # Ridge toward the prior, in the units of the data term: each coefficient's prior is
        # trusted to within its own size (at least 1 ms), against steps measured to within
        # `noise_ms`. The steps outweigh the prior wherever they vary a feature; a direction
        # they never vary (every step with the same number of requests) keeps the prior.
        spread = np.maximum(self.prior, 1e-3)
        self._ridge = np.diag((config.noise_ms / 1e3 / spread) ** 2)
        self._gram = np.zeros((_FEATURES, _FEATURES))
        self._moment = np.zeros(_FEATURES)
        self._forget = 1.0 - 1.0 / config.memory
        self.steps = 0
        """Steps observed."""
        self.coefficients = self.prior.copy()
        """Seconds: fixed, per request, per token, per tree token."""

    def observe(self, requests: int, tokens: int, tree_tokens: int, seconds: float) -> None:
        """One measured step."""
        if requests <= 0 or seconds <= 0.0 or not np.isfinite(seconds):
            return
        x = _row(requests, tokens, tree_tokens)
        self._gram = self._forget * self._gram + np.outer(x, x)
        self._moment = self._forget * self._moment + x * seconds
        self.steps += 1
        self.coefficients = _nonnegative_solve(self._gram + self._ridge, self._moment + self._ridge @ self.prior)

    def cost(self, requests: int, tokens: int, tree_tokens: int = 0) -> float:
        """Predicted seconds of a step with this shape."""
        return float(self.coefficients @ _row(requests, tokens, tree_tokens))

    def as_dict(self) -> dict[str, float]:
        fixed, per_request, per_token, per_tree_token = (float(c) * 1e3 for c in self.coefficients)
        return {
            "steps": self.steps,
            "fixed_ms": fixed,
            "per_request_ms": per_request,
            "per_token_ms": per_token,
            "per_tree_token_ms": per_tree_token,
        }
