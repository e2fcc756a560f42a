"""The one drafting routine every engine uses: heads → a token for every tree node.

    drafter = TreeDrafter(heads, embed_weight, lm_head_weight)
    drafter.observe(hidden_states, positions)   # prefix-layer heads only: accepted positions
    step = drafter.begin(hidden, root_token)    # hidden: base last hidden state (post norm)
    head_top1 = step.greedy_chain(depth)        # the scheduler's per-depth confidences
    draft = step.draft(buffers, lookup_tokens)  # Draft(tokens long[N], draft_probs | None)

`draft` expands the tree level by level over `buffers.level_starts`. For every
node of depth d-1 that has children, head d runs once on that node's path (all
such parents of a level in one batched call); its top-k (k = the largest child
rank + 1) gives each child the token at the child's rank. Head outputs are
cached inside the step, keyed by path (Hydra) or by depth (Medusa, whose heads
ignore the path), so the chain probed by `greedy_chain` is not recomputed.

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

import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads.blocks import PrefixCache
from entmtp_vllm.heads.hydra import DraftHeads
from entmtp_vllm.tree import LOOKUP, head_depth

Path_ = tuple[int, ...]


@dataclass(frozen=True)
class Draft:
    """Draft tokens of one tree, node order of its `TreeBuffers`."""

    tokens: torch.Tensor
    """long[N]; tokens[0] is the root token."""
    draft_probs: torch.Tensor | None = None
    """float[N, V]: row i = the head distribution node i was drawn from; row 0 unused (zeros)."""


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
        self.draft_vocab = None
        if draft_vocab is not None:
            if lm_head_weight is None or heads.own_lm_head:
                raise EntMTPError("a draft vocabulary needs heads that share the base model's LM head")
            self.draft_vocab = draft_vocab.to(lm_head_weight.device, torch.long)
            self.lm_head_weight = lm_head_weight[self.draft_vocab].contiguous()

    @property
    def max_depth(self) -> int:
        return self.heads.num_heads

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

    @torch.no_grad()
    def begin(self, hidden: torch.Tensor, root_token: int | torch.Tensor) -> "DraftStep":
        """Start a drafting step from the base model's last hidden state and the root token."""
        hidden = hidden.reshape(-1)[-self.heads.hidden_size :].to(self.device, self.dtype)
        if self.prefix_cache is not None:
            if self.prefix_cache.last_output is None:
                # nothing observed yet: treat `hidden` as the first position
                self.heads.prefix(hidden[None], torch.zeros(1, dtype=torch.long, device=self.device), cache=self.prefix_cache)
            hidden = self.prefix_cache.last_output.to(self.dtype)
        return DraftStep(self, hidden, int(root_token))


class DraftStep:
    """One drafting step: head outputs cached per path (or per depth for Medusa)."""

    def __init__(self, drafter: TreeDrafter, hidden: torch.Tensor, root_token: int) -> None:
        self.drafter = drafter
        self.hidden = hidden
        self.root_token = root_token
        self._logits: dict = {}  # key -> float32 logits [V]
        self._topk: dict = {}  # key -> token ids of the top-k, rank order
        self._tokens: dict[Path_, int] = {(): root_token}

    def _key(self, path: Path_):
        return path if self.drafter.heads.uses_path else len(path)

    def _path_tokens(self, path: Path_) -> list[int]:
        return [self._tokens[path[:i]] for i in range(len(path) + 1)]

    def _compute(self, paths: list[Path_]) -> None:
        """Run head len(path)+1 once for all `paths` (same length) not cached yet."""
        todo, seen = [], set()
        for p in paths:
            key = self._key(p)
            if key not in self._logits and key not in seen:
                todo.append(p)
                seen.add(key)
        if not todo:
            return
        drafter, depth = self.drafter, len(todo[0]) + 1
        tokens = torch.tensor([self._path_tokens(p) for p in todo], device=drafter.embed_weight.device)
        emb = drafter.embed_weight[tokens].to(drafter.device, drafter.dtype)  # [P, depth, H]
        hidden = self.hidden.expand(len(todo), -1)
        logits = drafter.heads.head_logits(depth, hidden, emb, drafter.lm_head_weight).float()
        for p, row in zip(todo, logits):
            self._logits[self._key(p)] = row

    def _children_tokens(self, path: Path_, k: int) -> list[int]:
        key = self._key(path)
        cached = self._topk.get(key)
        if cached is None or len(cached) < k:
            indices = self._logits[key].topk(k).indices
            if self.drafter.draft_vocab is not None:
                indices = self.drafter.draft_vocab[indices]
            cached = indices.tolist()
            self._topk[key] = cached
        return cached[:k]

    def logits(self, path: Path_) -> torch.Tensor:
        """Head len(path)+1's logits at the node `path` (computed if needed); over the draft
        vocabulary when the drafter has one."""
        self._ensure(path)
        self._compute([path])
        return self._logits[self._key(path)]

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
        if depth > self.drafter.max_depth:
            raise EntMTPError(f"a chain of depth {depth} needs {depth} heads but there are {self.drafter.max_depth}")
        probs = []
        path: Path_ = ()
        for _ in range(depth):
            self._compute([path])
            probs.append(float(torch.softmax(self._logits[self._key(path)], dim=-1).max()))
            self._tokens.setdefault(path + (0,), self._children_tokens(path, 1)[0])
            path = path + (0,)
        return probs

    @torch.no_grad()
    def draft(self, buffers, lookup_tokens: list[int] | None = None, want_probs: bool = False) -> Draft:
        """A token for every node of the tree described by `buffers` (a `TreeBuffers`);
        lookup nodes take `lookup_tokens[depth - 1]`."""
        nodes = buffers.nodes
        needed = head_depth(nodes[1:])
        if needed > self.drafter.max_depth:
            raise EntMTPError(
                f"the tree is {needed} deep but the heads draft only {self.drafter.max_depth} tokens: "
                f"use a tree of depth <= {self.drafter.max_depth} or heads with more heads"
            )
        lookup_tokens = list(lookup_tokens or [])
        if len(buffers.lookup_nodes) > len(lookup_tokens):
            raise EntMTPError(
                f"the tree has {len(buffers.lookup_nodes)} lookup nodes but the lookup proposed "
                f"{len(lookup_tokens)} tokens: cut the tree to the proposal (TopologyBank.buffers lookup_length)"
            )
        parents = buffers.parents.tolist()
        tokens = [self.root_token] * buffers.num_nodes
        for d in range(1, buffers.depth + 1):
            level = range(buffers.level_starts[d], buffers.level_starts[d + 1])
            # every parent of this level's head nodes in one batched head call
            parent_paths = list(dict.fromkeys(nodes[parents[i]] for i in level if nodes[i][-1] != LOOKUP))
            if parent_paths:
                self._compute(parent_paths)
            for i in level:
                if nodes[i][-1] == LOOKUP:
                    token = int(lookup_tokens[d - 1])
                else:
                    pp = nodes[parents[i]]
                    k = max(nodes[c][-1] for c in buffers.children[parents[i]]) + 1
                    token = self._children_tokens(pp, k)[nodes[i][-1]]
                self._tokens[nodes[i]] = token
                tokens[i] = token
        out = torch.tensor(tokens, dtype=torch.long, device=buffers.parents.device)
        probs = None
        if want_probs:
            probs = torch.zeros(buffers.num_nodes, self.drafter.heads.vocab_size, device=buffers.parents.device)
            cache: dict = {}
            for i in range(1, buffers.num_nodes):
                if nodes[i][-1] == LOOKUP:  # a copied token: no head distribution (row stays 0)
                    continue
                key = self._key(nodes[parents[i]])
                if key not in cache:
                    row = torch.softmax(self._logits[key], dim=-1).to(probs.device)
                    if self.drafter.draft_vocab is not None:  # zero outside the draft vocabulary
                        row = torch.zeros(probs.shape[1], device=probs.device).index_copy_(
                            0, self.drafter.draft_vocab.to(probs.device), row
                        )
                    cache[key] = row
                probs[i] = cache[key]
        return Draft(out, probs)
