"""The reference decode loop: tree speculative decoding over a transformers causal LM.

One readable loop, gpt-fast style. Per request:

    prefill the prompt -> first token (the first root), last hidden state
    repeat until EOS or max_new_tokens:
        lookup    : (banks with hybrid trees) the prompt-lookup continuation of the context
        features  : p0 and entropy of the verifier at the last accepted node -> the path value
                    s = max(p0, p0·p1, …) (= p0: every p <= 1); lookup match stats; the heads'
                    top-1 chain as deep as the policy reads it (head_top1_1: head 1), or to the
                    bank's depth with head_features=True (step records for analysis)
        policy    : features -> bank index -> the tree's TreeBuffers (a hybrid tree's lookup
                    chain cut to the tokens the lookup found: no match, no branch)
        draft     : the heads (and the lookup) fill the tree; node 0 is the root (emitted,
                    not yet cached)
        verify    : ONE forward over all nodes, positions past_len + depths, a 4-D mask
                    (the whole prefix is visible, the tree part is buffers.attention_mask)
        accept    : greedy / typical / lossless -> accepted path (root first) + bonus token
        compact   : the KV cache keeps the prefix and the accepted nodes, in path order
        next      : bonus token = next root; hidden state / logits of the last accepted node
                    (Hydra++ heads: their prefix layer also observes every accepted position)

`method="ar"` runs the autoregressive baseline in the same engine: the same prefill,
then one token per forward pass, sampled by the same code.

Timing covers the whole call, prefill included (the paper's timed region). `decode` is the
same loop as a generator that pauses after the prefill and after every step, so that a
benchmark can run several methods on one prompt in lockstep, step by step; each generation
then counts only its own time (the time spent outside its pauses).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import torch
from transformers.cache_utils import DynamicCache

from entmtp_vllm.acceptance import ACCEPT_MODES, accept
from entmtp_vllm.config import SamplingParams, TypicalConfig
from entmtp_vllm.engine.kv_cache import cache_length, check_compactable, compact_to_path
from entmtp_vllm.engine.records import Generation, StepRecord
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.features import entropy
from entmtp_vllm.lookup import NO_MATCH, LookupConfig, PromptLookup
from entmtp_vllm.policies import Policy, make_policy
from entmtp_vllm.sampling import greedy_tokens, processed_probs, sample
from entmtp_vllm.scheduling import TreeScheduler
from entmtp_vllm.topology import TopologyBank, TreeBuffers

METHODS = ("tree", "ar")


def eos_token_ids(model, tokenizer) -> set[int]:
    """Every id that ends a generation: the tokenizer's EOS and the generation config's."""
    ids: set[int] = set()
    candidates = [getattr(tokenizer, "eos_token_id", None)]
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        candidates.append(generation_config.eos_token_id)
    for value in candidates:
        if value is None:
            continue
        ids.update([value] if isinstance(value, int) else list(value))
    return ids


def _num_heads(drafter) -> int | None:
    """How deep the drafter can draft (its number of heads), when it says so."""
    for owner, attr in ((drafter, "max_depth"), (drafter, "num_heads"), (getattr(drafter, "heads", None), "num_heads")):
        value = getattr(owner, attr, None)
        if isinstance(value, int):
            return value
    return None


class ReferenceEngine:
    """Tree speculative decoding (and the AR baseline) over a transformers causal LM.

    `drafter` is a `TreeDrafter` (or None for AR only); `bank` the trees to choose from;
    `policy` picks one per step (default: static on the bank's first tree). All checks that
    do not depend on the prompt happen here, before any decoding.

    `head_features`: also run the heads' top-1 chain to the bank's depth every step and log
    its probabilities (`head_top1_d` in the step records, for regime analysis). The path value
    does not change (max(p0, p0·p1, …) = p0), and a step whose tree is shallower than the bank's
    deepest pays head calls it does not use, so it is off by default; a policy that thresholds a
    head feature (`head_top1_1`) gets the chain it reads (`Policy.heads_read`) either way.
    """

    def __init__(
        self,
        model,
        tokenizer,
        drafter=None,
        bank: TopologyBank | None = None,
        policy: Policy | None = None,
        typical: TypicalConfig = TypicalConfig(),
        lookup: LookupConfig = LookupConfig(),
        head_features: bool = False,
    ) -> None:
        self.model = model.eval()
        self.head_features = head_features
        self.tokenizer = tokenizer
        self.drafter = drafter
        self.bank = bank
        self.typical = typical
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.lookup = PromptLookup(lookup) if bank is not None and bank.lookup_length > 0 else None
        self.lookup_alpha = lookup.ema_alpha

        if (drafter is None) != (bank is None):
            raise EntMTPError("tree decoding needs both heads (a drafter) and trees (a bank); pass both or neither")
        if bank is not None:
            heads = _num_heads(drafter)
            if heads is not None and bank.head_depth > heads:
                deepest = max(range(len(bank)), key=lambda i: bank.tree(i).head_depth)
                raise EntMTPError(
                    f"tree '{bank.names[deepest]}' has depth {bank.tree(deepest).head_depth} but the heads draft only "
                    f"{heads} tokens deep; use a tree of depth <= {heads} or heads with more heads"
                )
            self.policy = policy if policy is not None else make_policy({"kind": "static", "tree": 0}, bank)
            self.scheduler = TreeScheduler(self.policy, self.lookup is not None, self.lookup_alpha)
        else:
            if policy is not None:
                raise EntMTPError("a tree policy was given without a bank of trees")
            self.policy = None
            self.scheduler = None

    # ------------------------------------------------------------------ checks

    def check_request(self, prompt_ids: Sequence[int], max_new_tokens: int, method: str, acceptance: str) -> None:
        """Raise EntMTPError for a request that cannot run, before any forward pass."""
        if method not in METHODS:
            raise EntMTPError(f"unknown method {method!r}; use one of: {', '.join(METHODS)}")
        if method == "tree" and self.drafter is None:
            raise EntMTPError("method 'tree' needs heads and trees; this engine was built for AR decoding only")
        if acceptance not in ACCEPT_MODES:
            raise EntMTPError(f"unknown acceptance mode {acceptance!r}; use one of: {', '.join(ACCEPT_MODES)}")
        if len(prompt_ids) == 0:
            raise EntMTPError("the prompt is empty; give at least one token")
        if max_new_tokens < 1:
            raise EntMTPError(f"max_new_tokens must be at least 1 (got {max_new_tokens})")
        if self.max_positions is not None and len(prompt_ids) + max_new_tokens > self.max_positions:
            raise EntMTPError(
                f"the prompt has {len(prompt_ids)} tokens and {max_new_tokens} new tokens were asked for, but the "
                f"model's context is {self.max_positions} tokens; shorten the prompt or lower max_new_tokens to "
                f"{max(self.max_positions - len(prompt_ids), 0)}"
            )

    # ------------------------------------------------------------------ model calls

    def _forward(
        self,
        input_ids: torch.Tensor,
        cache: DynamicCache,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass that appends to `cache`: (logits [n, V], hidden [n, H]).

        `hidden` is the last hidden state after the final norm: in transformers 5.x the last
        element of `hidden_states` is tied to `last_hidden_state` (tests check it).
        `last_only` computes logits for the last position only (prefill); hidden keeps all.
        """
        out = self.model(
            input_ids=input_ids[None],
            position_ids=None if position_ids is None else position_ids[None],
            attention_mask=attention_mask,
            past_key_values=cache,
            use_cache=True,
            output_hidden_states=True,
            logits_to_keep=1 if last_only else 0,
        )
        return out.logits[0], out.hidden_states[-1][0]

    def _tree_mask(self, buffers: TreeBuffers, past_len: int) -> torch.Tensor:
        """Additive 4-D mask [1, 1, N, past_len + N]: every node sees the whole prefix, and
        inside the tree itself and its ancestors (buffers.attention_mask)."""
        n = buffers.num_nodes
        mask = torch.zeros(1, 1, n, past_len + n, dtype=self.dtype, device=self.device)
        blocked = ~buffers.attention_mask.to(self.device)
        mask[0, 0, :, past_len:].masked_fill_(blocked, torch.finfo(self.dtype).min)
        return mask

    def _pick(self, logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None) -> int:
        """The next token from one row of logits: argmax when greedy, else a sample."""
        if sampling.greedy:
            return int(greedy_tokens(logits))
        return sample(processed_probs(logits, sampling), generator)

    # ------------------------------------------------------------------ decoding

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, **options) -> Generation:
        """Generate up to `max_new_tokens` tokens after `prompt_ids` (token ids, already templated).

        `options` are `decode`'s: `sampling`, `acceptance`, `method` ("tree", the default when
        the engine has heads, or "ar"), `seed` or an explicit `generator` (which make sampling
        at temperature > 0 reproducible).
        """
        *_, generation = self.decode(prompt_ids, max_new_tokens, **options)
        return generation

    @torch.inference_mode()
    def decode(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        sampling: SamplingParams = SamplingParams(),
        acceptance: str = "typical",
        method: str | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ) -> Iterator[Generation | None]:
        """`generate` step by step: yields None after the prefill and after every decode step,
        and the `Generation` last. Its times count only the time spent inside this generator,
        so generations advanced in turns (`bench offline --interleave step`) each get their own.
        The request is checked on the first `next()`.
        """
        method = method or ("tree" if self.drafter is not None else "ar")
        prompt_ids = [int(t) for t in prompt_ids]
        self.check_request(prompt_ids, max_new_tokens, method, acceptance)
        if generator is None and seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(seed)

        started = time.perf_counter()
        paused = 0.0  # time spent outside this generator (other generations' turns)
        # --- prefill: the prompt into the cache; its last position gives the first token.
        cache = DynamicCache(config=self.model.config)
        check_compactable(cache)
        prompt = torch.tensor(prompt_ids, dtype=torch.long, device=self.device)
        logits, hidden = self._forward(prompt, cache, last_only=True)
        last_logits, last_hidden = logits[-1], hidden[-1]
        observe = method == "tree" and getattr(getattr(self.drafter, "heads", None), "prefix", None) is not None
        if observe:  # Hydra++: the heads' prefix layer reads the prompt (as trained), then every accepted position
            self.drafter.reset()
            self.drafter.observe_prompt(hidden)
        root = self._pick(last_logits, sampling, generator)
        generated = [root]
        prefill_time = time.perf_counter() - started
        pause = time.perf_counter()
        yield None
        paused += time.perf_counter() - pause

        steps: list[StepRecord] = []
        schedule = self.scheduler.new_request() if self.scheduler is not None else None
        stop_reason = "eos" if root in self.eos_ids else "length"

        while len(generated) < max_new_tokens and stop_reason != "eos":
            step_started = time.perf_counter()
            past_len = cache_length(cache)  # = prompt + generated - 1: the root is not cached yet

            if method == "ar":
                # --- AR: feed the root, read the next token.
                logits, hidden = self._forward(torch.tensor([root], device=self.device), cache)
                token = self._pick(logits[-1], sampling, generator)
                emitted, accepted, features = [token], [0], None
                tree_index = tree_name = None
                nodes = 1
            else:
                # --- features at the last accepted node, then the policy's choice.
                probs = torch.softmax(last_logits.float(), dim=-1)
                p0 = float(probs.max())
                step_entropy = float(entropy(probs))
                draft_step = self.drafter.begin(last_hidden, root)
                chain = self.bank.head_depth if self.head_features else self.policy.heads_read
                head_top1 = draft_step.greedy_chain(chain) if chain else []  # cached for the draft
                match = NO_MATCH
                if self.lookup is not None:  # the context ends with the root
                    match = self.lookup.propose(prompt_ids + generated, self.bank.lookup_length)
                step_features = self.scheduler.features(schedule, p0, head_top1, step_entropy, match)
                tree_index = self.scheduler.choose(schedule, step_features)
                tree_name = self.bank.names[tree_index]
                buffers = self.bank.buffers(tree_index, self.device, lookup_length=len(match.tokens))
                nodes = buffers.num_nodes

                # --- draft the tree (tokens[0] is the root).
                draft = draft_step.draft(buffers, match.tokens)
                tokens = draft.tokens.to(self.device)

                # --- verify every node in one forward pass.
                logits, hidden = self._forward(
                    tokens,
                    cache,
                    position_ids=past_len + buffers.depths.to(self.device),
                    attention_mask=self._tree_mask(buffers, past_len),
                )

                # --- accept a path, then keep only its K/V. The heads pick their candidates
                # deterministically (top-k), so lossless acceptance treats every draft as a
                # point mass (draft_probs=None); passing the heads' softmax would bias it.
                result = accept(
                    acceptance,
                    buffers,
                    tokens,
                    logits,
                    params=sampling,
                    typical=self.typical,
                    generator=generator,
                    draft_probs=None,
                )
                accepted = result.accepted
                compact_to_path(cache, past_len, accepted)
                emitted = result.emitted(tokens)
                if observe:
                    self.drafter.observe(hidden[accepted], past_len + torch.arange(len(accepted)))
                lookup_nodes = set(buffers.lookup_nodes)
                self.scheduler.observe(schedule, len(emitted), len(lookup_nodes), len(lookup_nodes & set(accepted)))
                features = step_features.as_row()

            # --- the last accepted node feeds the next step; the last emitted token is its root.
            last_logits, last_hidden = logits[accepted[-1]], hidden[accepted[-1]]
            root = emitted[-1]
            steps.append(
                StepRecord(
                    step=len(steps),
                    method=method,
                    tree_index=tree_index,
                    tree_name=tree_name,
                    nodes=nodes,
                    accept_length=len(emitted),
                    accepted=list(accepted),
                    features=features,
                    time_s=time.perf_counter() - step_started,
                )
            )
            # --- stop at EOS (emitted, then stop) or at max_new_tokens (exactly).
            for token in emitted:
                generated.append(token)
                if token in self.eos_ids:
                    stop_reason = "eos"
                    break
                if len(generated) >= max_new_tokens:
                    break
            pause = time.perf_counter()
            yield None
            paused += time.perf_counter() - pause

        total_time = time.perf_counter() - started - paused
        generated = generated[:max_new_tokens]
        yield Generation(
            token_ids=generated,
            text=self.tokenizer.decode(generated, skip_special_tokens=True) if self.tokenizer is not None else "",
            method=method,
            prompt_tokens=len(prompt_ids),
            steps=steps,
            prefill_time_s=prefill_time,
            total_time_s=total_time,
            stop_reason=stop_reason,
            tree_switches=schedule.policy.switches if schedule is not None else 0,
        )
