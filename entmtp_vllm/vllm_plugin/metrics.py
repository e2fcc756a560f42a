"""`entmtp_` Prometheus series, counted where drafting happens (the engine core / worker).

vLLM's own spec-decode metrics already flow from the scheduler to the front end
(`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
`..._num_accepted_tokens_per_pos`; `v1/spec_decode/metrics.py`). With trees, "draft tokens"
counts tree nodes and "position i" is depth i + 1 of the accepted path (the path is
compacted, so the scheduler's per-position count is per depth).

Which tree each request used, switches and fallbacks are only known in the worker. There is
no free-form channel from the worker to the front end's stat loggers, so these counters use
prometheus_client directly in the worker process:

- in-process engines (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, tests, `LLM(...)` in a script)
  share the default registry, so the series are there;
- `vllm serve` exposes them at `/metrics` only when `PROMETHEUS_MULTIPROC_DIR` is set for
  every process (vLLM then aggregates all processes' files); `entmtp serve` sets it.

Overhead: `entmtp_step_seconds` / `entmtp_steps` time every engine step the EntMTP runner
runs (from `execute_model` to the end of `sample_tokens`: forward, verification, drafting), and
`entmtp_overhead_seconds{phase}` the part of it EntMTP's own code took: `plan` (matching drafts,
tree positions, the attention's tree step), `verify` (acceptance rules and the root features),
`compact` (KV compaction), `draft` (policy, heads, step budget). Their ratio is EntMTP's share
of the step time.

`entmtp_draft_handoffs` counts, in the engine core, the steps whose drafts came back with the
step's output instead of a `take_draft_token_ids` round trip (`draft_handoff.py`).

`entmtp_step_cost_ms{coefficient}` is the step-cost model the step budget plans with (fixed,
per_request, per_token, per_tree_token milliseconds), refreshed every 64 learnt steps.

One gauge, `entmtp_active_requests`, is the number of requests the proposer holds per-request
state for (policy state + feature tracker); the proposer sets it whenever that state changes. It
returns to 0 when the server is idle: a value that stays up after requests finished or were
aborted is leaked state. In multiprocess mode it is a `livesum` gauge (the engine processes'
values summed, dead processes left out).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def _registered(build: Callable[[Any], dict[str, Any]]) -> dict[str, Any] | None:
    """`build(prometheus_client)`: the metrics it registers, by name; None without
    prometheus_client or when another copy of this module registered them in the process."""
    try:
        import prometheus_client
    except ImportError:  # pragma: no cover - vLLM depends on prometheus_client
        return None
    try:
        return build(prometheus_client)
    except ValueError:  # already registered in this process by another copy of the module
        return None


def _counter_family(prometheus: Any) -> dict[str, Any]:
    Counter = prometheus.Counter
    return {
        "tree_steps": Counter("entmtp_tree_steps", "Trees drafted, by bank tree name", ["tree"]),
        "switches": Counter("entmtp_tree_switches", "Policy choices that changed a request's tree"),
        "fallback_steps": Counter("entmtp_fallback_steps", "Trees replaced by the batch-fallback tree"),
        "drafted_nodes": Counter("entmtp_drafted_nodes", "Draft nodes verified (roots left out)"),
        "accepted_tokens": Counter("entmtp_accepted_tokens", "Draft tokens accepted (bonus tokens left out)"),
        "compaction_moves": Counter("entmtp_compaction_moves", "K/V rows moved by compaction"),
        "lookup_tokens": Counter("entmtp_lookup_tokens", "Prompt-lookup draft tokens verified (hybrid trees)"),
        "lookup_accepted": Counter("entmtp_lookup_accepted", "Prompt-lookup draft tokens accepted"),
        "lookup_unverified": Counter(
            "entmtp_lookup_unverified", "Prompt-lookup tokens scored against the emitted tokens without being drafted"
        ),
        "budget_cut_nodes": Counter("entmtp_budget_cut_nodes", "Nodes of the policies' trees the step budget did not keep"),
        "budget_undrafted_nodes": Counter(
            "entmtp_budget_undrafted_nodes", "Nodes of the policies' trees the step budget cut before drafting them"
        ),
        "budget_empty": Counter("entmtp_budget_empty", "Request steps the step budget gave no draft"),
        "gate_skips": Counter("entmtp_gate_skips", "Engine steps that called no head because the heads' drafts did not pay at their batch size"),
        "prefix_gaps": Counter("entmtp_prefix_gaps", "Steps whose accepted positions did not follow a request's prefix-layer cache"),
        "step_seconds": Counter("entmtp_step_seconds", "Wall seconds of the engine steps (forward, verification, drafting)"),
        "steps_timed": Counter("entmtp_steps", "Engine steps timed in entmtp_step_seconds"),
        "draft_handoffs": Counter(
            "entmtp_draft_handoffs", "Steps whose drafts came back with the step's output (no round trip to the worker)"
        ),
        "overhead_seconds": Counter(
            "entmtp_overhead_seconds", "Seconds EntMTP itself spent in the steps, by phase", ["phase"]
        ),
    }


def _gauge_family(prometheus: Any) -> dict[str, Any]:
    Gauge = prometheus.Gauge
    return {
        "active_requests": Gauge(
            "entmtp_active_requests",
            "Requests with EntMTP per-request state in the drafter",
            multiprocess_mode="livesum",
        ),
        "step_cost_ms": Gauge(
            "entmtp_step_cost_ms",
            "The step budget's step-cost model: milliseconds fixed, per request, per token, per tree token",
            ["coefficient"],
            multiprocess_mode="mostrecent",
        ),
    }


@functools.lru_cache(maxsize=1)
def _counters() -> dict[str, Any] | None:
    return _registered(_counter_family)


@functools.lru_cache(maxsize=1)
def _gauges() -> dict[str, Any] | None:
    return _registered(_gauge_family)


def count(name: str, amount: float = 1.0, **labels: str) -> None:
    """Add `amount` to the `entmtp_<name>` counter, with its labels (a no-op without
    prometheus_client)."""
    counters = _counters()
    if counters is None or amount == 0:
        return
    counter = counters[name]
    (counter.labels(**labels) if labels else counter).inc(amount)


def set_gauge(name: str, value: float, **labels: str) -> None:
    """Set the `entmtp_<name>` gauge, with its labels (a no-op without prometheus_client)."""
    gauges = _gauges()
    if gauges is not None:
        gauge = gauges[name]
        (gauge.labels(**labels) if labels else gauge).set(value)
