"""`StepPlanner`: an engine's step budget at work, step after step (`step_budget.py` holds the
rules, this file their state and the order they run in).

    planner = StepPlanner(config)                       # one per engine
    if planner.heads_pay(batch):                        # the gate, before any head call
        planner.start_heads()                           # the first head level starts now
        limit = planner.limit(trees, lookups, batch, started)
        drafts = drafter.draft_trees(steps, trees, lookup_tokens, limit=limit)
        plan = planner.plan(drafts, trees, lookups, batch, spent)
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

    def heads_pay(self, batch_size: int) -> bool:
        """Whether a step of `batch_size` requests runs the heads (`DraftGate`; always without one)."""
        return self.gate is None or self.gate.drafts(batch_size, self.cost_model)

    def start_heads(self) -> None:
        """The step's first head level starts now (the limit times the levels from here)."""
        self._level_started = time.perf_counter()

    def candidate(self, token_probs: Sequence[float | None], buffers: TreeBuffers, lookup: LookupStats,
                  remaining: int | None = None) -> BudgetRequest:
        """A request's nodes as the budget sees them (`token_probs`: its draft's so far, a prefix
        in node order; a head node not drafted yet, None, valued at its depth's measured rate;
        `remaining`: tokens the request may still emit, None: unknown; a node deeper than
        remaining - 1 is worth nothing, as the step emits the accepted nodes and one more)."""
        config = self.config or STEP_BUDGET
        rate = lookup.token_rate(self.lookup_rate.rate, config.lookup_prior_weight) if buffers.lookup_nodes else 0.0
        values = node_values(token_probs, buffers.parent_list[: len(token_probs)], self.calibration.scale, rate,
                             self.calibration.depth_rate, None if remaining is None else remaining - 1)
        return BudgetRequest(values, min(buffers.chain_nodes, len(values)))

    def limit(self, trees: list[TreeBuffers], lookups: list[LookupStats], batch_size: int, started: float,
              remaining: Sequence[int | None] | None = None) -> Limit:
        """`draft_trees`' limit for this step: before each deeper head level, `plan_deeper` over
        what is drafted so far (`started`: when the step's drafting began, online the seconds
        since count as spent) and a head call of `level_seconds` per level still to draft
        (`remaining`: per request, the tokens it may still emit, as in `candidate`)."""
        deepest = max((buffers.head_depth for buffers in trees), default=0)
        remaining = _remaining(len(trees), remaining)

        def limit(depth: int, probs: list[list[float | None]]) -> list[int]:
            now = time.perf_counter()
            if self.online:
                level = now - self._level_started
                known = self.level_seconds
                self.level_seconds = level if known is None else known + (level - known) / LEVEL_MEMORY
            drafted, predicted = [], []
            for token_probs, buffers, lookup, left in zip(probs, trees, lookups, remaining):
                whole = self.candidate(token_probs, buffers, lookup, left)
                # the nodes before the first one not drafted yet: their values do not depend on it
                known = next((i for i, p in enumerate(token_probs) if p is None), len(token_probs)) - 1
                drafted.append(BudgetRequest(whole.values[:known], min(whole.chain_nodes, known)))
                predicted.append(whole)
            head_seconds = (deepest - depth + 1) * self.level_seconds if self.online else 0.0
            spent = now - started if self.online else 0.0
            kept = plan_deeper(_padded(drafted, batch_size), _padded(predicted, batch_size), self.cost_model, spent,
                               head_seconds)
            self._level_started = time.perf_counter()
            return [n + 1 for n in kept[: len(trees)]]

        return limit

    def plan(self, drafts: list[Draft], trees: list[TreeBuffers], lookups: list[LookupStats], batch_size: int,
             spent: float, remaining: Sequence[int | None] | None = None) -> BudgetPlan:
        """The step's plan for its drafts (`spent`: seconds this step's drafting took; counted
        online only; `remaining`: as in `limit`)."""
        remaining = _remaining(len(drafts), remaining)
        candidates = [self.candidate(draft.token_probs, buffers, lookup, left)
                      for draft, buffers, lookup, left in zip(drafts, trees, lookups, remaining)]
        plan = plan_budget(_padded(candidates, batch_size), self.cost_model, spent if self.online else 0.0)
        return BudgetPlan(plan.kept[: len(candidates)], plan.gain, plan.seconds)

    def observe_step(self, seconds: float, shape: tuple[int, int, int]) -> bool:
        """A decode-only step (requests, rows, tree rows) that took `seconds` without its
        drafting; learnt by the cost model unless the budget is pinned. Whether it was learnt."""
        if self.config is not None and not self.config.online:
            return False
        self.cost_model.observe(*shape, seconds)
        return True


def _remaining(count: int, remaining: Sequence[int | None] | None) -> list[int | None]:
    """Per request, the tokens it may still emit (None: unknown), `count` of them."""
    if remaining is None:
        return [None] * count
    if len(remaining) != count:
        raise ValueError(f"{count} requests but {len(remaining)} remaining token counts")
    return list(remaining)


def _padded(candidates: list[BudgetRequest], batch_size: int) -> list[BudgetRequest]:
    """Requests that draft nothing this step (None in) still take a row each."""
    return candidates + [BudgetRequest((), 0)] * max(0, batch_size - len(candidates))
