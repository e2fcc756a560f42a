"""`TreeRunnerMixin`: tree verification inside any vLLM V1 model runner (CPU or GPU).

One decode step, top to bottom (line numbers of vLLM 0.32.0, `v1/worker/gpu_model_runner.py`):

1. `_update_states` (:1172): frees the drafter's state and the pending proposals of finished /
   aborted / preempted requests.
2. `_prepare_inputs` (:1920): after the stock one (slots stay index-based), `_plan_step` matches
   each request's scheduled drafts against its pending `Proposal` (`scheduled[:n] ==
   proposed[:n]`; the first n nodes of a tree in node order form a subtree), sets positions =
   num_computed + depth, and builds this step's `StepPlan`: which requests verify which tree, its
   buffers, the token rows they occupy, and the attention backend's `TreeStep`.
3. `_build_attention_metadata` (:2249): the `TreeStep` is attached to every attention metadata
   object of the step (`TREE_STEP_ATTR`), so the tree attention backend reads it from the
   metadata vLLM hands each layer -- no global state. The plan lives exactly one step: it is
   cleared when `execute_model` starts, when it returns without sampling, and after
   `sample_tokens` (whether or not vLLM ran the drafter), so a dummy run between steps (data
   parallel ranks, profiling) never sees a tree.
4. `_sample` (:3437): per request, the core acceptance rule over its logits rows (greedy /
   typical / lossless), then KV compaction of the accepted paths to contiguous slots
   (`_entmtp_compact`, the platform's); returns `[accepted drafts..., bonus]` rows padded with -1.
5. `propose_draft_token_ids` (:4748): hands the drafter the request ids, the hidden state at
   each request's last accepted node and the verifier's p0 / entropy there; keeps the returned
   proposals for step 2 of the next step and gives vLLM their drafts, which travel back to the
   engine core with the step's output (`draft_handoff.py`: no extra round trip for them).

Every step is timed from `execute_model` to the end of `sample_tokens` (the drafting included),
plus the gap since the previous step when steps run back to back (the engine's scheduling):
decode-only steps feed the proposer's step-cost model (`step_cost.py`, which the step budget
reads), and the time of EntMTP's own phases (plan, verify, compact, draft) is counted beside it.

The platform runners (`cpu/model_runner.py`, `cuda/model_runner.py`) add only where compaction
writes (`_entmtp_compact`). Drafts are read from `scheduler_output.scheduled_spec_decode_tokens`,
never from `input_ids` (which clamps the scheduler's -1 placeholders to token 0). Requests without
a usable draft (prefill, placeholders, a draft that is not ours) are sampled from their first row
and accept nothing.

Sampled requests are verified by the draft-independent rule (`acceptance.TokenWalk`, drawn by
`sampled_rows.SampledRows`): each token is drawn as vLLM's sampler draws it without speculation
and the tree is walked along it, so a seeded request's text is vLLM's. The tree path applies
temperature, top-k, top-p, min_p, logit bias and seeds. Any other sampler feature (penalties,
allowed tokens, bad words, min_tokens, logprobs; min_p under typical acceptance) sends the whole
batch to vLLM's own sampler while such a request is in it: scheduled drafts are ignored (only
their first row counts) and nothing drafts, so the batch decodes exactly as vLLM without
speculation. A step where no request verifies a tree goes to vLLM's sampler the same way (vLLM
builds spec-decode metadata on every step once a proposer is configured, so `_sample` must).
Requests with structured output get no drafts; vLLM's bitmask still applies to their row.

Host synchronisations the tree path adds on a GPU are marked "host sync (GPU)" where they happen
and listed, with their call sites, in `docs/gpu.md`.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from vllm.logger import init_logger
from vllm.v1.outputs import ModelRunnerOutput, SamplerOutput

from entmtp_vllm.acceptance import TokenWalk, accept, accept_greedy_host, greedy_step
from entmtp_vllm.config import SamplingParams
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.features import entropy as entropy_of
from entmtp_vllm.vllm_plugin.draft_handoff import attach as attach_drafts
from entmtp_vllm.vllm_plugin.proposer import DraftRequest, EntMTPProposer, Proposal, remaining_tokens
from entmtp_vllm.vllm_plugin.sampled_rows import RowSettings, SampledRows, apply_logit_biases, builtin_logitsprocs
from entmtp_vllm.vllm_plugin.step_plan import StepPlan, Verification, core_params, unsupported
from entmtp_vllm.vllm_plugin.tree_step import TREE_STEP_ATTR, TreeStep, build_tree_step

logger = init_logger(__name__)

def sampled_ends(num_drafts) -> np.ndarray:
    """End of each request's logits rows (vLLM's `cu_num_sampled_tokens`: a request samples its
    drafts + 1 rows), from the host list vLLM keeps beside that device tensor: no device read."""
    return np.cumsum(np.asarray(num_drafts, dtype=np.int64) + 1)


def _accepted_rows(plan: StepPlan, i: int, root_row: int, accepted: list[int]) -> tuple[int, list[int]]:
    """(position of the root, token rows of the accepted nodes) of request i: after compaction
    the accepted path sits at consecutive positions from the root's (a prefill chunk's root row
    is its last)."""
    first = int(plan.prefix_lens[i]) + root_row - int(plan.starts[i])
    return first, [root_row + node for node in accepted]


class TreeRunnerMixin:
    """Tree verification for the EntMTP proposer, mixed into a vLLM V1 model runner class
    (`class Runner(TreeRunnerMixin, CPUModelRunner)`). The platform class implements
    `_entmtp_compact`."""

    def __init__(self, vllm_config, device) -> None:
        super().__init__(vllm_config, device)
        drafter = getattr(self, "drafter", None)
        self._entmtp: EntMTPProposer | None = drafter if isinstance(drafter, EntMTPProposer) else None
        if self._entmtp is not None:
            if self.uses_mrope:
                raise EntMTPError("EntMTP does not support M-RoPE models yet (tree positions would need mrope_positions)")
            self._entmtp.runner_attached = True
            self.input_batch.logitsprocs = builtin_logitsprocs(vllm_config, device)  # min_p, logit bias
        self._entmtp_plan: StepPlan | None = None
        self._entmtp_pending: dict[str, Proposal] = {}
        """Proposals drafted at the end of a step, waiting for the step that schedules them."""
        self._entmtp_warned: set[str] = set()
        self._entmtp_started: float | None = None
        """When the step being run entered `execute_model` (perf_counter seconds)."""
        self._entmtp_last_end = float("-inf")
        """When the previous timed step ended."""
        self._entmtp_shape: tuple[int, int, int] | None = None
        """(requests, rows, tree rows) of the step being run when it is decode-only."""
        self._entmtp_sampled = SampledRows(self.sampler)
        """Sampled requests' draws at verification (a row buffer kept across steps)."""

    # ------------------------------------------------------------------ platform hooks

    _entmtp_captures_kv: bool = False
    """Whether the platform's attention backend keeps the tree rows' fresh K/V for compaction
    (`TreeStep.capture_rows`)."""

    def _entmtp_compact(self, plan: StepPlan, paths: dict[int, list[int]]) -> None:
        """Move accepted K/V rows next to their prefix in every layer: `paths` maps each request
        index whose accepted path skips a node to that path (node indices, root first); node
        `paths[i][j]` moves to position `prefix_lens[i] + j`."""
        raise NotImplementedError

    def _entmtp_check_backend(self) -> None:
        """Platform hook, at start-up: refuse an attention backend the tree path cannot use."""

    def initialize_attn_backend(self, kv_cache_config, *args, **kwargs) -> None:
        super().initialize_attn_backend(kv_cache_config, *args, **kwargs)
        if self._entmtp is not None:  # checked once, before serving, not at a tree step
            if len(kv_cache_config.kv_cache_groups) != 1:
                raise EntMTPError("EntMTP supports models with one KV cache group (plain decoder attention) only")
            self._entmtp_check_backend()

    # ------------------------------------------------------------------ step timing

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        self._entmtp_started = time.perf_counter() if self._entmtp is not None else None
        self._entmtp_shape = None
        self._entmtp_plan = None  # built again by this step's _prepare_inputs
        output = super().execute_model(scheduler_output, intermediate_tensors)
        if output is not None:  # nothing to sample: no sample_tokens follows
            self._entmtp_started = None
            self._entmtp_plan = None
        return output

    def sample_tokens(self, grammar_output):
        try:
            output = super().sample_tokens(grammar_output)
        finally:
            # The plan lives one step: vLLM skips the drafter (which reads it) when a request's
            # context does not fit it, and a dummy run after this step must not see its tree.
            self._entmtp_plan = None
        if self._entmtp is not None and isinstance(output, ModelRunnerOutput):
            output = attach_drafts(output, self.take_draft_token_ids())  # no round trip for them
        started, self._entmtp_started = self._entmtp_started, None
        if started is not None:
            ended = time.perf_counter()
            seconds = ended - started
            # Back-to-back steps: the time since the previous step ended (the engine core's
            # scheduling, the round trip to this worker) is part of what a step costs; a longer
            # gap is an idle server, not cost.
            gap = started - self._entmtp_last_end
            if 0.0 <= gap < seconds:
                seconds += gap
            self._entmtp_last_end = ended
            self._entmtp.record_step_time(seconds, self._entmtp_shape)
        return output

    def _timed(self, phase: str, started: float) -> None:
        self._entmtp.record_overhead(phase, time.perf_counter() - started)

    # ------------------------------------------------------------------ request lifetime

    def _update_states(self, scheduler_output):
        result = super()._update_states(scheduler_output)
        if self._entmtp is not None:
            gone = set(scheduler_output.finished_req_ids)
            gone |= set(getattr(scheduler_output, "preempted_req_ids", None) or ())
            if gone:
                self._entmtp.drop(gone)
                for req_id in gone:
                    self._entmtp_pending.pop(req_id, None)
        return result

    # ------------------------------------------------------------------ inputs

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        result = super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        if self._entmtp is not None:
            started = time.perf_counter()
            plan = self._entmtp_plan = self._plan_step(scheduler_output, num_scheduled_tokens)
            if plan.decode_only:
                self._entmtp_shape = (plan.num_reqs, int(plan.starts[-1]), plan.tree_tokens)
            self._timed("plan", started)
        return result

    def _build_attention_metadata(self, *args, **kwargs):
        attn_metadata, spec_metadata = super()._build_attention_metadata(*args, **kwargs)
        plan = self._entmtp_plan
        step = plan.tree_step if plan is not None and not kwargs.get("for_cudagraph_capture") else None
        groups = attn_metadata if isinstance(attn_metadata, list) else [attn_metadata]
        for per_layer in groups:
            for metadata in {id(m): m for m in per_layer.values()}.values():
                setattr(metadata, TREE_STEP_ATTR, step)
        return attn_metadata, spec_metadata

    def _plan_step(self, scheduler_output, num_scheduled_tokens: np.ndarray) -> StepPlan:
        drafter = self._entmtp
        assert drafter is not None
        batch = self.input_batch
        num_reqs = batch.num_reqs
        starts = np.zeros(num_reqs + 1, dtype=np.int64)
        np.cumsum(num_scheduled_tokens[:num_reqs], out=starts[1:])
        trees: list[Verification | None] = [None] * num_reqs
        params: list[SamplingParams] = []
        logit_bias: list[dict[int, float] | None] = []  # per request: its logit bias, its min_p
        min_p: list[float] = []
        stock_sampler = False
        for i, req_id in enumerate(batch.req_ids[:num_reqs]):
            sampling_params = self.requests[req_id].sampling_params
            params.append(core_params(sampling_params))
            logit_bias.append(getattr(sampling_params, "logit_bias", None) or None)
            min_p.append(float(getattr(sampling_params, "min_p", 0.0) or 0.0))
            for feature in unsupported(sampling_params, drafter.settings.acceptance):
                stock_sampler = True
                if feature not in self._entmtp_warned:
                    self._entmtp_warned.add(feature)
                    logger.warning(
                        "EntMTP's tree verification does not apply %s: batches with such requests "
                        "decode without speculation (vLLM's sampler)", feature,
                    )

        scheduled = scheduler_output.scheduled_spec_decode_tokens
        prefix_lens = batch.num_computed_tokens_cpu[:num_reqs].astype(np.int64)
        decode_only = num_reqs > 0
        tree_tokens = 0
        position_rows: list[np.ndarray] = []
        position_values: list[np.ndarray] = []
        for req_id in scheduler_output.num_scheduled_tokens:
            proposal = self._entmtp_pending.pop(req_id, None)
            drafts = scheduled.get(req_id)
            i = batch.req_id_to_index[req_id]
            if int(num_scheduled_tokens[i]) != 1 + len(drafts or ()):
                decode_only = False  # a prefill chunk
            if stock_sampler or proposal is None or not drafts:
                continue
            n = len(drafts)
            if int(num_scheduled_tokens[i]) != n + 1 or list(drafts) != proposal.drafts[:n]:
                continue  # placeholders (-1), or drafts that are not this proposal's
            buffers, chain = drafter.subtree(proposal.tree_index, n + 1, proposal.lookup_length)
            trees[i] = Verification(buffers, proposal.tokens[: n + 1], proposal.token_ids[: n + 1], chain, -1,
                                    proposal.token_probs[: n + 1])
            if not chain:
                tree_tokens += n + 1
                start = int(starts[i])
                position_rows.append(np.arange(start, start + n + 1))
                position_values.append(int(prefix_lens[i]) + buffers.depths.numpy())
        if position_rows:  # one host-to-device copy for the whole step
            rows = torch.from_numpy(np.concatenate(position_rows)).to(self.positions.device)
            values = torch.from_numpy(np.concatenate(position_values)).to(self.positions.device, self.positions.dtype)
            self.positions[rows] = values
        return StepPlan(
            num_reqs, starts, trees, params, prefix_lens, self._tree_step_of(trees, starts), stock_sampler,
            decode_only=decode_only, tree_tokens=tree_tokens, logit_bias=logit_bias, min_p=min_p,
        )

    def _tree_step_of(self, trees: list[Verification | None], starts: np.ndarray) -> TreeStep | None:
        compaction = not self._entmtp.settings.debug_disable_compaction
        return build_tree_step(trees, starts, compaction, capture=compaction and self._entmtp_captures_kv)

    # ------------------------------------------------------------------ verification

    def _sample(self, logits, spec_decode_metadata):
        plan = self._entmtp_plan
        if plan is None or spec_decode_metadata is None:
            return super()._sample(logits, spec_decode_metadata)
        if plan.stock_sampler or all(tree is None for tree in plan.trees):
            return self._sample_untreed(plan, logits, spec_decode_metadata)
        return self._verify(plan, logits, spec_decode_metadata)

    def _sample_untreed(self, plan: StepPlan, logits: torch.Tensor, metadata) -> SamplerOutput:
        """No tree to verify: vLLM's sampler on each request's first logits row (its root)."""
        num_drafts = np.asarray(metadata.num_draft_tokens, dtype=np.int64)
        first = sampled_ends(num_drafts) - num_drafts - 1
        rows = logits if not num_drafts.any() else logits[torch.from_numpy(first)]
        p0, entropies = self._root_features(plan, rows)  # before vLLM's sampler scales `rows` in place
        output = super()._sample(rows, None)
        token_rows = plan.starts[1:] - num_drafts - 1
        plan.outcomes = [(int(token_rows[i]), p0[i], entropies[i], None) for i in range(plan.num_reqs)]
        if self._entmtp.observes_positions:
            plan.observed = [_accepted_rows(plan, i, int(token_rows[i]), [0]) for i in range(plan.num_reqs)]
        return output

    def _verify(self, plan: StepPlan, logits: torch.Tensor, metadata) -> SamplerOutput:
        drafter = self._entmtp
        assert drafter is not None
        started = time.perf_counter()
        mode = drafter.settings.acceptance
        typical = drafter.settings.typical
        batch = self.input_batch
        num_drafts = metadata.num_draft_tokens
        ends = sampled_ends(num_drafts).tolist()
        emitted_rows: list[list[int]] = []
        last_rows: list[int] = []  # logits row of each request's last accepted node
        token_rows: list[int] = []
        accept_lengths: list[int | None] = []
        paths: dict[int, list[int]] = {}  # requests whose accepted path skips a node
        observed: list[tuple[int, list[int]]] | None = [] if drafter.observes_positions else None
        req_ids = batch.req_ids
        verified = [0] * 6  # trees, drafted nodes, accepted tokens, moves, lookup drafted / accepted
        logits = apply_logit_biases(logits, {i: slice(ends[i] - num_drafts[i] - 1, ends[i])
                                             for i in range(plan.num_reqs) if plan.logit_bias[i]}, plan.logit_bias)
        # Host sync (GPU): for the greedy requests, one argmax over every row of the step and each
        # draft node's match with its parent row's argmax, on the device, read back in one piece;
        # each greedy request's walk is then Python over its tree's host lists.
        greedy_trees = [i for i in range(plan.num_reqs) if plan.params[i].greedy and plan.trees[i] is not None]
        targets, node_ok = None, {}
        if any(p.greedy for p in plan.params[: plan.num_reqs]):
            greedy = greedy_step(logits, [(ends[i] - num_drafts[i] - 1, plan.trees[i].buffers, plan.trees[i].token_ids)
                                          for i in greedy_trees])
            targets, node_ok = greedy.targets, dict(zip(greedy_trees, greedy.node_ok))
        # The sampled requests that draw a plain token or walk the draft-independent rule, verified
        # together: depth by depth, the rows their walks reach drawn from in one pass.
        roots, walks = {}, {}
        for i in range(plan.num_reqs):
            tree = plan.trees[i]
            if not plan.params[i].greedy and (tree is None or mode == "lossless"):
                roots[i] = ends[i] - num_drafts[i] - 1
                walks[i] = None if tree is None else TokenWalk(tree.buffers, tree.token_ids)
        settings = RowSettings.of_batch(batch, plan.num_reqs, plan.min_p) if roots else None
        sampled = self._entmtp_sampled.verify(logits, roots, walks, settings) if roots else {}  # host sync (GPU)
        for i in range(plan.num_reqs):
            hi = ends[i]
            lo = hi - num_drafts[i] - 1
            params = plan.params[i]
            tree = plan.trees[i]
            if tree is None:
                accepted = [0]
                emitted = [targets[lo] if params.greedy else sampled[i].bonus_token]
                accept_lengths.append(None)
            else:
                tokens = tree.token_ids
                buffers = tree.buffers
                if params.greedy:
                    result = accept_greedy_host(buffers, node_ok[i], targets[lo:hi])
                elif i in sampled:
                    result = sampled[i]
                else:  # host sync (GPU): typical acceptance reads this request's rows
                    result = accept(mode, buffers, tree.tokens, logits[lo:hi], params=params, typical=typical,
                                    generator=self.requests[req_ids[i]].generator)
                accepted = result.accepted
                emitted = result.emitted(tokens)
                accept_lengths.append(len(emitted))
                moved = 0 if tree.chain else sum(node != j for j, node in enumerate(accepted))  # a chain keeps its rows
                drafter.record_accepted(tree.token_probs, buffers.parent_list, accepted)
                lookup_nodes = buffers.lookup_nodes
                lookup_hits = 0
                if lookup_nodes:
                    lookup_hits = len(set(lookup_nodes).intersection(accepted))
                    drafter.record_lookup(req_ids[i], len(lookup_nodes), lookup_hits)
                verified[0] += 1
                verified[1] += buffers.num_nodes - 1
                verified[2] += len(accepted) - 1
                verified[3] += moved
                verified[4] += len(lookup_nodes)
                verified[5] += lookup_hits
                if moved:
                    paths[i] = accepted
            emitted_rows.append(emitted)
            last_rows.append(lo + accepted[-1])
            # The logits rows are the request's last num_drafts + 1 scheduled tokens (a prefill
            # chunk has one row: its last token).
            root_row = int(plan.starts[i + 1]) - num_drafts[i] - 1
            token_rows.append(root_row + accepted[-1])
            if observed is not None:
                observed.append(_accepted_rows(plan, i, root_row, accepted))

        if paths and plan.tree_step is not None and plan.tree_step.compaction:
            self._timed("verify", started)
            started = time.perf_counter()
            self._entmtp_compact(plan, paths)
            self._timed("compact", started)
            started = time.perf_counter()

        if verified[0]:
            drafter.record_verification(*verified)
        p0, entropies = self._root_features(plan, logits, last_rows)
        plan.outcomes = [
            (token_rows[i], p0[i], entropies[i], accept_lengths[i]) for i in range(plan.num_reqs)
        ]
        plan.observed = observed

        width = max(len(row) for row in emitted_rows)
        sampled = torch.tensor([row + [-1] * (width - len(row)) for row in emitted_rows], dtype=torch.int32)
        self._timed("verify", started)
        return SamplerOutput(sampled_token_ids=sampled, logprobs_tensors=None)

    def _root_features(self, plan: StepPlan, logits: torch.Tensor, rows: list[int] | None = None
                       ) -> tuple[list[float], list[float]]:
        """The verifier's top-1 probability p0 and entropy at each request's next root (`logits`'
        rows `rows`, or every row). Zeros, and no softmax over the vocabulary (nor a copy of the
        rows), when nothing will read them: nothing is drafted after this step (sampler fallback,
        batch fallback), or the policy thresholds neither."""
        drafter = self._entmtp
        count = logits.shape[0] if rows is None else len(rows)
        if (
            plan.stock_sampler
            or drafter.drafts_nothing(len(self.input_batch.req_ids))
            or not drafter.policy.reads_verifier
        ):
            return [0.0] * count, [0.0] * count
        probs = torch.softmax((logits if rows is None else logits[rows]).float(), dim=-1)
        features = torch.stack([probs.max(dim=-1).values, entropy_of(probs)]).cpu()  # host sync (GPU): once per step
        return features[0].tolist(), features[1].tolist()

    # ------------------------------------------------------------------ drafting

    def propose_draft_token_ids(
        self,
        scheduler_output,
        sampled_token_ids,
        sampling_metadata,
        hidden_states,
        sample_hidden_states,
        aux_hidden_states,
        spec_decode_metadata,
        common_attn_metadata,
        slot_mappings,
    ):
        drafter = self._entmtp
        plan = self._entmtp_plan
        if drafter is None:
            return super().propose_draft_token_ids(
                scheduler_output, sampled_token_ids, sampling_metadata, hidden_states,
                sample_hidden_states, aux_hidden_states, spec_decode_metadata,
                common_attn_metadata, slot_mappings,
            )
        self._entmtp_plan = None
        req_ids = self.input_batch.req_ids
        if plan is None or plan.outcomes is None or plan.stock_sampler:
            return [[] for _ in req_ids]
        requests: list[DraftRequest | None] = []
        want_context = drafter.lookup is not None
        # After sampling, vLLM's bookkeeping has appended this step's tokens: row i of
        # token_ids_cpu up to num_tokens_no_spec[i] is the request's context, ending with the root.
        token_ids = self.input_batch.token_ids_cpu
        lengths = self.input_batch.num_tokens_no_spec
        for i, req_id in enumerate(req_ids):
            sampled = sampled_token_ids[i] if i < len(sampled_token_ids) else None
            if not sampled or i >= plan.num_reqs:
                requests.append(None)
                continue
            sampling_params = self.requests[req_id].sampling_params
            if sampling_params is not None and sampling_params.structured_outputs is not None:
                # Grammars validate drafts as one sequence: such requests decode without drafts.
                requests.append(None)
                continue
            token_row, p0, entropy, accept_length = plan.outcomes[i]
            observed = None
            if plan.observed is not None:
                first, rows = plan.observed[i]
                observed = (first, hidden_states[rows])
            requests.append(
                DraftRequest(
                    req_id=req_id,
                    hidden=hidden_states[token_row],
                    root=int(sampled[-1]),
                    p0=p0,
                    entropy=entropy,
                    accept_length=accept_length,
                    context=token_ids[i, : int(lengths[i])] if want_context else None,
                    observed=observed,
                    remaining=remaining_tokens(self.requests[req_id], int(lengths[i]), self.max_model_len),
                )
            )
        started = time.perf_counter()
        proposals = drafter.propose_trees(requests, batch_size=len(req_ids))
        self._timed("draft", started)
        drafts = []
        for req_id, proposal in zip(req_ids, proposals):
            if proposal is not None:
                self._entmtp_pending[req_id] = proposal
            drafts.append(proposal.drafts if proposal is not None else [])
        return drafts

    # ------------------------------------------------------------------ introspection

    def entmtp_stats(self) -> dict | None:
        if self._entmtp is None:
            return None
        stats = self._entmtp.stats.as_dict()
        stats["live_requests"] = self._entmtp.num_live_requests
        stats["prefix_windows"] = self._entmtp.prefix_windows
        stats["step_cost"] = self._entmtp.cost_model.as_dict()
        stats["head_scale"] = self._entmtp.calibration.scale
        stats["lookup_rate"] = self._entmtp.lookup_rate.rate
        return stats
