"""Tensors that describe a tree, and a bank of trees to switch between.

`build_tree_buffers` is the only place where a tree's index tensors are
computed; every engine reads a `TreeBuffers` and never recomputes them. Node
order is the tree's (depth, path) order with the root `()` at index 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import LOOKUP, Tree, TreePath


@dataclass(frozen=True, eq=False)
class TreeBuffers:
    """Index tensors of one tree on one device (N nodes incl. the root, depth D, L leaves)."""

    nodes: tuple[TreePath, ...]
    """Paths of the nodes: the root `()` first, then (depth, path) order."""

    parents: torch.Tensor
    """long[N]: index of each node's parent; -1 for the root."""

    depths: torch.Tensor
    """long[N]: depth of each node (its position offset); 0 for the root."""

    ranks: torch.Tensor
    """long[N]: last rank of each node's path (which top-k candidate it is); 0 for the root,
    `LOOKUP` (-1) for a prompt-lookup node."""

    attention_mask: torch.Tensor
    """bool[N, N]: `mask[i, j]` is True when j is i or an ancestor of i (the root included)."""

    retrieve_indices: torch.Tensor
    """long[L, D+1]: one row per leaf, its root-to-leaf node indices (root first), padded
    with -1; rows in the node order of their leaf."""

    level_starts: tuple[int, ...]
    """D+2 ints: the nodes of depth d are `[level_starts[d], level_starts[d+1])`."""

    children: tuple[tuple[int, ...], ...]
    """Child node indices of each node, in rank order."""

    medusa_gather: torch.Tensor
    """long[N]: index into `[root_token, head1 top-k, head2 top-k, ...]`; 0 for the root,
    `1 + (d-1)*topk + r` for the node at depth d with rank r, -1 for a lookup node."""

    topk: int
    """Candidates taken from each head: the largest rank plus one (1 without head nodes)."""

    lookup_nodes: tuple[int, ...]
    """Node indices of the prompt-lookup chain, depth 1 first (empty for a heads-only tree)."""

    num_nodes: int
    """N, the root included."""

    depth: int
    """D, the depth of the deepest node."""

    head_depth: int
    """Depth of the deepest head-drafted node: how many heads drafting the tree needs (0 for a
    lookup-only tree)."""

    parent_list: tuple[int, ...]
    """`parents` on the host, for the per-request Python of a step (no tensor reads)."""

    retrieve_rows: tuple[tuple[int, ...], ...]
    """`retrieve_indices` on the host without the padding: each leaf's root-to-leaf nodes."""

    chain_nodes: int
    """How many draft nodes (node order) form a chain below the root: the tree's longest prefix
    in node order that does not branch (N - 1 for a chain)."""


def chain_nodes(parents: Sequence[int]) -> int:
    """How many draft nodes (node order) form a chain below the root, from `parents` (node
    order, parents[0] = -1)."""
    n = 0
    while n + 1 < len(parents) and parents[n + 1] == n:
        n += 1
    return n


def build_tree_buffers(tree: Tree, device: str | torch.device = "cpu") -> TreeBuffers:
    """Compute every index tensor of `tree` on `device`."""
    nodes: tuple[TreePath, ...] = ((),) + tree.paths
    index = {path: i for i, path in enumerate(nodes)}
    num_nodes, depth = len(nodes), tree.depth

    parents = [-1] + [index[path[:-1]] for path in nodes[1:]]
    depths = [len(path) for path in nodes]
    ranks = [0] + [path[-1] for path in nodes[1:]]
    topk = max(ranks) + 1  # the root's 0 keeps it >= 1
    lookup_nodes = tuple(i for i, path in enumerate(nodes) if path and path[-1] == LOOKUP)

    # Ancestry chains, root first: a node's chain is its parent's plus itself.
    chains: list[list[int]] = [[0]]
    children: list[list[int]] = [[] for _ in nodes]
    for i in range(1, num_nodes):
        chains.append(chains[parents[i]] + [i])
        children[parents[i]].append(i)

    mask = torch.zeros(num_nodes, num_nodes, dtype=torch.bool)
    rows = [i for i, chain in enumerate(chains) for _ in chain]
    cols = [j for chain in chains for j in chain]
    mask[rows, cols] = True

    leaves = [i for i in range(num_nodes) if not children[i]]
    retrieve = [chains[i] + [-1] * (depth + 1 - len(chains[i])) for i in leaves]

    level_starts = [0] * (depth + 2)
    for d in depths:
        level_starts[d + 1] += 1
    for d in range(depth + 1):
        level_starts[d + 1] += level_starts[d]

    gather = [0] + [-1 if path[-1] == LOOKUP else 1 + (len(path) - 1) * topk + path[-1] for path in nodes[1:]]

    def long(values: list[int] | list[list[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return TreeBuffers(
        nodes=nodes,
        parents=long(parents),
        depths=long(depths),
        ranks=long(ranks),
        attention_mask=mask.to(device),
        retrieve_indices=long(retrieve),
        level_starts=tuple(level_starts),
        children=tuple(tuple(c) for c in children),
        medusa_gather=long(gather),
        topk=topk,
        lookup_nodes=lookup_nodes,
        num_nodes=num_nodes,
        depth=depth,
        head_depth=tree.head_depth,
        parent_list=tuple(parents),
        retrieve_rows=tuple(tuple(chains[i]) for i in leaves),
        chain_nodes=chain_nodes(parents),
    )


class TopologyBank:
    """Named trees, switched by index; their buffers are built once per (tree, device).

    A hybrid tree (with a prompt-lookup chain of L nodes) also has the buffers of its
    variants with the chain cut to 0..L-1 nodes, used on steps where the lookup found fewer
    tokens: a switch stays a dict lookup.
    """

    def __init__(self, trees: Sequence[Tree], names: Sequence[str]) -> None:
        if len(trees) != len(names):
            raise EntMTPError(f"tree bank: {len(trees)} trees but {len(names)} names; give one name per tree")
        if not trees:
            raise EntMTPError("tree bank: no trees; a bank needs at least one tree")
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise EntMTPError(f"tree bank: tree name {name!r} is used twice; names must be unique")
            seen.add(name)
        self._trees = tuple(trees)
        self._lookup_lengths = tuple(tree.lookup_length for tree in self._trees)  # read per request, per step
        self._names = tuple(names)
        self._positions = {name: i for i, name in enumerate(self._names)}
        self._cache: dict[tuple[int, torch.device, int], TreeBuffers] = {}

    def __len__(self) -> int:
        return len(self._trees)

    @property
    def names(self) -> tuple[str, ...]:
        """Tree names, in bank order."""
        return self._names

    def index(self, name: str) -> int:
        """Bank index of the tree called `name`."""
        try:
            return self._positions[name]
        except KeyError:
            known = ", ".join(self._names)
            raise EntMTPError(f"tree bank: no tree named {name!r}; known trees: {known}") from None

    def tree(self, i: int) -> Tree:
        """The tree at bank index `i`."""
        return self._trees[i]

    def buffers(self, i: int, device: str | torch.device = "cpu", lookup_length: int | None = None) -> TreeBuffers:
        """Buffers of tree `i` on `device`: built on first use, a dict lookup afterwards.

        `lookup_length`: how many lookup tokens this step has; a hybrid tree's chain is cut to
        that many nodes (None or more than the chain: the whole tree)."""
        index = range(len(self._trees))[i]
        tree, chain = self._trees[index], self._lookup_lengths[index]
        length = chain if lookup_length is None else max(0, min(lookup_length, chain))
        key = (index, torch.device(device), length)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = build_tree_buffers(tree.with_lookup_length(length), key[1])
        return found

    @property
    def max_depth(self) -> int:
        """Depth of the deepest tree (the largest position offset)."""
        return max(tree.depth for tree in self._trees)

    @property
    def head_depth(self) -> int:
        """Heads the bank needs: the depth of its deepest head-drafted node (0 if none)."""
        return max(tree.head_depth for tree in self._trees)

    @property
    def lookup_length(self) -> int:
        """The longest prompt-lookup chain of the bank's trees (0: no hybrid tree)."""
        return max(self._lookup_lengths)

    @property
    def max_nodes(self) -> int:
        """Node count (root included) of the largest tree."""
        return max(tree.num_nodes for tree in self._trees)

    def __repr__(self) -> str:
        return f"TopologyBank({list(self._names)})"
