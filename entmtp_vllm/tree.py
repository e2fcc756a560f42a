"""Draft trees as sets of paths.

A tree is the shape of the candidates that the heads draft in one step. A path
`(i0, i1, ...)` is the node reached by taking the i0-th ranked token of head 1,
then the i1-th ranked token of head 2, and so on (Medusa's "choices"). The root
`()` is the token sampled from the base model; it is implicit and never listed.

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

SPEC_FORMS = (
    "chain:K (a chain of K nodes), full:B^D (B-ary, depth D), "
    "full:b1,b2,... (b_d children per node at depth d)"
)

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
    for rank in raw:
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise EntMTPError(f"invalid tree: path {_show(raw)} has a rank {rank!r} that is not an integer")
        if rank < 0:
            raise EntMTPError(f"invalid tree: path {_show(raw)} has a negative rank {rank}")
    if max_depth is not None and len(raw) > max_depth:
        raise EntMTPError(
            f"invalid tree: path {_show(raw)} has depth {len(raw)} but only {max_depth} heads are available "
            f"(max_depth={max_depth}); drop the deeper paths or use a model with more heads"
        )
    return tuple(raw)


def _validate(choices: object, max_depth: int | None) -> tuple[TreePath, ...]:
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
    if not paths:
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
    def from_choices(cls, choices: Iterable[Sequence[int]], max_depth: int | None = None) -> Tree:
        """Validate Medusa-style choices (a list of paths); `max_depth` is the number of heads available."""
        return cls(choices, max_depth)

    @classmethod
    def from_spec(cls, spec: str) -> Tree:
        """A generated shape: `chain:K`, `full:B^D` or `full:b1,b2,...`."""
        branching = _parse_spec(spec)
        paths: list[TreePath] = []
        level: list[TreePath] = [()]
        for width in branching:
            level = [parent + (rank,) for parent, rank in product(level, range(width))]
            paths.extend(level)
        return cls(paths)

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
        return len(self._paths[-1])

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


def _parse_spec(spec: str) -> list[int]:
    """Children per node at each depth, from a generated-shape spec."""
    if match := _CHAIN.fullmatch(spec):
        width, levels = 1, int(match.group(1))
    elif match := _FULL_POWER.fullmatch(spec):
        width, levels = int(match.group(1)), int(match.group(2))
    elif match := _FULL_LIST.fullmatch(spec):
        width, levels = None, 0
    else:
        raise EntMTPError(f"invalid tree spec {spec!r}; accepted forms: {SPEC_FORMS}")
    # Each level holds at least one node: check the level count before building the list.
    if levels > MAX_SPEC_NODES:
        raise _too_big(spec)
    if width is None:
        branching = [int(part) for part in match.group(1).split(",")]
    else:
        branching = [width] * levels
    if not branching or min(branching) < 1:
        raise EntMTPError(f"invalid tree spec {spec!r}: sizes must be at least 1; accepted forms: {SPEC_FORMS}")
    total, level = 1, 1
    for width in branching:
        level *= width
        total += level
        if total > MAX_SPEC_NODES:
            raise _too_big(spec)
    return branching
