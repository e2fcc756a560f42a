"""The numbers of a serving benchmark: client-side records of requests (`RequestResult`), one
concurrency level summarized (`summarize_level`: TTFT, TPOT, ITL, latency percentiles, tok/s),
and a comparison's ratios to the run without speculation, over one round or several
(`compare_table`, `median_runs`, `round_ratios`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from entmtp_vllm.bench.serve.config import BASELINE

MAX_ERROR_MESSAGES = 5
"""Error messages kept per level (all failures are counted)."""
PERCENTILES = (50, 90, 99)


@dataclass
class RequestResult:
    """Client-side record of one streamed request."""

    ok: bool
    latency_s: float
    """Send → end of the stream (or → the error)."""
    ttft_s: float | None = None
    """Send → first chunk carrying text (or the final chunk, when no text came at all)."""
    itl_s: list[float] = field(default_factory=list)
    """Gaps between consecutive chunks carrying text."""
    output_tokens: int = 0
    tokens_from_usage: bool = False
    """Whether `output_tokens` is the server's count (else: text chunks counted)."""
    prompt_tokens: int | None = None
    error: str | None = None
    text: str = ""
    prompt: str | None = None
    """The prompt sent (to match outputs across servers)."""

    @property
    def tpot_s(self) -> float | None:
        """(latency − TTFT) / (output tokens − 1); None for fewer than two tokens."""
        if not self.ok or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default); `values` must not be empty."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize_ms(values_s: list[float]) -> dict[str, float] | None:
    """mean / p50 / p90 / p99 in milliseconds of durations in seconds (None: no values)."""
    if not values_s:
        return None
    out = {"mean": 1000.0 * sum(values_s) / len(values_s)}
    for q in PERCENTILES:
        out[f"p{q}"] = 1000.0 * percentile(values_s, q)
    return out


def summarize_level(
    results: list[RequestResult],
    wall_s: float,
    concurrency: int,
    acceptance: dict[str, Any] | None = None,
    window: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One concurrency level's numbers from its requests' records and its wall time. `window`
    (a `--duration` level, `client.window_throughput`): the steady rate over the window, which
    then is `output_tokens_per_s`; the rate with the drain (all tokens / wall time) stays as
    `drained_tokens_per_s`."""
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    errors: list[str] = []
    for r in failed:
        if r.error and r.error not in errors and len(errors) < MAX_ERROR_MESSAGES:
            errors.append(r.error)
    tokens = sum(r.output_tokens for r in done)
    drained = tokens / wall_s if wall_s > 0 else 0.0  # every token over the wall time, drain included
    from_usage = [r.tokens_from_usage for r in done]
    counted = "usage" if from_usage and all(from_usage) else "chunks" if not any(from_usage) else "mixed"
    itl = [gap for r in done for gap in r.itl_s]
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "completed": len(done),
        "failed": len(failed),
        "errors": errors,
        "wall_s": wall_s,
        "output_tokens": tokens,
        "output_tokens_per_s": window["output_tokens_per_s"] if window else drained,
        "drained_tokens_per_s": drained,
        "window": window,
        "requests_per_s": len(done) / wall_s if wall_s > 0 else 0.0,
        "tokens_counted_from": counted if done else None,
        "ttft_ms": summarize_ms([r.ttft_s for r in done if r.ttft_s is not None]),
        "tpot_ms": summarize_ms([t for t in (r.tpot_s for r in done) if t is not None]),
        "itl_ms": summarize_ms(itl),
        "latency_ms": summarize_ms([r.latency_s for r in done]),
        "acceptance": acceptance,
    }


def level_outputs(records: list[RequestResult], prompts: list[str]) -> list[str | None]:
    """Each prompt's output text, in `prompts`' order (None where its request failed or was not
    sent): what `compare_table` matches between servers when the requests are greedy or seeded."""
    by_prompt = {r.prompt: r.text for r in records if r.ok and r.prompt is not None}
    return [by_prompt.get(prompt) for prompt in prompts]


def same_outputs(level: dict[str, Any], base: dict[str, Any] | None) -> tuple[int, int] | None:
    """(prompts whose output equals the baseline's, prompts both levels answered), or None when
    either level kept no outputs."""
    ours, theirs = level.get("outputs"), (base or {}).get("outputs")
    if ours is None or theirs is None:
        return None
    pairs = [(a, b) for a, b in zip(ours, theirs) if a is not None and b is not None]
    return sum(a == b for a, b in pairs), len(pairs)


def _stat(summary: dict[str, float] | None, key: str) -> float | None:
    return None if summary is None else summary.get(key)


def compare_table(runs: dict[str, dict[str, Any]], baseline: str = BASELINE) -> list[dict[str, Any]]:
    """One row per (concurrency level, method): throughput, TPOT, their ratios to `baseline` at
    the same level (tok/s ratio > 1 and TPOT ratio < 1 are better), acceptance length."""
    base_levels = {level["concurrency"]: level for level in runs.get(baseline, {}).get("levels", [])}
    levels = sorted({level["concurrency"] for run in runs.values() for level in run["levels"]})
    rows = []
    for concurrency in levels:
        base = base_levels.get(concurrency)
        for method, run in runs.items():
            level = next((lv for lv in run["levels"] if lv["concurrency"] == concurrency), None)
            if level is None:
                continue
            tps = level["output_tokens_per_s"]
            tpot = _stat(level["tpot_ms"], "p50")
            base_tps = base["output_tokens_per_s"] if base else None
            base_tpot = _stat(base["tpot_ms"], "p50") if base else None
            acc = level.get("acceptance") or {}
            rows.append(
                {
                    "concurrency": concurrency,
                    "method": method,
                    "output_tokens_per_s": tps,
                    "tps_ratio": tps / base_tps if base_tps else None,
                    "tpot_p50_ms": tpot,
                    "tpot_ratio": tpot / base_tpot if tpot is not None and base_tpot else None,
                    "ttft_p50_ms": _stat(level["ttft_ms"], "p50"),
                    "mean_acceptance_length": acc.get("mean_acceptance_length"),
                    "same_outputs": None if method == baseline else same_outputs(level, base),
                    "overhead_share": (acc.get("overhead") or {}).get("share"),
                    "client_cpu_share": _client_cpu_share(level),
                    "completed": level["completed"],
                    "failed": level["failed"],
                }
            )
    return rows


def _client_cpu_share(level: dict[str, Any]) -> float | None:
    """The load generator's CPU seconds over the level's wall seconds (1.0: one core busy the
    whole level); None when the level did not measure it."""
    cpu, wall = level.get("client_cpu_s"), level.get("wall_s")
    return cpu / wall if cpu is not None and wall else None


def median_runs(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per method and level, the level of the round with the median output tok/s (the lower
    middle one for an even number of rounds), so that TPOT, TTFT and τ come from the same run."""
    methods = list(dict.fromkeys(method for runs in rounds for method in runs))
    merged: dict[str, dict[str, Any]] = {}
    for method in methods:
        runs = [runs[method] for runs in rounds if method in runs]
        levels = sorted({level["concurrency"] for run in runs for level in run["levels"]})
        chosen = []
        for concurrency in levels:
            found = [lv for run in runs for lv in run["levels"] if lv["concurrency"] == concurrency]
            found.sort(key=lambda lv: lv["output_tokens_per_s"])
            chosen.append({**found[(len(found) - 1) // 2], "rounds": len(found)})
        first = {key: value for key, value in runs[0].items() if key != "log"}  # one log per round: "logs"
        merged[method] = {**first, "levels": chosen, "logs": [run.get("log") for run in runs]}
    return merged


def round_ratios(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level and method (the baseline left out): each round's tok/s ratio to that round's
    baseline, and their median, min and max."""
    found: dict[tuple[int, str], list[float]] = {}
    for entry in rounds:
        for row in entry["table"]:
            if row["method"] != BASELINE and row["tps_ratio"] is not None:
                found.setdefault((row["concurrency"], row["method"]), []).append(row["tps_ratio"])
    return [
        {"concurrency": c, "method": m, "ratios": values, "median": statistics.median(values),
         "min": min(values), "max": max(values)}
        for (c, m), values in sorted(found.items())
    ]
