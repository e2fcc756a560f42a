"""`StepPlanner`: an engine's step budget at work, step after step (`step_budget.py` holds the
rules, this file their state and the order they run in).

    planner = StepPlanner(config)                       # one per engine
    if planner.heads_pay(batch, context):               # the gate, before any head call
        planner.start_heads()                           # the first head level starts now
        limit = planner.limit(trees, lookups, batch, started, remaining, contexts, context)
        drafts = drafter.draft_trees(steps, trees, lookup_tokens, limit=limit)
        plan = planner.plan(drafts, trees, lookups, batch, spent, remaining, contexts, context)
    planner.observe_step(seconds - drafting, shape)     # the cost model learns the step
    planner.calibration.observe(...)                    # verified trees: head and depth rates

Depth by depth: the heads draft a tree level by level, and before each deeper level the limit
asks `plan_deeper` whether that level's head call pays (the nodes not drafted yet valued at
their depth's measured acceptance rate, the call at the seconds a head level took lately) and
for which requests; the final plan then keeps, of what was drafted, what pays.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Sequence

from entmtp_vllm.config import STEP_BUDGET, StepBudgetConfig
from entmtp_vllm.step_budget import (
    BudgetPlan,
    BudgetRequest,
    DraftGate,
    HeadCalibration,
    LookupRate,
    node_values,
    plan_budget,
    plan_deeper,
)
from entmtp_vllm.step_cost import StepCostModel
from entmtp_vllm.topology import TreeBuffers

if TYPE_CHECKING:
    from entmtp_vllm.heads.drafting import Draft, Limit
    from entmtp_vllm.lookup import LookupStats

LEVEL_MEMORY = 4
"""The seconds a head level takes are averaged with factor 1 - 1/LEVEL_MEMORY per level."""


class StepPlanner:
    """The step budget's state in one engine (cost model, head calibration, lookup rate, gate,
    the seconds of a head level) and its decisions for one step."""

    def __init__(self, config: StepBudgetConfig | None) -> None:
        self.config = config
        """None: no budget (every drafted node is kept; the state below still learns)."""
        self.cost_model = StepCostModel(config or STEP_BUDGET)
        self.calibration = HeadCalibration(config or STEP_BUDGET)
        self.lookup_rate = LookupRate(config or STEP_BUDGET)
        self.online = config is not None and config.online
        """Measured time (drafting so far, a head level's seconds) enters the plans and the gate
        only with an online budget: a pinned one plans the same on any machine."""
        self.gate = DraftGate(config) if self.online and config.gate else None
        self.level_seconds: float | None = None
        """Seconds a head level of drafting took lately (online only)."""
        self._level_started = 0.0

    def heads_pay(self, batch_size: int, context: float = 0.0) -> bool:
        """Whether a step of `batch_size` requests holding `context` thousand tokens in all runs
        the heads (`DraftGate`; always without one)."""
        return self.gate is None or self.gate.drafts(batch_size, self.cost_model, context)

    def start_heads(self) -> None:
        """The step's first head level starts now (the limit times the levels from here)."""
        self._level_started = time.perf_counter()

    def candidate(self, token_probs: Sequence[float | None], buffers: TreeBuffers, lookup: LookupStats,
                  remaining: int | None = None, context: float = 0.0) -> BudgetRequest:
        """A request's nodes as the budget sees them (`token_probs`: its draft's so far, a prefix
        in node order; a head node not drafted yet, None, valued at its depth's measured rate;
        `remaining`: tokens the request may still emit, None: unknown; a node deeper than
        remaining - 1 is worth nothing, as the step emits the accepted nodes and one more;
        `context`: thousands of tokens its rows attend to, which prices its rows)."""
        config = self.config or STEP_BUDGET
        rate = lookup.token_rate(self.lookup_rate.rate, config.lookup_prior_weight) if buffers.lookup_nodes else 0.0
        values = node_values(token_probs, buffers.parent_list[: len(token_probs)], self.calibration.scale, rate,
                             self.calibration.depth_rate, None if remaining is None else remaining - 1)
        return BudgetRequest(values, min(buffers.chain_nodes, len(values)), context)

    def limit(self, trees: list[TreeBuffers], lookups: list[LookupStats], batch_size: int, started: float,
              remaining: Sequence[int | None] | None = None, contexts: Sequence[float] | None = None,
              batch_context: float = 0.0) -> Limit:
        """`draft_trees`' limit for this step: before each deeper head level, `plan_deeper` over
        what is drafted so far (`started`: when the step's drafting began, online the seconds
        since count as spent) and a head call of `level_seconds` per level still to draft
        (`remaining`, `contexts`: per request, as in `candidate`; `batch_context`: thousands of
        tokens the step's `batch_size` requests hold in all, those that draft nothing included)."""
        deepest = max((buffers.head_depth for buffers in trees), default=0)
        remaining = _per_request(len(trees), remaining, None, "remaining token counts")
        contexts = _per_request(len(trees), contexts, 0.0, "contexts")

        def limit(depth: int, probs: list[list[float | None]]) -> list[int]:
            now = time.perf_counter()
            if self.online:
                level = now - self._level_started
                known = self.level_seconds
                self.level_seconds = level if known is None else known + (level - known) / LEVEL_MEMORY
            drafted, predicted = [], []
            for token_probs, buffers, lookup, left, context in zip(probs, trees, lookups, remaining, contexts):
                whole = self.candidate(token_probs, buffers, lookup, left, context)
                # the nodes before the first one not drafted yet: their values do not depend on it
                known = next((i for i, p in enumerate(token_probs) if p is None), len(token_probs)) - 1
                drafted.append(BudgetRequest(whole.values[:known], min(whole.chain_nodes, known), context))
                predicted.append(whole)
            head_seconds = (deepest - depth + 1) * self.level_seconds if self.online else 0.0
            spent = now - started if self.online else 0.0
            kept = plan_deeper(_padded(drafted, batch_size, batch_context),
                               _padded(predicted, batch_size, batch_context), self.cost_model, spent, head_seconds)
            self._level_started = time.perf_counter()
            return [n + 1 for n in kept[: len(trees)]]

        return limit

    def plan(self, drafts: list[Draft], trees: list[TreeBuffers], lookups: list[LookupStats], batch_size: int,
             spent: float, remaining: Sequence[int | None] | None = None, contexts: Sequence[float] | None = None,
             batch_context: float = 0.0) -> BudgetPlan:
        """The step's plan for its drafts (`spent`: seconds this step's drafting took; counted
        online only; `remaining`, `contexts`, `batch_context`: as in `limit`)."""
        remaining = _per_request(len(drafts), remaining, None, "remaining token counts")
        contexts = _per_request(len(drafts), contexts, 0.0, "contexts")
        candidates = [self.candidate(draft.token_probs, buffers, lookup, left, context)
                      for draft, buffers, lookup, left, context in zip(drafts, trees, lookups, remaining, contexts)]
        spent = spent if self.online else 0.0
        plan = plan_budget(_padded(candidates, batch_size, batch_context), self.cost_model, spent)
        return BudgetPlan(plan.kept[: len(candidates)], plan.gain, plan.seconds)

    def observe_step(self, seconds: float, shape: tuple[int, int, int, float]) -> bool:
        """A decode-only step (requests, rows, tree rows, thousands of context tokens over its
        rows) that took `seconds` without its drafting; learnt by the cost model unless the budget
        is pinned. Whether it was learnt."""
        if self.config is not None and not self.config.online:
            return False
        requests, rows, tree_rows, context = shape
        self.cost_model.observe(requests, rows, tree_rows, seconds, context)
        return True


def _per_request(count: int, values: Sequence | None, default, name: str) -> list:
    """`values` for `count` requests (None: `default` for each)."""
    if values is None:
        return [default] * count
    if len(values) != count:
        raise ValueError(f"{count} requests but {len(values)} {name}")
    return list(values)


def _padded(candidates: list[BudgetRequest], batch_size: int, batch_context: float = 0.0) -> list[BudgetRequest]:
    """Requests that draft nothing this step (None in) still take a row each, attending to what
    of `batch_context` the candidates do not hold (shared evenly)."""
    missing = batch_size - len(candidates)
    if missing <= 0:
        return candidates
    rest = max(0.0, batch_context - sum(c.context for c in candidates)) / missing
    return candidates + [BudgetRequest((), 0, rest)] * missing
