"""Shared fixtures and hypothesis strategies.

`shared_data` is the project's shared data folder, `../shared/data` next to the
repository; tests that need it skip when it is absent. `st.from_type(Tree)`
draws random valid trees (registered below).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import strategies as st

from entmtp_vllm.tree import Tree

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder (`../shared/data` relative to the repository root)."""
    path = (REPO_ROOT / ".." / "shared" / "data").resolve()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (it holds the Medusa/Hydra trees)")
    return path


@pytest.fixture(scope="session")
def medusa_trees_file(shared_data: Path) -> Path:
    """The Medusa/Hydra reference trees: `{"trees": {name: [path, ...]}, ...}`."""
    path = shared_data / "trees" / "medusa_hydra_trees.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="session")
def medusa_trees(medusa_trees_file: Path) -> dict[str, list[list[int]]]:
    """The Medusa/Hydra reference trees as raw choices, by name."""
    return json.loads(medusa_trees_file.read_text())["trees"]


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


st.register_type_strategy(Tree, prefix_closed_choices().map(Tree.from_choices))
