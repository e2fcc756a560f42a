"""What one generation leaves behind: a record per decode step and the `Generation`.

Plain dataclasses, so that benchmarks and analysis scripts can turn them into
JSON rows (`as_dict`) without knowing the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class StepRecord:
    """One decode step: which tree, how big, how many tokens it emitted, how long it took."""

    step: int
    """0-based index of the step (the prefill is not a step)."""

    method: str
    """"tree" or "ar"."""

    tree_index: int | None
    """Bank index of the tree the policy chose; None for AR."""

    tree_name: str | None
    """Bank name of that tree; None for AR."""

    nodes: int
    """Tokens verified in this step's forward pass (tree nodes, root included; 1 for AR)."""

    accept_length: int
    """Tokens this step emitted before truncation: accepted drafts + the bonus token (1 for AR)."""

    accepted: list[int]
    """Accepted node indices, root first (`[0]` for AR)."""

    features: dict[str, float] | None
    """The policy's features at the start of the step (`StepFeatures.as_row()`); None for AR."""

    time_s: float
    """Wall time of the whole step (features, drafting, verification, acceptance, KV compaction)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Generation:
    """The result of `ReferenceEngine.generate`."""

    token_ids: list[int]
    """Generated token ids only (the prompt excluded), EOS included when it stopped generation."""

    text: str
    """`token_ids` decoded, special tokens skipped."""

    method: str
    """"tree" or "ar"."""

    prompt_tokens: int
    """Length of the prompt in tokens."""

    steps: list[StepRecord]
    """One record per decode step after the prefill."""

    prefill_time_s: float
    """Wall time of the prefill forward pass and the first token's sampling."""

    total_time_s: float
    """Wall time of the whole generation, prefill included."""

    stop_reason: str
    """"eos" (an end-of-sequence token was emitted) or "length" (max_new_tokens reached)."""

    tree_switches: int = 0
    """How often the policy changed trees."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else an engine wants to report."""

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens over total wall time (prefill included)."""
        return self.num_tokens / self.total_time_s if self.total_time_s > 0 else 0.0

    @property
    def accept_lengths(self) -> list[int]:
        """Tokens emitted by each step (before the final truncation)."""
        return [record.accept_length for record in self.steps]

    @property
    def mean_accept_length(self) -> float:
        """tau: mean tokens per decode step; 0 when there was no step."""
        lengths = self.accept_lengths
        return sum(lengths) / len(lengths) if lengths else 0.0

    @property
    def mean_nodes(self) -> float:
        """Mean tokens verified per step (tree nodes incl. the root; 1 for AR)."""
        return sum(r.nodes for r in self.steps) / len(self.steps) if self.steps else 0.0

    @property
    def trees_used(self) -> dict[str, int]:
        """Steps per tree name (tree decoding only)."""
        used: dict[str, int] = {}
        for record in self.steps:
            if record.tree_name is not None:
                used[record.tree_name] = used.get(record.tree_name, 0) + 1
        return used

    def as_dict(self, with_steps: bool = True) -> dict[str, Any]:
        """JSON-ready summary; `with_steps=False` drops the per-step records."""
        out: dict[str, Any] = {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "method": self.method,
            "prompt_tokens": self.prompt_tokens,
            "num_tokens": self.num_tokens,
            "accept_lengths": self.accept_lengths,
            "mean_accept_length": self.mean_accept_length,
            "mean_nodes": self.mean_nodes,
            "trees_used": self.trees_used,
            "tree_switches": self.tree_switches,
            "prefill_time_s": self.prefill_time_s,
            "total_time_s": self.total_time_s,
            "tokens_per_second": self.tokens_per_second,
            "stop_reason": self.stop_reason,
        }
        if self.extra:
            out["extra"] = dict(self.extra)
        if with_steps:
            out["steps"] = [record.as_dict() for record in self.steps]
        return out
