"""Hypothesis strategies for trees, shared by the test modules (imported by this unique name)."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def prefix_closed_choices(
    draw: st.DrawFn, max_nodes: int = 30, max_rank: int = 5, max_depth: int = 5, lookup: bool = False
) -> list[list[int]]:
    """A random valid choices list in random order: each new path extends the root or an
    earlier path by one rank, so every prefix is present. With `lookup`, paths made only of
    lookup ranks (-1) may be extended by another -1 (hybrid trees)."""
    paths: list[tuple[int, ...]] = []
    for _ in range(draw(st.integers(1, max_nodes))):
        parent = draw(st.sampled_from([()] + [p for p in paths if len(p) < max_depth]))
        lowest = -1 if lookup and all(rank == -1 for rank in parent) else 0
        child = parent + (draw(st.integers(lowest, max_rank)),)
        if child not in paths:
            paths.append(child)
    return [list(path) for path in draw(st.permutations(paths))]
