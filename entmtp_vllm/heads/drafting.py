"""The one drafting routine every engine uses: heads → a token for every tree node.

    drafter = TreeDrafter(heads, embed_weight, lm_head_weight)
    drafter.observe(hidden_states, positions)   # prefix-layer heads only: accepted positions
    step = drafter.begin(hidden, root_token)    # hidden: base last hidden state (post norm)
    head_top1 = step.greedy_chain(depth)        # the scheduler's per-depth confidences
    draft = step.draft(buffers, lookup_tokens)  # Draft(tokens long[N], draft_probs | None, token_probs)

    steps = [drafter.begin(h, r) for h, r in ...]   # a batch of sequences (the vLLM step)
    greedy_chains(steps, depth)                     # one head call per depth for all of them
    draft_trees(steps, buffers_list, lookup_lists)  # one head call per tree level for all of them

`draft` expands the tree level by level over `buffers.level_starts`. For every
node of depth d-1 that has children, head d runs once on that node's path (all
such parents of a level in one batched call); its top-k (k = the largest child
rank + 1) gives each child the token at the child's rank. Head outputs are
cached inside the step, keyed by path (Hydra) or by depth (Medusa, whose heads
ignore the path), so the chain probed by `greedy_chain` is not recomputed. One sequence's
`greedy_chain` / `draft` is the batch routine (`greedy_chains` / `draft_trees`) on a batch of
one: the batch runs head d once for the level-d parents of every sequence, each row on its own
sequence's hidden state, so a batched draft equals drafting one sequence at a time.

Hybrid trees: the lookup nodes (rank `LOOKUP`) take their tokens from `lookup_tokens`
(the prompt-lookup proposal, depth 1 first; `buffers` must already be cut to its length,
see `TopologyBank.buffers(..., lookup_length=)`); head nodes below them see those tokens
on their path like any other.

`draft_vocab` (optional, long[K]): the heads rank only these token ids (the LM-head rows
are sliced once); drafts are mapped back to full-vocabulary ids. See `draft_vocab.py`.

`draft_probs` (only with `want_probs=True`; [N, V] is large) holds, in row i,
the head distribution node i's token was taken from (the softmax of head d at
node i's parent); row 0 (the root) is zero. Lossless acceptance needs it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads.blocks import PrefixCache
from entmtp_vllm.heads.hydra import DraftHeads
from entmtp_vllm.tree import LOOKUP

Path_ = tuple[int, ...]


@dataclass(frozen=True)
class Draft:
    """Draft tokens of one tree, node order of its `TreeBuffers`."""

    tokens: torch.Tensor
    """long[N]; tokens[0] is the root token."""
    draft_probs: torch.Tensor | None = None
    """float[N, V]: row i = the head distribution node i was drawn from; row 0 unused (zeros)."""
    token_probs: tuple[float, ...] = ()
    """Per node: the probability its head gave the node's token (1.0 for the root,
    `LOOKUP_PROB` for a prompt-lookup node, whose token no head chose); what the step budget
    turns into each node's chance of acceptance."""
    token_ids: tuple[int, ...] = ()
    """`tokens` as Python ints (`draft_trees` fills it; empty: read `tokens`)."""


LOOKUP_PROB = -1.0
"""`Draft.token_probs` of a prompt-lookup node (its token was copied, not ranked by a head)."""


class TreeDrafter:
    """Drafts token trees from `heads` for one sequence at a time (batch 1)."""

    def __init__(
        self,
        heads: DraftHeads,
        embed_weight: torch.Tensor,
        lm_head_weight: torch.Tensor | None = None,
        draft_vocab: torch.Tensor | None = None,
    ) -> None:
        self.heads = heads.eval()
        param = next(heads.parameters())
        self.dtype, self.device = param.dtype, param.device
        self.embed_weight = embed_weight
        self.lm_head_weight = lm_head_weight
        if lm_head_weight is None and not heads.own_lm_head:
            raise EntMTPError("these heads share the base model's LM head: pass lm_head_weight to TreeDrafter")
        for name, weight in (("embedding", embed_weight), ("LM head", lm_head_weight)):
            if weight is not None and tuple(weight.shape) != (heads.vocab_size, heads.hidden_size):
                raise EntMTPError(
                    f"the base model's {name} is {tuple(weight.shape)} but the heads expect "
                    f"({heads.vocab_size}, {heads.hidden_size}): use heads trained for this model"
                )
        self.prefix_cache = PrefixCache() if heads.prefix is not None else None
        self.lm_head_linear: Callable[[torch.Tensor], torch.Tensor] | None = None
        """The shared LM head's projection (`lm_head_weight`, cut to the draft vocabulary) as a
        layer of its own, e.g. the packed CPU matrix multiply (`cpu_gemm.hf_model.use_packed_drafter`);
        None: a plain matrix multiply by `lm_head_weight`."""
        self.draft_vocab = None
        if draft_vocab is not None:
            if lm_head_weight is None or heads.own_lm_head:
                raise EntMTPError("a draft vocabulary needs heads that share the base model's LM head")
            self.draft_vocab = draft_vocab.to(lm_head_weight.device, torch.long)
            self.lm_head_weight = lm_head_weight[self.draft_vocab].contiguous()

    @property
    def max_depth(self) -> int:
        return self.heads.num_heads

    def head_logits(self, depth: int, hidden: torch.Tensor, path_token_embeddings: torch.Tensor) -> torch.Tensor:
        """Head `depth`'s logits (over the draft vocabulary when there is one) for rows of
        base hidden states and their paths' token embeddings."""
        if self.lm_head_linear is None:
            return self.heads.head_logits(depth, hidden, path_token_embeddings, self.lm_head_weight)
        return self.lm_head_linear(self.heads.head_hidden(depth, hidden, path_token_embeddings))

    def top_children(self, probs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids, probabilities) of the k most likely tokens of each row of `probs` (a head's
        distribution, over the draft vocabulary when there is one), in rank order (k = 1, a chain's
        parents: `max`, 25% faster than `topk` on a 16 x 4096 step on CPU)."""
        values, indices = probs.max(dim=-1, keepdim=True) if k == 1 else probs.topk(k, dim=-1)
        if self.draft_vocab is not None:
            indices = self.draft_vocab[indices]
        return indices, values

    def fork(self) -> "TreeDrafter":
        """A drafter on the same heads and weights with its own per-sequence state (the prefix
        layer's cache), so that two engines can decode side by side."""
        twin = copy.copy(self)
        twin.prefix_cache = PrefixCache() if self.prefix_cache is not None else None
        return twin

    def reset(self) -> None:
        """Forget the prefix layer's cache (a new sequence)."""
        if self.prefix_cache is not None:
            self.prefix_cache = PrefixCache()

    @torch.no_grad()
    def observe(self, hidden_states: torch.Tensor, positions: torch.Tensor | list[int]) -> None:
        """Feed the prefix layer the base hidden states of newly accepted positions
        ([T, H] or [1, T, H]; positions [T], increasing). Positions at or before ones
        already seen replace them (the cache is cut back first). No-op without a prefix layer."""
        if self.prefix_cache is None:
            return
        hidden = hidden_states.reshape(-1, hidden_states.shape[-1]).to(self.device, self.dtype)
        positions = torch.as_tensor(positions, device=self.device).reshape(-1).long()
        if positions.numel() != hidden.shape[0]:
            raise ValueError("observe: one position per hidden state")
        if positions.numel() == 0:
            return
        first = int(positions[0])
        keep = sum(1 for p in self.prefix_cache.positions if p < first)
        self.prefix_cache.truncate(keep)
        self.heads.prefix(hidden, positions, cache=self.prefix_cache)

    def observe_prompt(self, hidden_states: torch.Tensor) -> None:
        """After the prefill: feed the prefix layer the prompt's base hidden states ([T, H]),
        all of them or only the last one, as its heads were trained (`PrefixLayerConfig.context`)."""
        if self.prefix_cache is None:
            return
        hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
        first = 0 if self.heads.prefix.config.context == "sequence" else hidden.shape[0] - 1
        self.observe(hidden[first:], torch.arange(first, hidden.shape[0]))

    def greedy_chains(self, steps: list["DraftStep"], depth: int) -> list[list[float]]:
        """`greedy_chains` over steps begun on this drafter."""
        return greedy_chains(steps, depth)

    def draft_trees(self, steps: list["DraftStep"], trees: list, lookups: list, want_probs: bool = False,
                    limit: "Limit | None" = None) -> list[Draft]:
        """`draft_trees` over steps begun on this drafter."""
        return draft_trees(steps, trees, lookups, want_probs, limit)

    def begin(self, hidden: torch.Tensor, root_token: int | torch.Tensor) -> "DraftStep":
        """Start a drafting step from the base model's last hidden state and the root token.
        (No grad-mode decorator: a vLLM step begins one per request, and without a prefix layer
        nothing here computes.)"""
        hidden = hidden.detach().reshape(-1)[-self.heads.hidden_size :].to(self.device, self.dtype)
        if self.prefix_cache is not None:
            if self.prefix_cache.last_output is None:
                # nothing observed yet: treat `hidden` as the first position
                with torch.no_grad():
                    self.heads.prefix(hidden[None], torch.zeros(1, dtype=torch.long, device=self.device),
                                      cache=self.prefix_cache)
            hidden = self.prefix_cache.last_output.to(self.dtype)
        return DraftStep(self, hidden, int(root_token))


class DraftStep:
    """One drafting step of one sequence: head outputs cached per path (or per depth for Medusa)."""

    def __init__(self, drafter: TreeDrafter, hidden: torch.Tensor, root_token: int) -> None:
        self.drafter = drafter
        self.hidden = hidden
        self.root_token = root_token
        self._rows: dict = {}  # key -> (HeadCall, row): the head call that computed the key's output
        self._topk: dict = {}  # key -> (token ids, probabilities) of the top-k, rank order
        self._tokens: dict[Path_, int] = {(): root_token}

    def _key(self, path: Path_):
        return path if self.drafter.heads.uses_path else len(path)

    def _path_tokens(self, path: Path_) -> list[int]:
        return [self._tokens[path[:i]] for i in range(len(path) + 1)]

    def _todo(self, paths: list[Path_]) -> list[Path_]:
        """The `paths` whose head output is not cached yet (one per cache key)."""
        todo, seen = [], set()
        for p in paths:
            key = self._key(p)
            if key not in self._rows and key not in seen:
                todo.append(p)
                seen.add(key)
        return todo

    def _compute(self, paths: list[Path_]) -> None:
        """Run head len(path)+1 once for all `paths` (same length) not cached yet."""
        compute_heads(self.drafter, [(self, paths)])

    def _children(self, path: Path_, k: int) -> tuple[list[int], list[float]]:
        """Token ids and head probabilities of the top-k children of `path`, rank order."""
        key = self._key(path)
        cached = self._topk.get(key)
        if cached is None or len(cached[0]) < k:
            indices, values = self.drafter.top_children(self._probs(key), k)
            cached = self._topk[key] = (indices.tolist(), values.tolist())
        return cached[0][:k], cached[1][:k]

    def _children_tokens(self, path: Path_, k: int) -> list[int]:
        return self._children(path, k)[0]

    def logits(self, path: Path_) -> torch.Tensor:
        """Head len(path)+1's logits at the node `path` (computed if needed); over the draft
        vocabulary when the drafter has one."""
        self._ensure(path)
        self._compute([path])
        call, row = self._rows[self._key(path)]
        return call.logits[row]

    def _probs(self, key) -> torch.Tensor:
        """The softmax of the head output cached under `key` ([V])."""
        call, row = self._rows[key]
        return call.probs[row]

    def _ensure(self, path: Path_) -> None:
        """Make sure the tokens of every node on `path` are known."""
        for i in range(1, len(path) + 1):
            if path[:i] not in self._tokens:
                parent = path[: i - 1]
                self._compute([parent])
                self._tokens[path[:i]] = self._children_tokens(parent, path[i - 1] + 1)[path[i - 1]]

    @torch.no_grad()
    def greedy_chain(self, depth: int) -> list[float]:
        """Top-1 probabilities of heads 1..depth along the rank-0 path."""
        return greedy_chains([self], depth)[0]

    @torch.no_grad()
    def draft(self, buffers, lookup_tokens: list[int] | None = None, want_probs: bool = False) -> Draft:
        """A token for every node of the tree described by `buffers` (a `TreeBuffers`);
        lookup nodes take `lookup_tokens[depth - 1]`."""
        return draft_trees([self], [buffers], [lookup_tokens], want_probs)[0]

    def _draft_probs(self, buffers, num_nodes: int) -> torch.Tensor:
        """float[num_nodes, V]: row i = the head distribution node i's token was taken from (the
        tree's first `num_nodes` nodes)."""
        nodes, parents = buffers.nodes, buffers.parent_list
        probs = torch.zeros(num_nodes, self.drafter.heads.vocab_size, device=buffers.parents.device)
        cache: dict = {}
        for i in range(1, num_nodes):
            if nodes[i][-1] == LOOKUP:  # a copied token: no head distribution (row stays 0)
                continue
            key = self._key(nodes[parents[i]])
            if key not in cache:
                row = self._probs(key).to(probs.device)
                if self.drafter.draft_vocab is not None:  # zero outside the draft vocabulary
                    row = torch.zeros(probs.shape[1], device=probs.device).index_copy_(
                        0, self.drafter.draft_vocab.to(probs.device), row
                    )
                cache[key] = row
            probs[i] = cache[key]
        return probs


class HeadCall:
    """One batched head call's outputs: float32 logits [P, V] (one row per path) and their softmax,
    taken once, on first use; each `DraftStep` keeps (call, row) per path instead of row views."""

    __slots__ = ("logits", "_probs")

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        self._probs: torch.Tensor | None = None

    @property
    def probs(self) -> torch.Tensor:
        if self._probs is None:
            self._probs = torch.softmax(self.logits, dim=-1)
        return self._probs


def compute_heads(drafter: TreeDrafter, work: list[tuple[DraftStep, list[Path_]]], top_k: int = 0) -> None:
    """One head call for every (step, paths) pair: all paths have the same length d, so head
    d + 1 runs once over the uncached paths of every step (each row on its step's hidden
    state), and each step caches where its rows are (the call's logits, their softmax taken once
    when first read) and, with `top_k`, the top-k children (one softmax and one top-k over all
    rows instead of one per row; the same values, every row is reduced on its own)."""
    rows = [(step, path) for step, paths in work for path in step._todo(paths)]
    if not rows:
        return
    depth = len(rows[0][1]) + 1
    tokens = torch.tensor([step._path_tokens(path) for step, path in rows], device=drafter.embed_weight.device)
    emb = drafter.embed_weight[tokens].to(drafter.device, drafter.dtype)  # [P, depth, H]
    hiddens = [step.hidden for step, _ in rows]
    hidden = hiddens[0].expand(len(rows), -1) if all(h is hiddens[0] for h in hiddens) else torch.stack(hiddens)
    call = HeadCall(drafter.head_logits(depth, hidden, emb).float())
    for r, (step, path) in enumerate(rows):
        step._rows[step._key(path)] = (call, r)
    if top_k > 0:
        indices, values = drafter.top_children(call.probs, min(top_k, call.probs.shape[-1]))
        for (step, path), top in zip(rows, zip(indices.tolist(), values.tolist())):
            step._topk[step._key(path)] = top


@torch.no_grad()
def greedy_chains(steps: list[DraftStep], depth: int) -> list[list[float]]:
    """For each step, the top-1 probabilities of heads 1..depth along its rank-0 path; one
    head call per depth for all steps."""
    if not steps:
        return []
    drafter = steps[0].drafter
    if depth > drafter.max_depth:
        raise EntMTPError(f"a chain of depth {depth} needs {depth} heads but there are {drafter.max_depth}")
    chains: list[list[float]] = [[] for _ in steps]
    path: Path_ = ()
    for _ in range(depth):
        compute_heads(drafter, [(step, [path]) for step in steps], top_k=1)
        for step, chain in zip(steps, chains):
            (token,), (prob,) = step._children(path, 1)
            chain.append(prob)
            step._tokens.setdefault(path + (0,), token)
        path = path + (0,)
    return chains


Limit = Callable[[int, list[list[float | None]]], list[int]]
"""`draft_trees`' `limit`: called before head level d >= 2 with each tree's node probabilities
so far (`Draft.token_probs`; None for a head node not drafted yet), it returns how many nodes of
each tree (a prefix in node order) to draft at most."""


@torch.no_grad()
def draft_trees(
    steps: list[DraftStep],
    trees: list,
    lookups: list[list[int] | None],
    want_probs: bool = False,
    limit: Limit | None = None,
) -> list[Draft]:
    """Draft `trees[i]` (a `TreeBuffers`) from `steps[i]`, level by level over all steps at
    once: at depth d, head d runs once for the parents of every step's level-d head nodes.
    With `limit`, a tree is drafted only up to the nodes `limit` allows before each deeper level
    (a level no tree needs calls no head), and its `Draft` is that prefix of the tree."""
    if not steps:
        return []
    drafter = steps[0].drafter
    plans = []
    for buffers, lookup_tokens in zip(trees, lookups):
        needed = buffers.head_depth
        if needed > drafter.max_depth:
            raise EntMTPError(
                f"the tree is {needed} deep but the heads draft only {drafter.max_depth} tokens: "
                f"use a tree of depth <= {drafter.max_depth} or heads with more heads"
            )
        lookup_tokens = list(lookup_tokens or [])
        if len(buffers.lookup_nodes) > len(lookup_tokens):
            raise EntMTPError(
                f"the tree has {len(buffers.lookup_nodes)} lookup nodes but the lookup proposed "
                f"{len(lookup_tokens)} tokens: cut the tree to the proposal (TopologyBank.buffers lookup_length)"
            )
        plans.append((buffers, buffers.parent_list, lookup_tokens))
    tokens = [[step.root_token] * buffers.num_nodes for step, (buffers, _, _) in zip(steps, plans)]
    probs: list[list[float | None]] = [[1.0] + [None] * (buffers.num_nodes - 1) for buffers, _, _ in plans]
    caps = [buffers.num_nodes for buffers, _, _ in plans]
    # Copied tokens first (the lookup chain hangs off the root, node j + 1 at depth j + 1), so
    # that a lookup-only tree needs nothing below and head nodes below the chain see its tokens.
    for step, (buffers, _, lookup_tokens), row, row_probs in zip(steps, plans, tokens, probs):
        for j, i in enumerate(buffers.lookup_nodes):
            row[i], row_probs[i] = int(lookup_tokens[j]), LOOKUP_PROB
            step._tokens[buffers.nodes[i]] = row[i]
    for d in range(1, max(buffers.head_depth for buffers, _, _ in plans) + 1):
        if d > 1 and limit is not None:
            caps = [min(cap, max(1, n)) for cap, n in zip(caps, limit(d, probs))]
        levels = []
        top_k = 0  # the most children any parent of this level needs
        for (buffers, parents, _), cap in zip(plans, caps):
            if d > buffers.head_depth:
                levels.append((range(0), []))
                continue
            level = range(buffers.level_starts[d], min(buffers.level_starts[d + 1], cap))
            nodes = buffers.nodes
            parent_paths = list(dict.fromkeys(nodes[parents[i]] for i in level if nodes[i][-1] != LOOKUP))
            levels.append((level, parent_paths))
            top_k = max([top_k] + [nodes[i][-1] + 1 for i in level if nodes[i][-1] != LOOKUP])
        # every parent of this level's head nodes, in every step, in one batched head call
        compute_heads(drafter, [(step, paths) for step, (_, paths) in zip(steps, levels) if paths], top_k)
        for s, (step, (buffers, parents, _), (level, _)) in enumerate(zip(steps, plans, levels)):
            nodes = buffers.nodes
            for i in level:
                if nodes[i][-1] == LOOKUP:  # copied above
                    continue
                pp = nodes[parents[i]]
                k = max(nodes[c][-1] for c in buffers.children[parents[i]]) + 1
                ids, values = step._children(pp, k)
                token, prob = ids[nodes[i][-1]], values[nodes[i][-1]]
                step._tokens[nodes[i]] = token
                tokens[s][i] = token
                probs[s][i] = prob
    return [
        Draft(
            torch.tensor(row[:cap], dtype=torch.long, device=buffers.parents.device),
            step._draft_probs(buffers, cap) if want_probs else None,
            tuple(p[:cap]),
            tuple(row[:cap]),
        )
        for step, (buffers, _, _), row, p, cap in zip(steps, plans, tokens, probs, caps)
    ]
