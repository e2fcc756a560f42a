"""`EntMTPProposer`: the drafter vLLM builds for `--speculative-config '{"model": "entmtp_vllm.EntMTP"}'`.

vLLM constructs it as `custom_class` (`EntMTPProposer(vllm_config)`) inside the model runner and
calls `load_model(target_model)`. The EntMTP model runner (`model_runner.py`) then drives it,
once per step, with what vLLM's `propose()` does not pass: each request's id, the target's last
hidden state at its last accepted node, the root token, and the verifier's p0 / entropy there.
Per request it keeps the core scheduler's state (`scheduling.RequestSchedule`: policy state,
feature tracker, lookup statistics; created on first sight, freed when the request finishes, is
aborted or preempted; the `entmtp_active_requests` gauge follows their number), asks the
scheduler for this step's tree, drafts the tree
with the core `TreeDrafter`, and returns one `Proposal` per request (tree index, tokens in bank
node order); the runner keeps them until it verifies them and hands vLLM their drafts.

Hybrid trees: when the bank has trees with a prompt-lookup chain, each request's context
(prompt + output, from vLLM's input batch) is searched by the core `PromptLookup`; the chain
is cut to the tokens found (no match: no branch), and the lookup features reach the policy.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.lookup import NO_MATCH, LookupMatch, PromptLookup
from entmtp_vllm.scheduling import RequestSchedule, TreeScheduler
from entmtp_vllm.step_planner import StepPlanner
from entmtp_vllm.topology import TreeBuffers, build_tree_buffers
from entmtp_vllm.tree import Tree
from entmtp_vllm.vllm_plugin import metrics
from entmtp_vllm.vllm_plugin.stats import ProposerStats
from entmtp_vllm.vllm_plugin.config import PROPOSER_CLASS, EntMTPConfig, config_from_vllm, heads_folder, resolve
from entmtp_vllm.vllm_plugin.target import check_target, served_model, vocab_weights

WORKER_HINT = (
    "EntMTP needs its model runner: leave --worker-cls at auto (the plugin then picks "
    "entmtp_vllm.vllm_plugin.cpu.worker.EntMTPCPUWorker on CPU, entmtp_vllm.vllm_plugin.cuda.worker.EntMTPGPUWorker on CUDA) and keep the plugin "
    "allowed (VLLM_PLUGINS unset or naming 'entmtp'); a custom worker class disables that"
)


@dataclass
class Proposal:
    """A drafted tree waiting for verification."""

    tree_index: int
    """Bank index of the tree."""
    tokens: torch.Tensor
    """long[N] (CPU): the token of each node in bank node order; tokens[0] is the root."""
    token_ids: list[int]
    """`tokens` as Python ints (root first), what the scheduler and the acceptance walks read."""
    lookup_length: int = 0
    """Prompt-lookup tokens drafted (a hybrid tree's chain is cut to this length)."""
    token_probs: tuple[float, ...] = ()
    """Per node (the root first): its head probability, `LOOKUP_PROB` for a lookup node
    (`heads.drafting.Draft.token_probs`); empty when the drafter gives none."""

    @property
    def drafts(self) -> list[int]:
        """token_ids[1:]: what is handed to the scheduler."""
        return self.token_ids[1:]


@dataclass
class DraftRequest:
    """One request's input to drafting, from the step the runner just verified."""

    req_id: str
    hidden: torch.Tensor
    """The target's last hidden state (after the final norm) at the last accepted node."""
    root: int
    """The token emitted last (the bonus token): the root of the next tree."""
    p0: float
    """The target's top-1 probability at the last accepted node."""
    entropy: float
    """Entropy (nats) of the target's distribution there."""
    accept_length: int | None
    """Tokens emitted by the tree step just verified; None when it had no tree (prefill, or
    no usable draft)."""
    context: Any = None
    """The request's tokens so far (prompt + output, ending with `root`), for prompt lookup;
    None: no lookup for this request this step."""
    observed: tuple[int, torch.Tensor] | None = None
    """Heads with a prefix layer only: (position of the first, hidden states [k, H]) of the
    positions this step accepted, in order (after a prefill: the prompt's last one)."""
    remaining: int | None = None
    """Tokens the request may still emit: its `max_tokens` less its output so far (`root`
    included), or the model's length less its tokens, whichever is smaller. The budget keeps no
    node deeper than remaining - 1 (accepting it would add no token). None: unknown."""


def remaining_tokens(request_state: Any, num_tokens: int, max_model_len: int) -> int | None:
    """Tokens a request may still emit (`DraftRequest.remaining`), from vLLM's cached request
    state and its token count (prompt + output); None when it has no sampling parameters."""
    params = getattr(request_state, "sampling_params", None)
    if params is None:
        return None
    left = max_model_len - num_tokens
    if params.max_tokens is not None:
        left = min(left, params.max_tokens - (num_tokens - request_state.num_prompt_tokens))
    return max(left, 0)


class EntMTPProposer:
    """Tree drafter for vLLM: Hydra heads + a per-request tree policy over a TopologyBank."""

    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.settings: EntMTPConfig = config_from_vllm(vllm_config)
        self.num_speculative_tokens: int = spec.num_speculative_tokens
        resolved = resolve(self.settings, self.num_speculative_tokens)
        self.bank = resolved.bank
        self.policy = resolved.policy
        self.fallback_tree = resolved.fallback_tree
        self.fallback_max_batch = resolved.fallback_max_batch
        self.model_config = vllm_config.model_config
        self.device = torch.device("cpu")
        self.drafter = None
        self.runner_attached = False
        """Set by the EntMTP model runner; without it vLLM would call `propose()` blindly."""
        self.stats = ProposerStats()
        self.budget = self.settings.budget
        self.planner = StepPlanner(self.budget)
        # the planner's state, by the names the runner's stats and the tests read
        self.cost_model, self.calibration = self.planner.cost_model, self.planner.calibration
        self.lookup_rate, self.gate = self.planner.lookup_rate, self.planner.gate
        self._drafting_seconds = 0.0
        """Seconds `propose_trees` took since the last timed step (not part of what the step-cost
        model learns: the plan counts them as spent, the gate weighs them)."""
        self.scheduler = TreeScheduler(self.policy, self.bank.lookup_length > 0, self.settings.lookup.ema_alpha)
        self._requests: dict[str, RequestSchedule] = {}
        self._forks: dict[str, Any] = {}
        """Per request, its own drafter (heads with a prefix layer: the layer's cache)."""
        self._subtrees: dict[tuple[int, int, int], tuple[TreeBuffers, bool]] = {}
        self.lookup = PromptLookup(self.settings.lookup) if self.bank.lookup_length > 0 else None
        metrics.set_gauge("active_requests", 0)  # the series exists (at 0) from the start

    # ------------------------------------------------------------------ vLLM's interface

    def load_model(self, target_model: torch.nn.Module) -> None:
        """Load the heads and bind them to the target's embedding and LM head, once their verifier
        record matches those weights (`check_target`: another model is refused in one line)."""
        if not self.runner_attached:
            raise EntMTPError(WORKER_HINT)
        from entmtp_vllm.heads.checkpoint import load_heads
        from entmtp_vllm.heads.drafting import TreeDrafter

        folder = heads_folder(self.settings)
        warning = check_target(folder, lambda: served_model(self.model_config), target_model)
        if warning:
            logging.getLogger("vllm.entmtp").warning(warning)
        heads = load_heads(folder, self.model_config.hf_text_config)
        prefix = getattr(heads, "prefix", None)
        if prefix is not None and (prefix.config.context != "answer" or prefix.config.window is None):
            raise EntMTPError(
                f"{folder} holds Hydra++ heads whose prefix layer reads context: {prefix.config.context}, window: "
                f"{prefix.config.window}; the vLLM plugin feeds a prefix layer only what `entmtp train-heads "
                "--prefix-layer` trains it on (context: answer, a sliding window from the prompt's last position "
                "on): use such heads, or heads without a prefix layer"
            )
        num_heads = getattr(heads, "num_heads", None)
        if isinstance(num_heads, int) and self.bank.head_depth > num_heads:
            raise EntMTPError(
                f"the trees need {self.bank.head_depth} heads but {folder} has {num_heads}; "
                "use shallower trees or other heads"
            )
        embed, lm_head = vocab_weights(target_model, self.model_config.get_vocab_size())
        self.device = embed.device
        heads = heads.to(device=embed.device, dtype=embed.dtype).eval()
        vocab = None
        if self.settings.draft_vocab and not heads.own_lm_head:
            from entmtp_vllm.heads.draft_vocab import load_draft_vocab

            vocab = load_draft_vocab(folder, heads.vocab_size, self.settings.draft_vocab_size)
        self.drafter = TreeDrafter(heads, embed, lm_head, draft_vocab=vocab)
        if self.settings.head_gemm == "engine" and self.device.type == "cpu":
            from entmtp_vllm.cpu_gemm.vllm_gemm import route_heads  # the CPU platform's matrix multiply

            self.stats.head_gemm, self.stats.head_gemm_layers = route_heads(self.drafter)

    @property
    def observes_positions(self) -> bool:
        """Whether drafting needs every accepted position's hidden state (a prefix layer)."""
        return getattr(self.drafter, "prefix_cache", None) is not None

    def _drafter_of(self, request: DraftRequest):
        """The drafter a request drafts with: the shared one, or for heads with a prefix layer
        the request's own fork (its prefix-layer cache), fed this step's accepted positions.
        `drop` frees the fork with the request's state (a preempted request is dropped and,
        resumed, starts again from its recomputed last position)."""
        if not self.observes_positions:
            return self.drafter
        drafter = self._forks.get(request.req_id)
        if drafter is None:
            drafter = self._forks[request.req_id] = self.drafter.fork()
        if request.observed is not None:
            first, hidden = request.observed
            seen = drafter.prefix_cache.positions
            if seen and first != seen[-1] + 1:
                self._count("prefix_gaps")
                if first > seen[-1] + 1:  # positions decoded without us (vLLM's sampler): start again here
                    drafter.reset()
            drafter.observe(hidden.to(self.device), torch.arange(first, first + hidden.shape[0]))
        return drafter

    def propose(self, *args: Any, **kwargs: Any) -> list[list[int]]:
        """vLLM's generic entry point: only reached when the EntMTP runner is missing."""
        raise EntMTPError(WORKER_HINT)

    # ------------------------------------------------------------------ the runner's interface

    def subtree(self, tree_index: int, num_nodes: int, lookup_length: int = 0) -> tuple[TreeBuffers, bool]:
        """Buffers of the first `num_nodes` nodes of a bank tree (its lookup chain cut to
        `lookup_length`; a prefix in node order is a valid subtree), and whether that subtree
        is a chain."""
        key = (tree_index, num_nodes, lookup_length)
        found = self._subtrees.get(key)
        if found is None:
            full = self.bank.buffers(tree_index, "cpu", lookup_length=lookup_length)
            if num_nodes == full.num_nodes:
                buffers = full
            else:
                buffers = build_tree_buffers(Tree.from_choices(full.nodes[1:num_nodes]), "cpu")
            chain = bool((buffers.parents[1:] == torch.arange(num_nodes - 1)).all())
            found = self._subtrees[key] = (buffers, chain)
        return found

    def record_lookup(self, req_id: str, proposed: int, accepted: int) -> None:
        """After verification: how many of the request's lookup tokens were drafted / accepted
        (its lookup statistics and the engine's lookup rate; `record_verification` counts them)."""
        state = self._requests.get(req_id)
        if state is not None and proposed:
            self.scheduler.observe(state, None, proposed, accepted)
            self.lookup_rate.observe(proposed, accepted)

    def record_verification(self, trees: int, drafted_nodes: int, accepted_tokens: int, moves: int,
                            lookup_proposed: int = 0, lookup_accepted: int = 0) -> None:
        """One step's verified trees, counted once: their draft nodes, accepted tokens, K/V rows
        moved by compaction, and prompt-lookup tokens drafted / accepted."""
        self.stats.verified += trees
        self._count("drafted_nodes", drafted_nodes)
        self._count("accepted_tokens", accepted_tokens)
        self._count("compaction_moves", moves)
        self._count("lookup_proposed", lookup_proposed, metric="lookup_tokens")
        self._count("lookup_accepted", lookup_accepted)

    def _count(self, stat: str, value: int = 1, metric: str | None = None, **labels: str) -> None:
        """One counter, in the proposer's stats and the Prometheus series (named `metric`, default
        the stat's name); a zero changes neither."""
        if value:
            setattr(self.stats, stat, getattr(self.stats, stat) + value)
            metrics.count(metric or stat, value, **labels)

    def drafts_nothing(self, batch_size: int) -> bool:
        """Whether a step with `batch_size` requests falls back to plain decoding (no drafts)."""
        return self.fallback_max_batch is not None and batch_size > self.fallback_max_batch and self.fallback_tree is None

    @torch.inference_mode()
    def propose_trees(self, requests: list[DraftRequest | None], batch_size: int) -> list[Proposal | None]:
        """Draft one tree per request (None in, or nothing drafted: None out): every request's
        policy chooses its tree, all trees are drafted together (one head call per depth), and
        the step budget keeps of each the prefix that pays for itself."""
        if self.drafter is None:
            raise EntMTPError("EntMTP: propose_trees called before load_model")
        started = time.perf_counter()
        try:
            return self._propose_trees(requests, batch_size, started)
        finally:
            self._drafting_seconds += time.perf_counter() - started

    def _propose_trees(self, requests: list[DraftRequest | None], batch_size: int, started: float) -> list[Proposal | None]:
        proposals: list[Proposal | None] = [None] * len(requests)
        if self.drafts_nothing(batch_size):  # the explicit batch fallback: plain decoding
            self._count("fallback_steps", sum(r is not None for r in requests))
            return proposals
        # The gate keeps the heads from running where they have not paid lately; prompt-lookup
        # trees (copied tokens, no head call) still draft, and the budget still judges them.
        heads_pay = self.planner.heads_pay(batch_size)
        if not heads_pay:
            self._count("gate_skips")
            if self.policy.heads_read:  # the policy itself would call the heads to choose
                self._skip_drafting(requests)
                return proposals
        use_fallback = self.fallback_max_batch is not None and batch_size > self.fallback_max_batch
        fallback_tree = self.fallback_tree if use_fallback else None  # this step's tree for every request
        live = [i for i, request in enumerate(requests) if request is not None]
        found = [self._lookup(requests[i]) for i in live]
        # Under the fallback only the best matches draft (the policy still sees them all).
        matches = self._fallback_matches(found) if fallback_tree is not None else found
        states = [self._state(requests[i].req_id) for i in live]
        remaining = [requests[i].remaining for i in live]
        for i, state in zip(live, states):
            self.scheduler.observe(state, requests[i].accept_length)
            self._score_undrafted(state, requests[i].context)
        all_live, all_states, all_found = live, states, found
        steps = [self._drafter_of(requests[i]).begin(requests[i].hidden, requests[i].root) for i in live]
        # The heads' top-1 chain only as deep as the policy reads it (head_top1_1: head 1, whose
        # output the draft reuses); the path value max(p0, p0·p1, …) equals p0 (every p <= 1).
        # Under the batch fallback a policy that reads the heads does not choose.
        depth = self.policy.heads_read
        asks = fallback_tree is None or not depth
        self.planner.start_heads()
        chains = self.drafter.greedy_chains(steps, depth) if depth and asks else [[] for _ in live]
        indices = []
        switches = sum(state.policy.switches for state in states)
        for i, state, seen, chain in zip(live, states, found, chains):
            if asks:
                features = self.scheduler.features(state, requests[i].p0, chain, requests[i].entropy, seen)
                index = self.scheduler.choose(state, features)
            else:
                self.scheduler.skip(state, requests[i].entropy)
            indices.append(fallback_tree if fallback_tree is not None else index)
        self._count("switches", sum(state.policy.switches for state in states) - switches)
        if fallback_tree is not None:
            self._count("fallback_steps", len(live))
        trees = [self.bank.buffers(index, self.device, lookup_length=len(m.tokens)) for index, m in zip(indices, matches)]
        if not heads_pay:  # only lookup-only trees with a match draft this step
            copies = [k for k, buffers in enumerate(trees) if buffers.num_nodes > 1 and buffers.head_depth == 0]
            live, steps, states, indices, trees, matches, remaining = (
                [values[k] for k in copies] for values in (live, steps, states, indices, trees, matches, remaining)
            )
        # Top-k drafting (and copying) is deterministic: the lossless rule then needs no draft
        # distributions (q is the one-hot on each drafted token).
        lookups = [state.lookup for state in states]
        limit = self.planner.limit(trees, lookups, batch_size, started, remaining) if self.budget is not None else None
        drafts = self.drafter.draft_trees(steps, trees, [m.tokens for m in matches], limit=limit)
        plan = None
        if self.budget is not None:
            plan = self.planner.plan(drafts, trees, lookups, batch_size, time.perf_counter() - started, remaining)
        kept = plan.kept if plan is not None else [buffers.num_nodes - 1 for buffers in trees]
        used: dict[int, int] = {}  # bank index: requests that drafted it
        shapes: set[str] = set()
        drafted_lookup: set[int] = set()
        for i, index, buffers, draft, n in zip(live, indices, trees, drafts, kept):
            shapes.add("none" if n == 0 else "chain" if n <= buffers.chain_nodes else "tree")
            if buffers.lookup_nodes and buffers.lookup_nodes[0] <= n:
                drafted_lookup.add(i)
            if n == 0:
                continue
            tokens = draft.tokens[: n + 1].to("cpu", torch.long)
            ids = list(draft.token_ids[: n + 1]) if draft.token_ids else tokens.tolist()
            proposals[i] = Proposal(index, tokens, ids, len(buffers.lookup_nodes), draft.token_probs[: n + 1])
            used[index] = used.get(index, 0) + 1
        if self.budget is not None:
            self._count("budget_cut_nodes", sum(b.num_nodes - 1 for b in trees) - sum(kept))
            self._count("budget_undrafted_nodes", sum(b.num_nodes - len(d.token_probs) for b, d in zip(trees, drafts)))
            self._count("budget_empty", kept.count(0))
        for index, times in used.items():
            name = self.bank.names[index]
            self.stats.tree_usage[name] = self.stats.tree_usage.get(name, 0) + times
            self._count("steps", times, metric="tree_steps", tree=name)
        for i, state, match in zip(all_live, all_states, all_found):
            if match.tokens and i not in drafted_lookup:  # scored against what the request emits next
                state.lookup.expect(len(requests[i].context), match.tokens)
        if len(used) > 1:
            self.stats.mixed_steps += 1
        if len(shapes) == 3:
            self.stats.shape_mixed_steps += 1
        if self.gate is not None and plan is not None and heads_pay:
            self.gate.observe(batch_size, plan, time.perf_counter() - started)
        return proposals

    def _skip_drafting(self, requests: list[DraftRequest | None]) -> None:
        """A step that drafts nothing: the policies still see the step's outcome, and a prefix
        layer's caches still follow the accepted positions."""
        for request in requests:
            if request is None:
                continue
            state = self._state(request.req_id)
            self.scheduler.observe(state, request.accept_length)
            self.scheduler.skip(state, request.entropy)
            if self.observes_positions:
                self._drafter_of(request)

    def _score_undrafted(self, state: RequestSchedule, context: Any) -> None:
        """The request's last lookup proposal that was not drafted, scored against the tokens it
        emitted since: the step budget's lookup hit rates (the request's and the engine's) then
        follow the lookup while the budget drafts none of it, instead of keeping the rate that
        stopped it (a few early misses would otherwise stop prompt lookup for good)."""
        if context is None or state.lookup.pending is None:
            return
        tried, hits = state.lookup.settle(context)
        if tried:
            self.lookup_rate.observe(tried, hits)
            self._count("lookup_unverified", tried)

    def record_step_time(self, seconds: float, shape: tuple[int, int, int] | None) -> None:
        """A timed engine step; `shape` (requests, rows, tree rows) when it was decode-only,
        which the step-cost model learns from, less the drafting the step did."""
        self._count("steps_timed")
        self._count("step_seconds", seconds)
        drafting, self._drafting_seconds = self._drafting_seconds, 0.0
        if shape is not None and self.planner.observe_step(seconds - drafting, shape):
            if self.cost_model.steps % 64 == 1:
                for name, value in self.cost_model.as_dict().items():
                    if name.endswith("_ms"):
                        metrics.set_gauge("step_cost_ms", value, coefficient=name.removesuffix("_ms"))

    def record_overhead(self, phase: str, seconds: float) -> None:
        """Seconds EntMTP's own code took in one phase of a step (plan, verify, compact, draft)."""
        self.stats.overhead_seconds[phase] = self.stats.overhead_seconds.get(phase, 0.0) + seconds
        metrics.count("overhead_seconds", seconds, phase=phase)

    def record_accepted(self, token_probs: tuple[float, ...], parents: list[int], accepted: list[int]) -> None:
        """A verified tree's head probabilities and accepted path (node indices, root first),
        for the calibration of head probabilities."""
        if token_probs:
            self.calibration.observe(token_probs, parents, accepted)

    def _lookup(self, request: DraftRequest | None) -> LookupMatch:
        """The prompt-lookup proposal for a request (NO_MATCH without lookup trees or context)."""
        if self.lookup is None or request is None:
            return NO_MATCH
        context = request.context
        if context is None or not len(context) or int(context[-1]) != request.root:
            return NO_MATCH
        return self.lookup.propose(context, self.bank.lookup_length)

    def _fallback_matches(self, matches: list[LookupMatch]) -> list[LookupMatch]:
        """Under load: keep only matches of at least `min_match` tokens, cut to
        `max_lookup_tokens`, and, longest matches first, only as many as `max_draft_tokens` allows."""
        rule = self.settings.batch_fallback  # set: there is a fallback tree
        kept = [NO_MATCH] * len(matches)
        budget = rule.max_draft_tokens
        for i in sorted(range(len(matches)), key=lambda i: -matches[i].match_length):
            match = matches[i]
            if match.match_length < rule.min_match:
                break  # sorted: every later match is shorter
            tokens = match.tokens[: rule.max_lookup_tokens] if rule.max_lookup_tokens else match.tokens
            if budget is not None:
                tokens = tokens[:budget]
                budget -= len(tokens)
            if tokens:
                kept[i] = LookupMatch(tokens, match.match_length, match.position)
        return kept

    def drop(self, req_ids: set[str] | list[str]) -> None:
        """Free the state of finished, aborted or preempted requests."""
        freed = 0
        for req_id in req_ids:
            self._forks.pop(req_id, None)
            if self._requests.pop(req_id, None) is not None:
                freed += 1
        if freed:
            self.stats.requests_freed += freed
            metrics.set_gauge("active_requests", len(self._requests))

    @property
    def num_live_requests(self) -> int:
        return len(self._requests)

    @property
    def prefix_windows(self) -> list[tuple[int, int]]:
        """(first, last) position held by each request's own prefix-layer cache (heads with a
        prefix layer); consecutive positions, so last - first + 1 entries."""
        return [(f.prefix_cache.positions[0], f.prefix_cache.positions[-1])
                for f in self._forks.values() if f.prefix_cache.positions]

    def _state(self, req_id: str) -> RequestSchedule:
        state = self._requests.get(req_id)
        if state is None:
            state = self._requests[req_id] = self.scheduler.new_request()
            self.stats.requests_seen += 1
            metrics.set_gauge("active_requests", len(self._requests))
        return state


__all__ = ["EntMTPProposer", "DraftRequest", "Proposal", "PROPOSER_CLASS"]
