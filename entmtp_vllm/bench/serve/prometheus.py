"""Prometheus' text exposition format (what vLLM's `/metrics` serves) parsed into snapshots, and
the speculative-decoding numbers between two snapshots (`acceptance_delta`): vLLM's
`vllm:spec_decode_*` counters and every `entmtp_` series. Without vLLM's series (a Ray Serve
replica's folder holds only the engine processes' `entmtp_` counters) drafts, draft tokens and
accepted tokens come from EntMTP's own counters (`ENTMTP_SPEC_SERIES`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

SPEC_SERIES = {
    "num_drafts": "vllm:spec_decode_num_drafts",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
}
PER_POSITION_SERIES = "vllm:spec_decode_num_accepted_tokens_per_pos"
GENERATION_TOKENS = "vllm:generation_tokens"
"""vLLM's counter of output tokens generated (a `--duration` level's steady rate is read off it)."""
ENTMTP_PREFIX = "entmtp_"
ENTMTP_SPEC_SERIES = {
    "num_drafts": "entmtp_tree_steps",
    "num_draft_tokens": "entmtp_drafted_nodes",
    "num_accepted_tokens": "entmtp_accepted_tokens",
}
"""EntMTP's counters of the same three numbers: trees drafted (a request's step with at least one
draft node, as vLLM counts a draft), nodes verified (roots left out), draft tokens accepted
(bonus tokens left out). Used only where vLLM's own series are absent."""

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')

Labels = tuple[tuple[str, str], ...]


@dataclass
class MetricsSnapshot:
    """The samples of one `/metrics` page."""

    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    """(sample name, sorted labels) → value."""
    types: dict[str, str] = field(default_factory=dict)
    """Family name → counter / gauge / histogram / … (from `# TYPE`; names without `_total`)."""
    replicas: dict[str, "MetricsSnapshot"] = field(default_factory=dict)
    """Replica name → its own snapshot, when `samples` are several replicas' summed (Ray Serve,
    `ray_metrics.sum_replicas`); empty for one server's page."""

    def series(self, family: str) -> dict[Labels, float]:
        """Samples of a counter or gauge family (`name` or `name_total`), by labels."""
        out: dict[Labels, float] = {}
        for (name, labels), value in self.samples.items():
            if name == family or name == family + "_total":
                out[labels] = out.get(labels, 0.0) + value
        return out

    def total(self, family: str) -> float | None:
        """Sum of a family over its label sets; None when the page does not have it."""
        found = self.series(family)
        return sum(found.values()) if found else None

    def kind(self, family: str) -> str | None:
        return self.types.get(family) or self.types.get(family + "_total")

    def families(self, prefix: str) -> list[str]:
        """Counter / gauge family names starting with `prefix` (`_total` stripped), sorted."""
        names = {_family_name(name) for name, _ in self.samples if name.startswith(prefix)}
        return sorted(name for name in names if not name.endswith("_created"))


def _family_name(sample_name: str) -> str:
    return sample_name[: -len("_total")] if sample_name.endswith("_total") else sample_name


def _unescape(value: str) -> str:
    return value.replace("\\\\", "\0").replace('\\"', '"').replace("\\n", "\n").replace("\0", "\\")


def parse_prometheus(text: str) -> MetricsSnapshot:
    """Parse Prometheus' text exposition format (what vLLM's `/metrics` serves). Unparseable
    lines are skipped; `_created` samples are left out."""
    snapshot = MetricsSnapshot()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                snapshot.types[_family_name(parts[2])] = parts[3].strip()
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name = match["name"]
        if name.endswith("_created"):
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels: Labels = ()
        if match["labels"]:
            labels = tuple(sorted((k, _unescape(v)) for k, v in _LABEL.findall(match["labels"])))
        snapshot.samples[(name, labels)] = snapshot.samples.get((name, labels), 0.0) + value
    return snapshot


def _label_key(labels: Labels, drop: tuple[str, ...] = ("engine", "model_name", "pid")) -> str:
    kept = [(k, v) for k, v in labels if k not in drop]
    if not kept:
        return ""
    if len(kept) == 1:
        return kept[0][1]
    return ",".join(f"{k}={v}" for k, v in kept)


def acceptance_delta(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> dict[str, Any] | None:
    """Speculative-decoding numbers between two `/metrics` snapshots (None: no such series).

    Counters are differences (after − before); `entmtp_` gauges are their values after."""
    if after is None:
        return None
    before = before or MetricsSnapshot()
    out: dict[str, Any] = {}
    spec_present = any(after.total(family) is not None for family in SPEC_SERIES.values())
    source = SPEC_SERIES if spec_present else ENTMTP_SPEC_SERIES
    entmtp_spec = not spec_present and all(after.total(family) is not None for family in source.values())
    for key, family in source.items():
        out[key] = (after.total(family) or 0.0) - (before.total(family) or 0.0)
    if spec_present or entmtp_spec:
        out["counted_by"] = "vllm" if spec_present else "entmtp"
        drafts, drafted, accepted = out["num_drafts"], out["num_draft_tokens"], out["num_accepted_tokens"]
        out["mean_acceptance_length"] = 1.0 + accepted / drafts if drafts > 0 else None
        out["draft_acceptance_rate"] = accepted / drafted if drafted > 0 else None
        per_pos_after = after.series(PER_POSITION_SERIES)
        per_pos_before = before.series(PER_POSITION_SERIES)
        by_position: dict[int, float] = {}
        for labels, value in per_pos_after.items():
            position = dict(labels).get("position")
            if position is not None and position.isdigit():
                by_position[int(position)] = by_position.get(int(position), 0.0) + value - per_pos_before.get(labels, 0.0)
        out["acceptance_rate_per_position"] = (
            [by_position[p] / drafts for p in sorted(by_position)] if by_position and drafts > 0 else None
        )
    else:
        out = {key: None for key in SPEC_SERIES}
        out.update(mean_acceptance_length=None, draft_acceptance_rate=None, acceptance_rate_per_position=None,
                   counted_by=None)

    entmtp: dict[str, Any] = {}
    for family in after.families(ENTMTP_PREFIX):
        short = family[len(ENTMTP_PREFIX):]
        kind = after.kind(family)
        end_series = after.series(family)
        start_series = before.series(family)
        values = {
            _label_key(labels): value if kind == "gauge" else value - start_series.get(labels, 0.0)
            for labels, value in end_series.items()
        }
        if set(values) == {""}:
            entmtp[short] = values[""]
        else:
            entmtp[short] = {k: v for k, v in sorted(values.items())}
    out["entmtp"] = entmtp or None
    out["overhead"] = overhead_summary(entmtp)
    usage = entmtp.get("tree_steps")
    out["tree_usage"] = usage if isinstance(usage, dict) else None
    if not spec_present and not entmtp:
        return None
    return out


def overhead_summary(entmtp: dict[str, Any]) -> dict[str, Any] | None:
    """EntMTP's own time over a level, from the `entmtp_steps`, `entmtp_step_seconds` and
    `entmtp_overhead_seconds{phase}` deltas: mean step milliseconds, each phase's milliseconds
    per step and the share of step time all phases took (None: the server has no such series)."""
    steps, seconds = entmtp.get("steps"), entmtp.get("step_seconds")
    phases = entmtp.get("overhead_seconds")
    if not isinstance(steps, (int, float)) or not steps or not isinstance(seconds, (int, float)) or not seconds:
        return None
    phases = phases if isinstance(phases, dict) else {}
    return {
        "step_ms": 1e3 * seconds / steps,
        "phase_ms": {phase: 1e3 * value / steps for phase, value in phases.items()},
        "share": sum(phases.values()) / seconds,
    }
