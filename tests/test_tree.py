"""Tests for entmtp_vllm/tree.py: validation, generated shapes, identity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import MAX_SPEC_NODES, Tree


def test_from_choices_sorts_by_depth_then_path() -> None:
    tree = Tree.from_choices([[1, 0], [0, 1], [1], [0], [0, 0], [0, 0, 0]])
    assert tree.paths == ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
    assert tree.choices == [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
    assert tree.num_nodes == 7
    assert tree.depth == 3


def test_accepts_tuples_and_generators() -> None:
    assert Tree.from_choices(((0,), (0, 0))) == Tree.from_choices(p for p in [[0], [0, 0]])


def test_choices_is_a_fresh_copy() -> None:
    tree = Tree.from_choices([[0]])
    tree.choices.append([1])
    assert tree.choices == [[0]]


@settings(max_examples=60, deadline=None)
@given(st.from_type(Tree).flatmap(lambda tree: st.tuples(st.just(tree), st.permutations(tree.choices))))
def test_order_of_choices_does_not_matter(pair: tuple[Tree, list[list[int]]]) -> None:
    tree, shuffled = pair
    again = Tree.from_choices(shuffled)
    assert again == tree
    assert hash(again) == hash(tree)
    assert Tree.from_choices(tree.choices) == tree
    assert tree.num_nodes == len(shuffled) + 1
    assert tree.depth == max(len(path) for path in shuffled)


def test_equality_and_hash() -> None:
    a = Tree.from_choices([[0], [1]])
    assert a == Tree.from_choices([[1], [0]])
    assert a != Tree.from_choices([[0]])
    assert a != [[0], [1]]
    assert len({a, Tree.from_choices([[1], [0]]), Tree.from_choices([[0]])}) == 2


def test_repr_is_short() -> None:
    assert repr(Tree.from_choices([[0], [0, 0]])) == "Tree([[0], [0, 0]])"
    big = repr(Tree.from_spec("full:4^3"))
    assert big == "Tree(num_nodes=85, depth=3)"


def test_max_depth_allows_exactly_that_many_heads() -> None:
    assert Tree.from_choices([[0], [0, 0]], max_depth=2).depth == 2


@pytest.mark.parametrize(
    ("choices", "max_depth", "expected"),
    [
        ([], None, "no paths given"),
        ("abc", None, "expected a list of paths, got str"),
        (5, None, "expected a list of paths, got int"),
        ([[0], 3], None, "path 3 is not a list of ranks"),
        ([[0], [0, "a"]], None, "path [0, 'a'] has a rank 'a' that is not an integer"),
        ([[True]], None, "path [True] has a rank True that is not an integer"),
        ([[0], [0, 1.0]], None, "path [0, 1.0] has a rank 1.0 that is not an integer"),
        ([[0], [-2]], None, "path [-2] has a negative rank -2"),
        ([[0], [0, -1]], None, "path [0, -1] has a lookup rank (-1) after a head rank"),
        ([[0], [0, 0], [0]], None, "path [0] is listed twice"),
        ([[0], (0,)], None, "path [0] is listed twice"),
        ([[0, 2]], None, "invalid tree: path [0, 2] has no parent path [0]"),
        ([[0], [0, 2, 1]], None, "path [0, 2, 1] has no parent path [0, 2]"),
        ([[0], []], None, "path [] given explicitly; the root is implicit"),
        ([[0], [0, 0], [0, 0, 0]], 2, "path [0, 0, 0] has depth 3 but only 2 heads are available"),
    ],
)
def test_invalid_choices_name_the_path(choices: object, max_depth: int | None, expected: str) -> None:
    with pytest.raises(EntMTPError) as info:
        Tree.from_choices(choices, max_depth=max_depth)  # type: ignore[arg-type]
    message = str(info.value)
    assert expected in message
    assert message.startswith("invalid tree")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("spec", "choices"),
    [
        ("chain:1", [[0]]),
        ("chain:3", [[0], [0, 0], [0, 0, 0]]),
        ("full:2^2", [[0], [1], [0, 0], [0, 1], [1, 0], [1, 1]]),
        ("full:2,1", [[0], [1], [0, 0], [1, 0]]),
        ("full:1,3", [[0], [0, 0], [0, 1], [0, 2]]),
    ],
)
def test_from_spec_small_shapes(spec: str, choices: list[list[int]]) -> None:
    assert Tree.from_spec(spec).choices == choices


@pytest.mark.parametrize(
    ("spec", "num_nodes", "depth"), [("chain:4", 5, 4), ("full:2^3", 15, 3), ("full:3,2,1", 16, 3)]
)
def test_from_spec_sizes(spec: str, num_nodes: int, depth: int) -> None:
    tree = Tree.from_spec(spec)
    assert (tree.num_nodes, tree.depth) == (num_nodes, depth)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_full_per_depth_branching(branching: list[int]) -> None:
    tree = Tree.from_spec("full:" + ",".join(map(str, branching)))
    for d, width in enumerate(branching, start=1):
        level = [path for path in tree.paths if len(path) == d]
        expected_count = 1
        for w in branching[:d]:
            expected_count *= w
        assert len(level) == expected_count
        assert {path[-1] for path in level} == set(range(width))


@pytest.mark.parametrize(("width", "depth"), [(1, 3), (2, 3), (3, 2), (5, 1)])
def test_full_power_is_uniform_branching(width: int, depth: int) -> None:
    assert Tree.from_spec(f"full:{width}^{depth}") == Tree.from_spec("full:" + ",".join([str(width)] * depth))


@pytest.mark.parametrize(
    "spec",
    ["", "chain", "chain:", "chain:0", "chain:-1", "chain:x", "chain:2 ", "full:", "full:2^", "full:2^0",
     "full:0^2", "full:2,0", "full:2,,1", "star:3", "CHAIN:3"],
)
def test_bad_spec_lists_the_accepted_forms(spec: str) -> None:
    with pytest.raises(EntMTPError) as info:
        Tree.from_spec(spec)
    message = str(info.value)
    assert repr(spec) in message
    assert "chain:K" in message and "full:B^D" in message and "full:b1,b2,..." in message


@pytest.mark.parametrize("spec", ["chain:99999999999", f"chain:{MAX_SPEC_NODES}", "full:10^10", "full:64,64,64"])
def test_oversized_spec_is_refused(spec: str) -> None:
    with pytest.raises(EntMTPError, match=f"more than {MAX_SPEC_NODES} nodes"):
        Tree.from_spec(spec)
