"""Shared fixtures and hypothesis strategies.

`shared_data` is the project's shared data folder, `../shared/data` next to the
repository; tests that need it skip when it is absent. `st.from_type(Tree)`
draws random valid trees (registered below).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st

from entmtp_vllm.tree import Tree

REPO_ROOT = Path(__file__).resolve().parents[1]

# No per-example deadline: on a loaded 2-core CI machine one stall of the scheduler or the
# garbage collector would fail a property test whose examples take milliseconds.
settings.register_profile("entmtp", deadline=None)
settings.load_profile("entmtp")


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


@pytest.fixture
def head_calls(monkeypatch):
    """`head_calls(heads_class) -> list`: from then on, the depth of every `head_logits` call of
    that heads class is appended to the returned list (the real call still runs)."""

    def watch(heads_class: type) -> list[int]:
        calls: list[int] = []
        real = heads_class.head_logits

        def counted(self, depth, *args, **kwargs):
            calls.append(depth)
            return real(self, depth, *args, **kwargs)

        monkeypatch.setattr(heads_class, "head_logits", counted)
        return calls

    return watch


from _tree_strategies import prefix_closed_choices  # noqa: E402  (a name no other test folder uses)

st.register_type_strategy(Tree, prefix_closed_choices().map(Tree.from_choices))
