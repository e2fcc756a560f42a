"""A test double of the drafter that knows the answer: it proves compaction is exercised.

`OracleEntMTP` is the real `EntMTPProposer` (policy, side channel, verification, compaction
all unchanged) whose heads are replaced by a bigram table of the reference outputs: each node
drafts the most frequent successor of its parent's token, with ranks 0 and 1 swapped at random
nodes, so that accepted paths often go through a second sibling and the KV cache must be
compacted. Set `TABLE` before building the engine (in-process engines only).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import torch

from entmtp_vllm.heads.drafting import Draft
from entmtp_vllm.vllm_plugin.proposer import EntMTPProposer

TABLE: dict[int, list[int]] = {}
FILLER = [0, 1, 2, 3, 4, 5, 6, 7]


def bigram_table(sequences: list[list[int]]) -> dict[int, list[int]]:
    counts: dict[int, Counter] = defaultdict(Counter)
    for sequence in sequences:
        for a, b in zip(sequence, sequence[1:]):
            counts[a][b] += 1
    return {a: [b for b, _ in c.most_common()] for a, c in counts.items()}


class _Step:
    def __init__(self, root: int, rng: random.Random) -> None:
        self.root, self.rng = root, rng

    def greedy_chain(self, depth: int) -> list[float]:
        return [0.5] * depth

    def draft(self, buffers, lookup_tokens=None, want_probs: bool = False) -> Draft:
        tokens = [self.root]
        for node in range(1, buffers.num_nodes):
            parent, rank = int(buffers.parents[node]), int(buffers.ranks[node])
            candidates = TABLE.get(tokens[parent], []) + FILLER
            if rank < 2 and self.rng.random() < 0.3:
                rank = 1 - rank
            tokens.append(candidates[rank])
        return Draft(torch.tensor(tokens), None, (1.0,) * len(tokens))


class _OracleDrafter:
    def __init__(self) -> None:
        self.rng = random.Random(0)

    def begin(self, hidden: torch.Tensor, root: int) -> _Step:
        return _Step(int(root), self.rng)

    def greedy_chains(self, steps, depth: int) -> list[list[float]]:
        return [step.greedy_chain(depth) for step in steps]

    def draft_trees(self, steps, trees, lookups, want_probs: bool = False, limit=None) -> list[_Draft]:
        # Whole trees whatever the step budget's limit (a limit only saves head calls, and these
        # drafts call none); the budget then keeps of them what it plans.
        return [step.draft(tree, lookup, want_probs) for step, tree, lookup in zip(steps, trees, lookups)]


class OracleEntMTP(EntMTPProposer):
    def load_model(self, target_model) -> None:
        assert self.runner_attached
        self.drafter = _OracleDrafter()
