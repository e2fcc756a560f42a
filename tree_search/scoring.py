"""Scoring a tree and its one-node augmentations in ONE rollout (the paper's what-if probe).

`scorer.score(tree, candidates)` walks every calibration trajectory with `tree` (T): each step's
accept length under T moves the walk on. At each step it also reads, for every candidate
node nu (a frontier child of T), the accept length T u {nu} would have had *at that step*
(one-step "what-if": the trajectory is still advanced with T). All of it comes from the joint
tree T u F: a subtree's accept length is 1 + the depth of the deepest node of the subtree
whose whole path is accepted. T u {nu} beats T exactly at the steps where nu itself is
accepted (nu's parent is in T and nu is not, so T's accepted path ends at nu's parent then).

Two scorers give the same numbers (a test checks it, and that both equal a separate
verification of every T u {nu}):

- `RankScorer` (default): the oracle rank paths of `trajectories.py`; pure Python per step,
  no model call. A node is accepted iff its path is a prefix of the step's oracle rank path.
- `ForwardScorer`: the literal definition, with the same conventions as the reference
  engine: the heads draft the joint tree (`TreeDrafter`), ONE target forward verifies it
  (tree mask, positions `past_len + depths`, a `DynamicCache` prefix), a node is accepted when
  its token equals the verifier's argmax at its parent and its parent is accepted. One
  target forward per step: slow on a CPU, meant for checks and small runs.

Hybrid trees (prompt-lookup nodes, rank `LOOKUP`): the rank scorer also reads, per root
position, how many leading tokens of the lookup drafter's proposal (context = prompt + the
trajectory up to the root, exactly what the engines give it) equal the trajectory
(`lookup_hits`). A lookup node at depth j is accepted iff j <= that count; a head node under a
lookup node is accepted iff the head ranks the true token at its depth with its rank (its path
is then the true prefix, so the oracle ranks apply). Several branches can be accepted at once
(a copy and a head may agree); the accept length is 1 + the deepest accepted node.

Greedy acceptance (temperature 0) only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.lookup import LookupConfig, LookupMatch, PromptLookup
from entmtp_vllm.topology import build_tree_buffers
from entmtp_vllm.tree import LOOKUP, Tree, head_depth, lookup_length

from tree_search.trajectories import Calibration, verify_tree_at, walk

Path_ = tuple[int, ...]
SCORERS = ("rank", "forward")


@dataclass
class StepScore:
    """One decode step of the rollout with T, and the what-if accept lengths of its candidates."""

    prompt: int
    """Index of the trajectory (calibration prompt)."""
    position: int
    """Root index i: the root token is `trajectory.tokens[i]`."""
    accept: int
    """Tokens T emits at this step (accepted drafts + the bonus)."""
    what_if: dict[Path_, int]
    """Tokens T u {nu} would have emitted at this step, per candidate nu."""


@dataclass
class RolloutScore:
    """The result of one rollout: T's mean accept length and every candidate's what-if gain."""

    steps: int
    accepted: int
    """Sum over steps of T's accept lengths."""
    gains: dict[Path_, int]
    """Per candidate: how many steps T u {nu} would have emitted one more token."""
    per_step: list[StepScore] | None = field(default=None, repr=False)

    @property
    def tau(self) -> float:
        """T's mean accept length (tokens per step)."""
        return self.accepted / self.steps if self.steps else 0.0

    def what_if_tau(self, candidate: Path_) -> float:
        """Mean accept length of T u {candidate} on T's trajectory."""
        return (self.accepted + self.gains[candidate]) / self.steps if self.steps else 0.0


def _check(tree: frozenset[Path_], candidates: Sequence[Path_]) -> None:
    for path in candidates:
        if path in tree:
            raise ValueError(f"candidate {list(path)} is already in the tree")
        if len(path) > 1 and path[:-1] not in tree:
            raise ValueError(f"candidate {list(path)} has no parent in the tree")


def lookup_proposals(prompt_ids: Sequence[int], tokens: Sequence[int], lookup: PromptLookup,
                     length: int) -> list[LookupMatch]:
    """The lookup drafter's proposal (up to `length` tokens) at each root position i of a
    trajectory: context prompt + tokens[:i+1], as the engines give it."""
    context = list(prompt_ids) + list(tokens)
    start = len(prompt_ids)
    return [lookup.propose(context[: start + i + 1], length) for i in range(len(tokens))]


def correct_copies(proposals: Sequence[LookupMatch], tokens: Sequence[int]) -> list[int]:
    """Per root position i: how many leading tokens of its proposal equal tokens[i+1:]."""
    hits = []
    for i, match in enumerate(proposals):
        n = 0
        while n < len(match.tokens) and i + 1 + n < len(tokens) and match.tokens[n] == tokens[i + 1 + n]:
            n += 1
        hits.append(n)
    return hits


def lookup_hits(prompt_ids: Sequence[int], tokens: Sequence[int], lookup: PromptLookup, length: int) -> list[int]:
    """Per root position i (root `tokens[i]`): how many leading tokens of the lookup drafter's
    proposal (up to `length`, context prompt + tokens[:i+1]) equal tokens[i+1:]."""
    return correct_copies(lookup_proposals(prompt_ids, tokens, lookup, length), tokens)


def accepted_branches(tree: frozenset, row: Sequence[int], hits: int = 0,
                      wanted: frozenset | set = frozenset()) -> tuple[int, list[Path_]]:
    """(depth of the deepest accepted node of `tree`, the accepted candidates of `wanted`) at a
    position with oracle rank path `row` and `hits` correct lookup tokens (greedy).

    Walks the lookup chain while its tokens are right and, from the root and from each accepted
    lookup node, follows the rank path through the head nodes; a candidate (a node of `wanted`
    whose parent is an accepted node of `tree`) is accepted when its token is right."""
    best = 0
    found: list[Path_] = []
    base: Path_ = ()
    while True:
        path = base
        for depth in range(len(base), len(row)):
            rank = row[depth]
            if rank < 0:
                break
            child = path + (rank,)
            if not _enters(child, tree, wanted, found):
                break
            path = child
        best = max(best, len(path))
        if len(base) >= hits:  # the next copied token is wrong (or absent)
            break
        child = base + (LOOKUP,)
        if not _enters(child, tree, wanted, found):
            break
        base = child
    return best, found


def _enters(child: Path_, tree: frozenset, wanted: frozenset | set, found: list[Path_]) -> bool:
    """Whether the walk goes on into `child` (a node of `tree`); where it stops at a wanted
    candidate, the candidate is accepted (`found`)."""
    if child in tree:
        return True
    if child in wanted:
        found.append(child)
    return False


class RankScorer:
    """What-if scoring from the oracle rank paths (no model call); lookup nodes from the lookup
    drafter's proposals on the trajectory (`lookup_hits`, computed once per trajectory)."""

    name = "rank"

    def __init__(self, calibration: Calibration, lookup: LookupConfig | None = None) -> None:
        self.calibration = calibration
        self.lookup = PromptLookup(lookup or LookupConfig())
        self._hits: list[list[int]] | None = None
        self._hits_length = 0

    def hits(self, length: int) -> list[list[int]]:
        """Per trajectory and root position, the correct lookup tokens of a chain of `length`."""
        if self._hits is None or self._hits_length < length:
            self._hits = [lookup_hits(t.prompt_ids, t.tokens, self.lookup, length) for t in self.calibration.trajectories]
            self._hits_length = length
        return [[min(h, length) for h in row] for row in self._hits] if self._hits_length != length else self._hits

    def score(self, tree: Iterable[Path_], candidates: Sequence[Path_] = (), detail: bool = False) -> RolloutScore:
        tree = frozenset(tuple(p) for p in tree)
        candidates = [tuple(p) for p in candidates]
        _check(tree, candidates)
        wanted = frozenset(candidates)
        deepest = head_depth(tree | wanted)
        if deepest > self.calibration.rank_depth:
            raise EntMTPError(
                f"a tree of depth {deepest} needs {deepest} heads but the calibration ranked only {self.calibration.rank_depth}"
            )
        chain = lookup_length(tree | wanted)
        all_hits = self.hits(chain) if chain else None
        cal = self.calibration
        gains = dict.fromkeys(candidates, 0)
        steps = accepted = 0
        per_step: list[StepScore] | None = [] if detail else None
        for k, trajectory in enumerate(cal.trajectories):
            ranks = trajectory.ranks
            hits = all_hits[k] if all_hits is not None else None
            found: list[list[Path_]] = [[]]

            def accept_at(i: int) -> int:
                best, found[0] = accepted_branches(tree, ranks[i], hits[i] if hits is not None else 0, wanted)
                return best + 1

            for i, a in walk(trajectory, cal.max_tokens, cal.eos_ids, accept_at):
                steps += 1
                accepted += a
                better = {c for c in found[0] if len(c) + 1 > a}  # T u {c} emits one more token
                for c in better:
                    gains[c] += 1
                if per_step is not None:
                    per_step.append(StepScore(k, i, a, {c: a + (c in better) for c in candidates}))
        return RolloutScore(steps, accepted, gains, per_step)

    def evaluate(self, tree: Tree) -> RolloutScore:
        """A fixed tree's own (teacher-forced) rollout."""
        return self.score(tree.paths)


class ForwardScorer:
    """What-if scoring by drafting and verifying the joint tree T u F at every step.

    The trajectory's KV cache comes from one forward over prompt + continuation; each step's
    verification appends the joint tree to it with a mask that hides the entries at and after
    the root (`verify_tree_at`) and cuts them off again.
    """

    name = "forward"

    def __init__(self, model, drafter, calibration: Calibration) -> None:
        self.model, self.drafter, self.calibration = model, drafter, calibration

    @torch.inference_mode()
    def score(self, tree: Iterable[Path_], candidates: Sequence[Path_] = (), detail: bool = False) -> RolloutScore:
        from transformers.cache_utils import DynamicCache

        tree = frozenset(tuple(p) for p in tree)
        candidates = [tuple(p) for p in candidates]
        _check(tree, candidates)
        if lookup_length(tree | set(candidates)):
            raise EntMTPError("the forward scorer does not score prompt-lookup nodes; use the rank scorer")
        joint = Tree.from_choices(sorted(tree | set(candidates)))
        device = next(self.model.parameters()).device
        buffers = build_tree_buffers(joint, device)
        index = {path: i for i, path in enumerate(buffers.nodes)}
        parents = buffers.parents.tolist()
        depths = buffers.depths.tolist()
        in_tree = [i == 0 or buffers.nodes[i] in tree for i in range(buffers.num_nodes)]
        prefix_heads = getattr(self.drafter.heads, "prefix", None) is not None
        cal = self.calibration

        gains = dict.fromkeys(candidates, 0)
        steps = accepted = 0
        per_step: list[StepScore] | None = [] if detail else None
        for k, trajectory in enumerate(cal.trajectories):
            num_prompt = len(trajectory.prompt_ids)
            seq = torch.tensor(trajectory.prompt_ids + trajectory.tokens, dtype=torch.long, device=device)
            cache = DynamicCache(config=self.model.config)
            out = self.model(input_ids=seq[None], past_key_values=cache, use_cache=True,
                             output_hidden_states=True, logits_to_keep=1)
            hidden = out.hidden_states[-1][0]
            cache_len = len(seq)
            what_if: list[dict[Path_, int]] = [{}]

            def accept_at(i: int) -> int:
                t = num_prompt + i
                if prefix_heads:  # Hydra++: the prefix layer has seen every position before the root
                    self.drafter.reset()
                    self.drafter.observe(hidden[:t], torch.arange(t))
                draft = self.drafter.begin(hidden[t - 1], int(seq[t])).draft(buffers)
                tokens = draft.tokens.to(device)
                logits, _ = verify_tree_at(self.model, cache, cache_len, t, tokens, buffers)
                target = logits.argmax(dim=-1)
                ok = (tokens == target[buffers.parents.clamp(min=0)]).tolist()
                good = [True] * buffers.num_nodes
                for node in range(1, buffers.num_nodes):
                    good[node] = bool(ok[node]) and good[parents[node]]
                m = max(depths[node] for node in range(buffers.num_nodes) if good[node] and in_tree[node])
                what_if[0] = {c: 1 + max(m, depths[index[c]] if good[index[c]] else 0) for c in candidates}
                return m + 1

            for i, a in walk(trajectory, cal.max_tokens, cal.eos_ids, accept_at):
                steps += 1
                accepted += a
                for c, value in what_if[0].items():
                    gains[c] += value - a
                if per_step is not None:
                    per_step.append(StepScore(k, i, a, dict(what_if[0])))
        return RolloutScore(steps, accepted, gains, per_step)

    def evaluate(self, tree: Tree) -> RolloutScore:
        return self.score(tree.paths)


def make_scorer(name: str, calibration: Calibration, model=None, drafter=None, lookup: LookupConfig | None = None):
    """`rank` (default, no model needed) or `forward` (literal joint-tree verification)."""
    if name == "rank":
        return RankScorer(calibration, lookup)
    if name == "forward":
        if model is None or drafter is None:
            raise ValueError("the forward scorer needs the model and the drafter")
        return ForwardScorer(model, drafter, calibration)
    raise EntMTPError(f"unknown scorer {name!r}; use one of: {', '.join(SCORERS)}")
