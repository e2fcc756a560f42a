"""The step budget: how many of its tree's nodes each request of a step drafts.

    if gate.drafts(batch, cost_model):                        # before any head call
        limits = plan_deeper(drafted, predicted, cost_model, spent, head_seconds)  # before a deeper level
        values = node_values(draft.token_probs, parents, calibration.scale, lookup_rate)
        plan = plan_budget([BudgetRequest(values, buffers.chain_nodes), ...], cost_model, spent)
        gate.observe(batch, plan, drafting_seconds)

Every request arrives with its policy's tree, drafted level by level (`heads.drafting.draft_trees`).
Each draft node gets a value: its estimated chance of being accepted, the product along its
path of each node's chance given its parent (a head node: its head probability times the
engine's calibration scale, capped at 1; a prompt-lookup node: the request's lookup hit rate).
`plan_budget` then keeps, for each request, a prefix of its tree in node order (a prefix in node
order is a subtree), extending whichever request's next nodes add the most expected tokens per
second of marginal step cost, and only while an extension raises the step's expected tokens per
second: (E + gain) / (T + dT) > E / T, where E counts one token per request (the token every
request emits anyway) plus the kept nodes' values, and T is the step-cost model's prediction.
So trees shrink smoothly as the batch grows, confident requests keep drafting at any batch size,
and a step that nothing pays for drafts nothing.

Drafting itself costs time: a head call per level. The step-cost model therefore learns steps
without their drafting time (T is a step without drafting), the plan counts the drafting already
done as spent, and two rules keep the heads from drafting what will not be kept. Before any
head call, `DraftGate` skips the heads at a batch size where what the plan has kept there
recently was worth less than the drafting took (prompt-lookup trees, which call no head, still
draft). Before each deeper head level, `plan_deeper` values the nodes not drafted yet at their
depth's measured acceptance rate (`HeadCalibration.depth_rate`) and calls the level's head only
if the plan over those values, the call's seconds counted, beats stopping, and only for the
requests that plan would keep nodes of. (At 16 requests on a 2-core AVX2 AMD EPYC in float32,
drafting took 8-11 ms of a 150-220 ms step while about one draft node per request was verified;
with every head level drafted, the plan cut 79% of the drafted nodes at 16 requests on a 2-core
AMD EPYC with AVX512-BF16.) `step_planner.StepPlanner` runs these rules step after step.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Sequence

from entmtp_vllm.config import StepBudgetConfig
from entmtp_vllm.step_cost import StepCostModel


@dataclass(frozen=True)
class BudgetRequest:
    """One request's candidate drafts."""

    values: Sequence[float]
    """Per draft node, node order (the root left out): its estimated chance of acceptance;
    never above its parent's."""
    chain_nodes: int
    """The longest prefix of the draft nodes that forms a chain (a longer prefix branches: its
    rows pay the tree-attention cost)."""


def node_values(token_probs: Sequence[float | None], parents: Sequence[int], head_scale: float, lookup_rate: float,
                depth_rate: Callable[[int], float] | None = None, max_depth: int | None = None) -> list[float]:
    """Each draft node's chance of acceptance (node order, root left out): its parent's times
    its own given the parent (a head node: `head_scale` × its head probability, capped at 1; a
    lookup node, marked by a negative probability: `lookup_rate`; a head node not drafted yet,
    marked None: `depth_rate(depth)`, its depth's measured rate). A node deeper than `max_depth`
    is worth 0: with `max_depth` + 1 tokens left, accepting it adds no token (the request ends
    with the token after its parent)."""
    values = [1.0] * len(parents)
    depths = [0] * len(parents)
    for i in range(1, len(parents)):
        p, parent = token_probs[i], parents[i]
        depths[i] = depths[parent] + 1
        if p is None:
            if depth_rate is None:
                raise ValueError(f"node {i} has no probability and no depth rate was given")
            given_parent = depth_rate(depths[i])
        else:
            given_parent = lookup_rate if p < 0 else min(1.0, head_scale * p)
        values[i] = values[parent] * given_parent if max_depth is None or depths[i] <= max_depth else 0.0
    return values[1:]


def _prefix_cost(request: BudgetRequest, n: int, per_token: float, per_tree_token: float) -> float:
    """Marginal seconds of drafting the first `n` nodes (rows of a branching prefix, its root
    included, pay the tree cost)."""
    tree_rows = n + 1 if n > request.chain_nodes else 0
    return per_token * n + per_tree_token * tree_rows


def _best_extension(request: BudgetRequest, kept: int, per_token: float, per_tree_token: float):
    """(gain per second, nodes, gain, seconds) of the request's best extension beyond `kept`
    nodes, or None when it has no node left."""
    best, gain, base = None, 0.0, _prefix_cost(request, kept, per_token, per_tree_token)
    for n in range(kept + 1, len(request.values) + 1):
        gain += request.values[n - 1]
        seconds = _prefix_cost(request, n, per_token, per_tree_token) - base
        rate = gain / seconds if seconds > 0 else float("inf")
        if best is None or rate > best[0]:
            best = (rate, n, gain, seconds)
    return best


@dataclass(frozen=True)
class BudgetPlan:
    """A step's plan: draft nodes kept per request, and what the plan expects of them."""

    kept: list[int]
    """Draft nodes kept per request (a prefix of each tree in node order)."""
    gain: float
    """Expected accepted draft tokens over the step (the kept nodes' values)."""
    seconds: float
    """Predicted extra seconds of the step for verifying them."""


def plan_budget(requests: Sequence[BudgetRequest], cost: StepCostModel, spent: float = 0.0) -> BudgetPlan:
    """Draft nodes kept per request; see the module doc. `spent`: seconds the step already took
    that no choice here changes (the drafting), part of the step's cost the plan divides by.

    The requests' best extensions wait in a heap by gain per second (ties: the lower request
    index first), so each extension costs a heap step, not a pass over the batch."""
    rows = len(requests)
    kept = [0] * rows
    if not rows:
        return BudgetPlan(kept, 0.0, 0.0)
    _, _, per_token, per_tree_token = (float(c) for c in cost.coefficients)
    expected = float(rows)
    base = seconds = cost.cost(rows, rows, 0) + max(0.0, spent)
    heap = []
    for i, request in enumerate(requests):
        _push_extension(heap, i, request, 0, per_token, per_tree_token)
    while heap:
        _, i, n, gain, extra = heap[0]
        if (expected + gain) * seconds <= expected * (seconds + extra):
            break  # the best extension no longer raises expected tokens per second: none does
        heapq.heappop(heap)
        kept[i], expected, seconds = n, expected + gain, seconds + extra
        _push_extension(heap, i, requests[i], n, per_token, per_tree_token)
    return BudgetPlan(kept, expected - rows, seconds - base)


def _push_extension(heap: list, i: int, request: BudgetRequest, kept: int, per_token: float,
                    per_tree_token: float) -> None:
    """Request i's best extension beyond `kept` nodes onto `heap`, when it has one that gains."""
    best = _best_extension(request, kept, per_token, per_tree_token)
    if best is not None and best[2] > 0:
        rate, n, gain, extra = best
        heapq.heappush(heap, (-rate, i, n, gain, extra))


def plan_deeper(known: Sequence[BudgetRequest], predicted: Sequence[BudgetRequest], cost: StepCostModel,
                spent: float, head_seconds: float) -> list[int]:
    """Before a head level: how many draft nodes each request drafts at most (a prefix in node
    order). `known[r]`: request r's nodes whose values are known (copied or drafted), up to its
    first head node not drafted yet; `predicted[r]`: all its nodes, those not drafted yet valued
    at their depth's measured rate (`node_values` with `depth_rate`). Drafting on takes
    `head_seconds` more; it goes on only if the plan over the predicted values, those seconds
    counted, expects more tokens per second than the plan that stops here, and then each request
    drafts as far as that plan keeps (never fewer than its known nodes)."""
    rows = len(known)
    if not rows:
        return []
    base = cost.cost(rows, rows, 0) + max(0.0, spent)
    stop = plan_budget(known, cost, spent)
    go = plan_budget(predicted, cost, spent + head_seconds)
    limits = [len(r.values) for r in known]
    if (rows + go.gain) * (base + stop.seconds) > (rows + stop.gain) * (base + head_seconds + go.seconds):
        limits = [max(n, k) for n, k in zip(limits, go.kept)]
    return limits


@dataclass
class _Drafting:
    """What drafting at one batch size has been worth (averages over its drafting steps)."""

    gain: float
    seconds: float
    drafting: float
    skipped: int = 0


class DraftGate:
    """Whether a step runs the heads: the budget cuts trees only after the heads drafted them, so
    where what it keeps is worth less than the drafting took, the heads are skipped (the proposer
    still drafts prompt-lookup trees, which need no head).

    Per batch size it averages, over the steps that drafted, the plan's expected gain (tokens),
    its extra seconds and the drafting's own seconds; a step of `batch` requests drafts when
    (batch + gain) / (T + seconds + drafting) > batch / T, T the step-cost model's step without
    drafts, or when nothing is known yet at that batch size, or when it is the
    `explore_every`-th step in a row the gate skipped there (the averages follow the load)."""

    def __init__(self, config: StepBudgetConfig) -> None:
        self._weight = 1.0 / config.gate_memory
        self._explore_every = config.gate_explore_every
        self._by_batch: dict[int, _Drafting] = {}

    def drafts(self, batch: int, cost: StepCostModel) -> bool:
        """Whether a step of `batch` requests runs the heads (a skip is counted toward exploring)."""
        known = self._by_batch.get(batch)
        if known is None:
            return True
        if known.skipped + 1 >= self._explore_every:
            known.skipped = 0
            return True
        step = cost.cost(batch, batch, 0)
        if known.gain * step > batch * (known.seconds + known.drafting):
            return True
        known.skipped += 1
        return False

    def observe(self, batch: int, plan: BudgetPlan, drafting: float) -> None:
        """A step of `batch` requests that drafted for `drafting` seconds and kept `plan`."""
        known = self._by_batch.get(batch)
        if known is None:
            self._by_batch[batch] = _Drafting(plan.gain, plan.seconds, drafting)
            return
        w = self._weight
        known.gain += w * (plan.gain - known.gain)
        known.seconds += w * (plan.seconds - known.seconds)
        known.drafting += w * (drafting - known.drafting)
        known.skipped = 0


class LookupRate:
    """The engine-wide chance that a prompt-lookup token is accepted when its parent is (every
    request's lookup chains, older ones forgotten); each request's own rate starts from it."""

    def __init__(self, config: StepBudgetConfig) -> None:
        self._forget = 1.0 - 1.0 / config.calibration_memory
        self._prior, self._weight = config.lookup_prior, config.lookup_prior_weight
        self.hits = 0.0
        self.trials = 0.0

    @property
    def rate(self) -> float:
        return (self.hits + self._prior * self._weight) / (self.trials + self._weight)

    def observe(self, proposed: int, accepted: int) -> None:
        """A verified lookup chain of `proposed` tokens, `accepted` of them accepted (tried:
        accepted + 1, or all of them)."""
        if proposed > 0:
            self.hits = self._forget * self.hits + accepted
            self.trials = self._forget * self.trials + min(proposed, accepted + 1)


class HeadCalibration:
    """How far head probabilities over- or under-state acceptance, learnt from verified nodes:
    scale = (accepted + w) / (predicted + w) over the head nodes whose parent was accepted (the
    nodes that had a chance), forgetting older nodes; w pseudo-nodes of scale 1."""

    PRIOR_NODES = 20.0

    def __init__(self, config: StepBudgetConfig) -> None:
        self._forget = 1.0 - 1.0 / config.calibration_memory
        self.predicted = 0.0
        self.accepted = 0.0
        self._by_depth: dict[int, list[float]] = {}  # depth: [accepted, tried] (forgetting)

    @property
    def scale(self) -> float:
        return (self.accepted + self.PRIOR_NODES) / (self.predicted + self.PRIOR_NODES)

    def depth_rate(self, depth: int) -> float:
        """The measured chance that a head node at `depth` is accepted when its parent is (all
        such nodes verified, forgetting older ones; `PRIOR_NODES` pseudo-nodes at 1, so a depth
        not seen yet is predicted to pay, and gets drafted, and measured)."""
        accepted, tried = self._by_depth.get(depth, (0.0, 0.0))
        return (accepted + self.PRIOR_NODES) / (tried + self.PRIOR_NODES)

    def observe(self, token_probs: Sequence[float], parents: Sequence[int], accepted: Sequence[int]) -> None:
        """A verified tree: its nodes' head probabilities, parents, and the accepted path."""
        on_path = set(accepted)
        factor = self._forget
        depths = [0] * len(parents)
        for i in range(1, len(parents)):
            depths[i] = depths[parents[i]] + 1
            p = token_probs[i]
            if p >= 0 and parents[i] in on_path:
                hit = i in on_path
                self.predicted = factor * self.predicted + p
                self.accepted = factor * self.accepted + hit
                counts = self._by_depth.setdefault(depths[i], [0.0, 0.0])
                counts[0] = factor * counts[0] + hit
                counts[1] = factor * counts[1] + 1.0
