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
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=1)
def _counters() -> dict[str, Any] | None:
    try:
        from prometheus_client import Counter
    except ImportError:  # pragma: no cover - vLLM depends on prometheus_client
        return None
    try:
        return {
            "tree_steps": Counter("entmtp_tree_steps", "Trees drafted, by bank tree name", ["tree"]),
            "switches": Counter("entmtp_tree_switches", "Policy choices that changed a request's tree"),
            "fallback_steps": Counter("entmtp_fallback_steps", "Trees replaced by the batch-fallback tree"),
            "drafted_nodes": Counter("entmtp_drafted_nodes", "Draft nodes verified (roots left out)"),
            "accepted_tokens": Counter("entmtp_accepted_tokens", "Draft tokens accepted (bonus tokens left out)"),
            "compaction_moves": Counter("entmtp_compaction_moves", "K/V rows moved by compaction"),
        }
    except ValueError:  # already registered in this process by another copy of the module
        return None


def count(name: str, amount: float = 1.0, tree: str | None = None) -> None:
    """Add `amount` to the `entmtp_<name>` counter (a no-op without prometheus_client)."""
    counters = _counters()
    if counters is None or amount == 0:
        return
    counter = counters[name]
    (counter.labels(tree=tree) if tree is not None else counter).inc(amount)
