"""Per-step decode features that tree policies read and that every run logs.

The central one is the paper's path-value score `s = best_path_value(p0, head_top1)`:
the largest greedy path probability `max(p0, p0*p1, ..., p0*...*pD)` (EAGLE-2's path
value along the top-1 chain), where p0 is the target's top-1 probability at the
verifier's last position and p_d the top-1 probability of Hydra head d.
`FeatureTracker` keeps the per-request history (entropy EMAs, recent accept lengths)
and turns one step's measurements into a `StepFeatures`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from entmtp_vllm.config import FEATURES

# Entropy EMA windows (in steps) and the number of recent accept lengths kept (see config.py).
DEFAULT_EMA_WINDOWS: tuple[int, ...] = FEATURES.ema_windows
DEFAULT_ACCEPT_WINDOW = FEATURES.accept_window


def best_path_value(p0: float, head_top1: Iterable[float]) -> float:
    """max(p0, p0*p1, ..., p0*p1*...*pD): the best greedy path probability over depths."""
    best = running = float(p0)
    for prob in head_top1:
        running *= float(prob)
        best = max(best, running)
    return best


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats over the last dimension (0 * log 0 = 0); [V] -> scalar, [N, V] -> [N]."""
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


@dataclass
class StepFeatures:
    """What a policy may look at before choosing the next step's tree."""

    path_value: float
    """The score s = best_path_value(p0, head_top1)."""

    p0: float
    """Target's top-1 probability at the verifier's last position."""

    head_top1: list[float]
    """Top-1 probability of each head along the greedy chain (head 1 first)."""

    entropy: float
    """Entropy (nats) of the target's distribution at the verifier's last position."""

    entropy_ema: dict[int, float]
    """EMA of the per-step entropy, by window (steps); alpha = 2 / (window + 1)."""

    recent_accept_mean: float
    """Mean accept length (tokens per step) over the recent steps; 0 before any step."""

    recent_accept_min: float
    """Smallest recent accept length; 0 before any step."""

    recent_accept_max: float
    """Largest recent accept length; 0 before any step."""

    last_accept_length: int
    """Accept length of the previous step; 0 before any step."""

    extra: dict[str, float] = field(default_factory=dict)
    """Further named features (e.g. a lookup match length), logged as they are."""

    @property
    def top1_probs(self) -> list[float]:
        """[p0, p1, ..., pD]: the target's then each head's top-1 probability."""
        return [self.p0, *self.head_top1]

    def as_row(self) -> dict[str, float]:
        """Flat name -> float mapping for logs and analysis (heads as head_top1_1..D)."""
        row = {
            "path_value": self.path_value,
            "p0": self.p0,
            **{f"head_top1_{d}": prob for d, prob in enumerate(self.head_top1, start=1)},
            "entropy": self.entropy,
            **{f"entropy_ema_{window}": value for window, value in self.entropy_ema.items()},
            "recent_accept_mean": self.recent_accept_mean,
            "recent_accept_min": self.recent_accept_min,
            "recent_accept_max": self.recent_accept_max,
            "last_accept_length": float(self.last_accept_length),
        }
        clash = row.keys() & self.extra.keys()
        if clash:
            raise ValueError(f"extra features shadow built-in ones: {sorted(clash)}")
        row.update({name: float(value) for name, value in self.extra.items()})
        return row


HEAD_FEATURES = ("head_top1_1",)
"""Policy features read off the heads: head 1's top-1 probability at the root, the drafter's own
confidence in its first token. The regime analysis (`tree_search regimes`) finds it the strongest
single predictor of the next accept length, where the path value (= p0) is nearly blind. Head 1
runs for every tree with a head node (its output is cached for the draft), so reading it costs a
softmax, not a head call."""

LOOKUP_FEATURES = ("lookup_match", "lookup_tokens", "lookup_accept_rate")
"""Extra features of steps with a prompt-lookup proposal (see `entmtp_vllm.lookup.LookupStats`);
0 when the bank has no hybrid tree."""

POLICY_FEATURES = (
    "path_value", "p0", "entropy", "recent_accept_mean", "recent_accept_min", "recent_accept_max",
    "last_accept_length", *HEAD_FEATURES, *LOOKUP_FEATURES,
)
"""The scalar features a policy may threshold (`feature` in ladder and hysteresis configs)."""

VERIFIER_FEATURES = ("path_value", "p0", "entropy")
"""The policy features read off the target's distribution at the root (p0, entropy); an engine
whose policy thresholds none of them may skip computing that distribution's statistics."""


def heads_read(name: str) -> int:
    """How many heads' top-1 probabilities the feature `name` needs (0: none; see HEAD_FEATURES)."""
    return int(name.rsplit("_", 1)[1]) if name in HEAD_FEATURES else 0


def feature_value(features: StepFeatures, name: str) -> float:
    """The scalar feature `name` of a step (a lookup feature absent this step reads 0)."""
    if name in features.extra:
        return float(features.extra[name])
    if name in LOOKUP_FEATURES:
        return 0.0
    depth = heads_read(name)
    if depth:
        if len(features.head_top1) < depth:
            raise ValueError(f"feature {name!r} needs the top-1 probability of head {depth}, but this step's "
                             f"features carry {len(features.head_top1)} heads' (the engine did not compute them)")
        return float(features.head_top1[depth - 1])
    return float(getattr(features, name))


class FeatureTracker:
    """Per-request history: entropy EMAs and the recent accept lengths."""

    def __init__(
        self,
        ema_windows: Sequence[int] = DEFAULT_EMA_WINDOWS,
        accept_window: int = DEFAULT_ACCEPT_WINDOW,
    ) -> None:
        if not ema_windows or min(ema_windows) < 1:
            raise ValueError(f"ema_windows must be positive step counts, got {list(ema_windows)}")
        if accept_window < 1:
            raise ValueError(f"accept_window must be at least 1, got {accept_window}")
        self.ema_windows = tuple(ema_windows)
        self._ema: dict[int, float] = {}
        self._accepts: deque[int] = deque(maxlen=accept_window)
        self.steps = 0
        """Steps observed so far."""

    def observe_step(self, accept_length: int, entropy: float) -> None:
        """Record a finished step. The first observation initialises every EMA to its value."""
        self.steps += 1
        self._accepts.append(int(accept_length))
        value = float(entropy)
        for window in self.ema_windows:
            alpha = 2.0 / (window + 1)
            previous = self._ema.get(window, value)
            self._ema[window] = previous + alpha * (value - previous)

    def features(
        self,
        p0: float,
        head_top1: Sequence[float],
        entropy: float,
        extra: dict[str, float] | None = None,
    ) -> StepFeatures:
        """Features for choosing the next tree, from this position's measurements and the history.

        Before any observed step the EMAs equal the current `entropy`.
        """
        heads = [float(prob) for prob in head_top1]
        current = float(entropy)
        accepts = self._accepts
        return StepFeatures(
            path_value=best_path_value(p0, heads),
            p0=float(p0),
            head_top1=heads,
            entropy=current,
            entropy_ema={window: self._ema.get(window, current) for window in self.ema_windows},
            recent_accept_mean=sum(accepts) / len(accepts) if accepts else 0.0,
            recent_accept_min=float(min(accepts, default=0)),
            recent_accept_max=float(max(accepts, default=0)),
            last_accept_length=accepts[-1] if accepts else 0,
            extra=dict(extra or {}),
        )
