"""Draft trees as sets of paths.

A tree is the shape of the candidates that the heads draft in one step. A path
`(i0, i1, ...)` is the node reached by taking the i0-th ranked token of head 1,
then the i1-th ranked token of head 2, and so on (Medusa's "choices"). The root
`()` is the token sampled from the base model; it is implicit and never listed.

Hybrid trees: the rank `LOOKUP` (-1) marks a node whose token comes from prompt lookup
(an n-gram copy of the context, `entmtp_vllm.lookup`) instead of a head. Lookup ranks
form a chain under the root: `(-1,)`, `(-1, -1)`, ... is the lookup continuation, and
in a path they can only come first, so `(-1, -1, 0)` is head 3's top-1 token after two
lookup tokens. A node with a head rank at depth d needs head d; lookup nodes need none.

`Tree` only holds and validates the paths. Every tensor derived from a tree is
built by `entmtp_vllm.topology.build_tree_buffers`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from itertools import product

from entmtp_vllm.errors import EntMTPError

TreePath = tuple[int, ...]

# Generated trees are meant for decoding; beyond this size the N x N attention
# mask alone stops being reasonable, so a larger spec is surely a typo.
MAX_SPEC_NODES = 4096

LOOKUP = -1
"""The rank of a prompt-lookup node (its token comes from the lookup drafter, not a head)."""


def head_depth(paths: Iterable[tuple[int, ...]]) -> int:
    """Depth of the deepest head-drafted node among `paths`: how many heads they need (0 if none)."""
    return max((len(path) for path in paths if path and path[-1] != LOOKUP), default=0)


def lookup_length(paths: Iterable[tuple[int, ...]]) -> int:
    """Length of the prompt-lookup chain among `paths` (0 without lookup nodes)."""
    return sum(1 for path in paths if path and path[-1] == LOOKUP)

SPEC_FORMS = (
    "chain:K (a chain of K nodes), full:B^D (B-ary, depth D), "
    "full:b1,b2,... (b_d children per node at depth d), lookup:L (a chain of L prompt-lookup "
    "nodes); join shapes with '+' for their union, e.g. lookup:4+full:2,1"
)
_LOOKUP_SPEC = re.compile(r"lookup:(\d+)")

_CHAIN = re.compile(r"chain:(\d+)")
_FULL_POWER = re.compile(r"full:(\d+)\^(\d+)")
_FULL_LIST = re.compile(r"full:(\d+(?:,\d+)*)")


def _show(path: Sequence[object]) -> str:
    """A path as the user wrote it, list style: `[0, 2]`."""
    return "[" + ", ".join(repr(rank) for rank in path) + "]"


def _order(path: TreePath) -> tuple[int, TreePath]:
    return (len(path), path)


def _check_path(raw: object, max_depth: int | None) -> TreePath:
    """One path, checked on its own (types, ranks, depth)."""
    if not isinstance(raw, (list, tuple)):
        raise EntMTPError(f"invalid tree: path {raw!r} is not a list of ranks")
    if not raw:
        raise EntMTPError("invalid tree: path [] given explicitly; the root is implicit, list only the nodes below it")
    for position, rank in enumerate(raw):
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise EntMTPError(f"invalid tree: path {_show(raw)} has a rank {rank!r} that is not an integer")
        if rank == LOOKUP and position > 0 and raw[position - 1] != LOOKUP:
            raise EntMTPError(
                f"invalid tree: path {_show(raw)} has a lookup rank ({LOOKUP}) after a head rank; "
                "lookup nodes form a chain under the root, so their ranks can only start a path"
            )
        if rank < LOOKUP:
            raise EntMTPError(
                f"invalid tree: path {_show(raw)} has a negative rank {rank} (only {LOOKUP}, a lookup node, is allowed)"
            )
    if max_depth is not None and raw[-1] != LOOKUP and len(raw) > max_depth:
        raise EntMTPError(
            f"invalid tree: path {_show(raw)} has depth {len(raw)} but only {max_depth} heads are available "
            f"(max_depth={max_depth}); drop the deeper paths or use a model with more heads"
        )
    return tuple(raw)


def _validate(choices: object, max_depth: int | None, allow_empty: bool = False) -> tuple[TreePath, ...]:
    """Check a list of paths and return them as tuples sorted by (depth, path)."""
    if isinstance(choices, (str, bytes)) or not isinstance(choices, Iterable):
        raise EntMTPError(f"invalid tree: expected a list of paths, got {type(choices).__name__}")
    paths: list[TreePath] = []
    seen: set[TreePath] = set()
    for raw in choices:
        path = _check_path(raw, max_depth)
        if path in seen:
            raise EntMTPError(f"invalid tree: path {_show(path)} is listed twice")
        seen.add(path)
        paths.append(path)
    if not paths and not allow_empty:
        raise EntMTPError("invalid tree: no paths given; a tree needs at least one node below the implicit root")
    for path in paths:
        if len(path) > 1 and path[:-1] not in seen:
            raise EntMTPError(f"invalid tree: path {_show(path)} has no parent path {_show(path[:-1])}")
    return tuple(sorted(paths, key=_order))


class Tree:
    """An immutable, validated set of non-root paths, sorted by (depth, path)."""

    __slots__ = ("_paths",)

    def __init__(self, choices: Iterable[Sequence[int]], max_depth: int | None = None) -> None:
        self._paths = _validate(choices, max_depth)

    @classmethod
    def _unchecked(cls, paths: Iterable[TreePath]) -> Tree:
        """A tree from paths already known to be valid; may be root-only (no paths)."""
        tree = cls.__new__(cls)
        tree._paths = tuple(sorted(paths, key=_order))
        return tree

    @classmethod
    def from_choices(cls, choices: Iterable[Sequence[int]], max_depth: int | None = None) -> Tree:
        """Validate Medusa-style choices (a list of paths); `max_depth` is the number of heads available."""
        return cls(choices, max_depth)

    @classmethod
    def from_spec(cls, spec: str) -> Tree:
        """A generated shape: `chain:K`, `full:B^D`, `full:b1,b2,...`, `lookup:L`, or a union
        of shapes joined by '+' (e.g. `lookup:4+full:2,1`: a lookup chain beside a head tree)."""
        paths: set[TreePath] = set()
        for part in spec.split("+"):
            if match := _LOOKUP_SPEC.fullmatch(part):
                length = int(match.group(1))
                if length < 1:
                    raise EntMTPError(f"invalid tree spec {spec!r}: a lookup chain needs at least 1 node")
                if length > MAX_SPEC_NODES:
                    raise _too_big(spec)
                paths.update((LOOKUP,) * k for k in range(1, length + 1))
                continue
            level: list[TreePath] = [()]
            for width in _parse_spec(part, spec):
                level = [parent + (rank,) for parent, rank in product(level, range(width))]
                paths.update(level)
        if len(paths) + 1 > MAX_SPEC_NODES:
            raise _too_big(spec)
        return cls(sorted(paths, key=_order))

    @property
    def paths(self) -> tuple[TreePath, ...]:
        """The non-root paths as tuples, in (depth, path) order."""
        return self._paths

    @property
    def choices(self) -> list[list[int]]:
        """The paths in Medusa's list-of-lists form (a fresh list)."""
        return [list(path) for path in self._paths]

    @property
    def num_nodes(self) -> int:
        """Number of nodes, the root included."""
        return len(self._paths) + 1

    @property
    def depth(self) -> int:
        """Depth of the deepest node (the root has depth 0)."""
        return len(self._paths[-1]) if self._paths else 0

    @property
    def head_depth(self) -> int:
        """Depth of the deepest head-drafted node: how many heads the tree needs (0 if none)."""
        return head_depth(self._paths)

    @property
    def lookup_length(self) -> int:
        """Length of the prompt-lookup chain under the root (0 for a heads-only tree)."""
        return lookup_length(self._paths)

    def with_lookup_length(self, length: int) -> Tree:
        """This tree with its lookup chain cut to `length` nodes (and every node below the cut
        removed): the tree drafted when the lookup found only `length` tokens. May be root-only."""
        if length >= self.lookup_length:
            return self
        return Tree._unchecked(p for p in self._paths if sum(1 for r in p if r == LOOKUP) <= length)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tree):
            return NotImplemented
        return self._paths == other._paths

    def __hash__(self) -> int:
        return hash(self._paths)

    def __repr__(self) -> str:
        if len(self._paths) <= 8:
            return f"Tree({self.choices})"
        return f"Tree(num_nodes={self.num_nodes}, depth={self.depth})"


def _too_big(spec: str) -> EntMTPError:
    return EntMTPError(f"tree spec {spec!r} has more than {MAX_SPEC_NODES} nodes; generated trees are limited to that")


def _parse_spec(spec: str, whole: str | None = None) -> list[int]:
    """Children per node at each depth, from a generated-shape spec (part of `whole`)."""
    whole = spec if whole is None else whole
    if match := _CHAIN.fullmatch(spec):
        width, levels = 1, int(match.group(1))
    elif match := _FULL_POWER.fullmatch(spec):
        width, levels = int(match.group(1)), int(match.group(2))
    elif match := _FULL_LIST.fullmatch(spec):
        width, levels = None, 0
    else:
        raise EntMTPError(f"invalid tree spec {whole!r}; accepted forms: {SPEC_FORMS}")
    # Each level holds at least one node: check the level count before building the list.
    if levels > MAX_SPEC_NODES:
        raise _too_big(whole)
    if width is None:
        branching = [int(part) for part in match.group(1).split(",")]
    else:
        branching = [width] * levels
    if not branching or min(branching) < 1:
        raise EntMTPError(f"invalid tree spec {whole!r}: sizes must be at least 1; accepted forms: {SPEC_FORMS}")
    total, level = 1, 1
    for width in branching:
        level *= width
        total += level
        if total > MAX_SPEC_NODES:
            raise _too_big(whole)
    return branching
