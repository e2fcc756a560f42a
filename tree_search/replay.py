"""Trajectory replay: a scheduler policy walked over the greedy calibration trajectories.

At temperature 0 every policy walks the same greedy trajectory (tree decoding is lossless), and
everything a policy reads at a step is a function of the position (`position_features`) or of the
accept lengths so far (the scheduler's own feature tracking). So the real `Policy` chooses a tree
from real `StepFeatures`, the tree's accept length at that position comes from the oracle rank
path (as in the frontier's `RankScorer`), and the walk moves on: exactly the engine's greedy run
at the frontier's dtype (tests check it against `ReferenceEngine` records, hybrid trees included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from entmtp_vllm.acceptance import longest_path
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.lookup import LookupConfig, LookupMatch, PromptLookup
from entmtp_vllm.policies import make_policy
from entmtp_vllm.scheduling import TreeScheduler
from entmtp_vllm.tree import LOOKUP, Tree

from tree_search.position_features import PositionFeatures
from tree_search.scoring import accepted_branches, correct_copies, lookup_proposals
from tree_search.trajectories import Calibration, Trajectory, walk


def accept_length(tree: frozenset, ranks: Sequence[int]) -> int:
    """Tokens a (heads-only) tree emits at a position whose oracle rank path is `ranks` (greedy)."""
    return accepted_branches(tree, ranks)[0] + 1


class HybridReplay:
    """Prompt lookup in the replay of a bank with hybrid trees, as the engines run it: each step
    the lookup drafter proposes from the context (prompt + trajectory up to the root), the policy
    reads the lookup features (the scheduler's `LookupStats`), the chosen tree's chain is cut to the tokens found,
    and the accepted path is the engine's (`accept_greedy`'s rows and tie-break) with node
    acceptance from the oracle ranks (head nodes) and the correct copies (lookup nodes)."""

    def __init__(self, bank, calibration: Calibration, config: LookupConfig | None = None) -> None:
        self.bank, self.calibration = bank, calibration
        self.config = config or LookupConfig()
        self.lookup = PromptLookup(self.config)
        self.length = bank.lookup_length
        self._matches: list[list[LookupMatch]] = [
            lookup_proposals(t.prompt_ids, t.tokens, self.lookup, self.length) for t in calibration.trajectories
        ]
        self._hits = [correct_copies(m, t.tokens) for m, t in zip(self._matches, calibration.trajectories)]

    def start(self, k: int) -> "_HybridWalk":
        return _HybridWalk(self, k)


class _HybridWalk:
    """One trajectory's lookup proposals and accepted paths during a replay (the lookup
    statistics live in the scheduler's request state)."""

    def __init__(self, owner: HybridReplay, k: int) -> None:
        self.owner, self.k = owner, k

    def match(self, i: int) -> LookupMatch:
        return self.owner._matches[self.k][i]

    def accept(self, index: int, i: int) -> tuple[int, int, int]:
        """(accept length, lookup tokens drafted, lookup tokens accepted) of tree `index` at `i`."""
        owner = self.owner
        found = len(owner._matches[self.k][i].tokens)
        buffers = owner.bank.buffers(index, "cpu", lookup_length=found)
        ranks, hits = owner.calibration.trajectories[self.k].ranks[i], owner._hits[self.k][i]
        node_ok = torch.zeros(buffers.num_nodes, dtype=torch.bool)
        for node, path in enumerate(buffers.nodes[1:], start=1):
            depth, rank = len(path), path[-1]
            node_ok[node] = hits >= depth if rank == LOOKUP else (depth <= len(ranks) and ranks[depth - 1] == rank)
        accepted = longest_path(buffers, node_ok)
        lookup = set(buffers.lookup_nodes)
        return len(accepted), len(lookup), len(lookup & set(accepted))


@dataclass
class ReplayResult:
    """One policy replayed over the calibration trajectories."""

    steps: int
    accepted: int
    tokens: int
    prompt_tokens: int
    tree_steps: dict[str, int]
    switches: int
    per_step: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def tau(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


def output_tokens(trajectory: Trajectory, max_tokens: int, eos_ids: frozenset[int]) -> int:
    """Tokens the engine returns for this prompt (greedy output = the trajectory, cut at
    max_tokens or just after the first EOS)."""
    for k, token in enumerate(trajectory.tokens[:max_tokens]):
        if token in eos_ids:
            return k + 1
    return min(len(trajectory.tokens), max_tokens)


def replay(policy_config: dict[str, Any], trees: Sequence[tuple[str, Tree]], calibration: Calibration,
           features: Sequence[PositionFeatures], detail: bool = False) -> ReplayResult:
    """Walk every trajectory with `policy_config` over the bank `trees` (greedy)."""
    from entmtp_vllm.topology import TopologyBank

    bank = TopologyBank([t for _, t in trees], [n for n, _ in trees])
    policy = make_policy(policy_config, bank)
    tree_sets = [frozenset(t.paths) for _, t in trees]
    depth = bank.head_depth
    hybrid = HybridReplay(bank, calibration) if bank.lookup_length else None
    if depth > calibration.rank_depth:
        raise EntMTPError(f"the bank drafts {depth} deep but the calibration ranked {calibration.rank_depth} heads")
    names = [n for n, _ in trees]
    counts = [0] * len(trees)
    steps = accepted = tokens = prompt_tokens = switches = 0
    per_step: list[dict[str, Any]] | None = [] if detail else None
    scheduler = TreeScheduler(policy, hybrid is not None, hybrid.config.ema_alpha if hybrid else LookupConfig().ema_alpha)
    for k, (trajectory, feats) in enumerate(zip(calibration.trajectories, features)):
        schedule = scheduler.new_request()
        lookup = hybrid.start(k) if hybrid is not None else None

        def accept_at(i: int) -> int:
            match = lookup.match(i) if lookup is not None else None
            f = scheduler.features(schedule, feats.p0[i], feats.chain[i][:depth], feats.entropy[i], match)
            index = scheduler.choose(schedule, f)
            if lookup is not None:
                a, proposed, copied = lookup.accept(index, i)
            else:
                a, proposed, copied = accept_length(tree_sets[index], trajectory.ranks[i]), 0, 0
            scheduler.observe(schedule, a, proposed, copied)
            counts[index] += 1
            if per_step is not None:
                per_step.append({"prompt": k, "position": i, "tree": names[index], "accept_length": a,
                                 "features": f.as_row()})
            return a

        for _, a in walk(trajectory, calibration.max_tokens, calibration.eos_ids, accept_at):
            steps += 1
            accepted += a
        switches += schedule.policy.switches
        tokens += output_tokens(trajectory, calibration.max_tokens, calibration.eos_ids)
        prompt_tokens += len(trajectory.prompt_ids)
    return ReplayResult(steps, accepted, tokens, prompt_tokens, dict(zip(names, counts)), switches, per_step)
