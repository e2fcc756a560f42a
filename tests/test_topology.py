"""Tests for entmtp_vllm/topology.py.

The buffers are checked three ways: against hand-worked examples, against a
brute-force construction written here from the definitions in docs/design.md
(ancestry by path-prefix comparison, leaves as paths no other path extends),
and against a transcription of Medusa's `generate_medusa_buffers`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from entmtp_vllm import topology
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.topology import TopologyBank, TreeBuffers, build_tree_buffers
from entmtp_vllm.tree import LOOKUP, Tree
from _tree_strategies import prefix_closed_choices


def _is_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """a is b or an ancestor of b."""
    return len(a) <= len(b) and b[: len(a)] == a


def brute_force(choices: list[list[int]]) -> dict[str, object]:
    """Every buffer, straight from its definition, with no shared code."""
    paths = sorted({tuple(p) for p in choices}, key=lambda p: (len(p), p))
    nodes = [()] + paths
    n = len(nodes)
    depth = max(len(p) for p in paths)
    topk = max((r for p in paths for r in p if r >= 0), default=0) + 1
    leaves = [i for i in range(n) if not any(len(q) > len(nodes[i]) and _is_prefix(nodes[i], q) for q in nodes)]
    return {
        "nodes": tuple(nodes),
        "parents": [-1] + [nodes.index(p[:-1]) for p in paths],
        "depths": [len(p) for p in nodes],
        "ranks": [p[-1] if p else 0 for p in nodes],
        "attention_mask": [[_is_prefix(nodes[j], nodes[i]) for j in range(n)] for i in range(n)],
        "retrieve_indices": [
            [j for j in range(n) if _is_prefix(nodes[j], nodes[leaf])]
            + [-1] * (depth + 1 - len(nodes[leaf]) - 1)
            for leaf in leaves
        ],
        "level_starts": tuple(sum(1 for p in nodes if len(p) < d) for d in range(depth + 2)),
        "children": tuple(
            tuple(sorted((j for j in range(n) if nodes[j][:-1] == nodes[i] and len(nodes[j]) == len(nodes[i]) + 1),
                         key=lambda j: nodes[j][-1]))
            for i in range(n)
        ),
        "medusa_gather": [0] + [-1 if p[-1] == -1 else 1 + (len(p) - 1) * topk + p[-1] for p in paths],
        "topk": topk,
        "lookup_nodes": tuple(i for i, p in enumerate(nodes) if p and all(r == -1 for r in p)),
        "num_nodes": n,
        "depth": depth,
        "head_depth": max((len(p) for p in paths if p[-1] != -1), default=0),
        "parent_list": tuple([-1] + [nodes.index(p[:-1]) for p in paths]),
        "retrieve_rows": tuple(tuple(j for j in range(n) if _is_prefix(nodes[j], nodes[leaf])) for leaf in leaves),
        # the longest node-order prefix whose every node k >= 1 is the child of node k - 1
        "chain_nodes": max(k for k in range(n) if all(nodes[i][:-1] == nodes[i - 1] for i in range(1, k + 1))),
    }


def medusa_reference(medusa_choices: list[list[int]], topk: int) -> dict[str, list]:
    """Medusa's `generate_medusa_buffers` (medusa/model/utils.py), transcribed to plain lists.

    Medusa emits retrieve rows from the deepest node backwards; EntMTP keeps them in
    the node order of their leaf, i.e. reversed.
    """
    sorted_choices = sorted(medusa_choices, key=lambda x: (len(x), x))
    medusa_len = len(sorted_choices) + 1
    depth_counts: list[int] = []
    prev_depth = 0
    for path in sorted_choices:
        depth = len(path)
        if depth != prev_depth:
            depth_counts.append(0)
        depth_counts[depth - 1] += 1
        prev_depth = depth
    mask = [[int(i == j or j == 0) for j in range(medusa_len)] for i in range(medusa_len)]
    start = 0
    for i in range(len(depth_counts)):
        for j in range(depth_counts[i]):
            cur = sorted_choices[start + j]
            if len(cur) == 1:
                continue
            for c in range(len(cur) - 1):
                mask[j + start + 1][sorted_choices.index(cur[: c + 1]) + 1] = 1
        start += depth_counts[i]
    tree_indices = [0] * medusa_len
    position_ids = [0] * medusa_len
    start = 0
    for i in range(len(depth_counts)):
        for j in range(depth_counts[i]):
            tree_indices[start + j + 1] = sorted_choices[start + j][-1] + topk * i + 1
            position_ids[start + j + 1] = i + 1
        start += depth_counts[i]
    nest: list[list[int]] = []
    seen: list[list[int]] = []
    for i in range(len(sorted_choices)):
        cur = sorted_choices[-i - 1]
        if cur in seen:
            continue
        row = []
        for c in range(len(cur)):
            row.append(sorted_choices.index(cur[: c + 1]))
            seen.append(cur[: c + 1])
        nest.append(row)
    width = max(len(row) for row in nest)
    retrieve = [[0] + [x + 1 for x in row] + [-1] * (width - len(row)) for row in nest]
    return {"attn_mask": mask, "tree_indices": tree_indices, "position_ids": position_ids, "retrieve": retrieve}


def as_plain(buffers: TreeBuffers) -> dict[str, object]:
    out: dict[str, object] = {}
    for field in dataclasses.fields(buffers):
        value = getattr(buffers, field.name)
        out[field.name] = value.tolist() if isinstance(value, torch.Tensor) else value
    return out


def check_against_references(choices: list[list[int]]) -> None:
    buffers = build_tree_buffers(Tree.from_choices(choices))
    assert as_plain(buffers) == brute_force(choices)
    medusa = medusa_reference(choices, buffers.topk)
    assert buffers.attention_mask.int().tolist() == medusa["attn_mask"]
    assert buffers.medusa_gather.tolist() == medusa["tree_indices"]
    assert buffers.depths.tolist() == medusa["position_ids"]
    assert buffers.retrieve_indices.tolist() == medusa["retrieve"][::-1]


def test_hand_worked_small_tree() -> None:
    #        root #0
    #        /     \
    #     0 #1     2 #2        (rank 1 at depth 1 is skipped, so topk = 3)
    #     /   \
    #  0 #3   1 #4
    #    |
    #  0 #5
    b = build_tree_buffers(Tree.from_choices([[0, 0, 0], [2], [0, 1], [0], [0, 0]]))
    assert b.nodes == ((), (0,), (2,), (0, 0), (0, 1), (0, 0, 0))
    assert b.parents.tolist() == [-1, 0, 0, 1, 1, 3]
    assert b.depths.tolist() == [0, 1, 1, 2, 2, 3]
    assert b.ranks.tolist() == [0, 0, 2, 0, 1, 0]
    assert b.attention_mask.int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],
        [1, 1, 0, 1, 0, 1],
    ]
    # Leaves in node order: #2, #4, #5.
    assert b.retrieve_indices.tolist() == [[0, 2, -1, -1], [0, 1, 4, -1], [0, 1, 3, 5]]
    assert b.level_starts == (0, 1, 3, 5, 6)
    assert b.children == ((1, 2), (3, 4), (), (5,), (), ())
    # Flat candidates: [root, head1 r0..r2, head2 r0..r2, head3 r0..r2].
    assert b.topk == 3
    assert b.medusa_gather.tolist() == [0, 1, 3, 4, 5, 7]
    assert (b.num_nodes, b.depth) == (6, 3)
    assert b.parent_list == (-1, 0, 0, 1, 1, 3)
    assert b.retrieve_rows == ((0, 2), (0, 1, 4), (0, 1, 3, 5))
    assert b.chain_nodes == 1  # node 2 hangs off the root, not off node 1


def test_hand_worked_mc_sim_7b_63(medusa_trees: dict[str, list[list[int]]]) -> None:
    b = build_tree_buffers(Tree.from_choices(medusa_trees["mc_sim_7b_63"]))
    assert (b.num_nodes, b.depth, b.topk) == (64, 4, 10)
    # Depth 1 holds ranks 0..9 of head 1 (#1..#10), then depth 2 starts with [0, 0].
    assert b.nodes[:12] == ((),) + tuple((r,) for r in range(10)) + ((0, 0),)
    assert b.level_starts == (0, 1, 11, 39, 62, 64)
    assert b.parents[:13].tolist() == [-1] + [0] * 10 + [1, 1]
    assert b.depths[9:13].tolist() == [1, 1, 2, 2]
    # [0, 0] is rank 0 of head 2: 1 + (2 - 1) * 10 + 0.
    assert b.medusa_gather[:13].tolist() == list(range(13))
    # The deepest node [0, 0, 0, 0] (#62) sees the root, [0] #1, [0, 0] #11, [0, 0, 0] #39 and itself.
    assert b.nodes[62] == (0, 0, 0, 0)
    assert torch.nonzero(b.attention_mask[62]).flatten().tolist() == [0, 1, 11, 39, 62]
    # Every depth-1 node has children; the first leaves are [0, 8] #19 and [0, 9] #20.
    assert b.retrieve_indices.shape == (42, 5)
    assert b.retrieve_indices[:2].tolist() == [[0, 1, 19, -1, -1], [0, 1, 20, -1, -1]]
    assert b.retrieve_indices[-1].tolist() == [0, 1, 11, 39, 63]


def test_every_medusa_tree_matches_the_references(medusa_trees: dict[str, list[list[int]]]) -> None:
    assert len(medusa_trees) >= 1
    for choices in medusa_trees.values():
        check_against_references(choices)


@settings(max_examples=80, deadline=None)
@given(st.from_type(Tree).flatmap(lambda tree: st.permutations(tree.choices)))
def test_random_trees_match_the_references(choices: list[list[int]]) -> None:
    check_against_references(choices)


@settings(max_examples=30, deadline=None)
@given(st.from_type(Tree))
def test_types_and_shapes(tree: Tree) -> None:
    b = build_tree_buffers(tree)
    n, leaves = tree.num_nodes, len(b.retrieve_indices)
    for name in ("parents", "depths", "ranks", "medusa_gather"):
        tensor = getattr(b, name)
        assert tensor.dtype == torch.long and tensor.shape == (n,), name
    assert b.attention_mask.dtype == torch.bool and b.attention_mask.shape == (n, n)
    assert b.retrieve_indices.dtype == torch.long and b.retrieve_indices.shape == (leaves, tree.depth + 1)
    assert len(b.level_starts) == tree.depth + 2 and len(b.children) == n


def test_buffers_are_frozen() -> None:
    b = build_tree_buffers(Tree.from_spec("chain:2"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.topk = 5  # type: ignore[misc]


def test_device_is_honoured() -> None:
    b = build_tree_buffers(Tree.from_spec("full:2^2"), device="meta")
    for name in ("parents", "depths", "ranks", "attention_mask", "retrieve_indices", "medusa_gather"):
        assert getattr(b, name).device.type == "meta", name


def _bank() -> TopologyBank:
    trees = [Tree.from_spec("chain:2"), Tree.from_spec("full:2^3"), Tree.from_spec("full:3,1")]
    return TopologyBank(trees, ["small", "wide", "mid"])


def test_bank_lookup() -> None:
    bank = _bank()
    assert len(bank) == 3
    assert bank.names == ("small", "wide", "mid")
    assert bank.index("mid") == 2
    assert bank.tree(1) == Tree.from_spec("full:2^3")
    assert bank.max_depth == 3
    assert bank.max_nodes == 15


def test_bank_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(EntMTPError, match="no tree named 'huge'; known trees: small, wide, mid"):
        _bank().index("huge")


def test_bank_buffers_are_built_once_per_tree_and_device(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[Tree, torch.device]] = []
    real = topology.build_tree_buffers

    def counting(tree: Tree, device: str | torch.device = "cpu") -> TreeBuffers:
        built.append((tree, torch.device(device)))
        return real(tree, device)

    monkeypatch.setattr(topology, "build_tree_buffers", counting)
    bank = _bank()
    first = bank.buffers(1)
    assert bank.buffers(1, "cpu") is first
    assert bank.buffers(1, torch.device("cpu")) is first
    assert bank.buffers(-2) is first
    assert bank.buffers(0) is not first
    meta = bank.buffers(1, "meta")
    assert meta.parents.device.type == "meta"
    assert bank.buffers(1, "meta") is meta
    assert len(built) == 3
    assert first.num_nodes == 15


def test_bank_index_out_of_range() -> None:
    with pytest.raises(IndexError):
        _bank().buffers(3)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["a", "b"], "3 trees but 2 names"),
        (["a", "b", "a"], "tree name 'a' is used twice"),
    ],
)
def test_bank_rejects_bad_names(names: list[str], expected: str) -> None:
    trees = [Tree.from_spec("chain:1")] * 3
    with pytest.raises(EntMTPError, match=expected):
        TopologyBank(trees, names)


def test_bank_rejects_empty() -> None:
    with pytest.raises(EntMTPError, match="no trees"):
        TopologyBank([], [])


@given(prefix_closed_choices(lookup=True))
def test_hybrid_trees_match_the_brute_force(choices: list[list[int]]) -> None:
    """Lookup nodes are nodes like any other: the same independent checks hold."""
    buffers = build_tree_buffers(Tree.from_choices(choices))
    assert as_plain(buffers) == brute_force(choices)


@given(prefix_closed_choices(lookup=True), st.integers(0, 6))
def test_cut_lookup_chain_drops_exactly_the_nodes_below_the_cut(choices: list[list[int]], length: int) -> None:
    tree = Tree.from_choices(choices)
    bank = TopologyBank([tree], ["t"])
    cut = bank.buffers(0, lookup_length=length)
    kept = [p for p in choices if sum(1 for r in p if r == LOOKUP) <= length]
    assert cut.nodes == ((),) + tuple(sorted(map(tuple, kept), key=lambda p: (len(p), p)))
    assert len(cut.lookup_nodes) == min(length, tree.lookup_length)
    if kept:
        assert as_plain(cut) == brute_force(kept)
    else:  # root only: a plain one-token step
        assert cut.num_nodes == 1 and cut.retrieve_indices.tolist() == [[0]]
    assert bank.buffers(0, lookup_length=length) is cut  # built once


def test_hybrid_spec_and_depths() -> None:
    tree = Tree.from_spec("lookup:4+full:2,1")
    assert tree.lookup_length == 4 and tree.head_depth == 2 and tree.depth == 4 and tree.num_nodes == 9
    hybrid = Tree.from_choices([[-1], [-1, -1], [-1, -1, 0], [0]], max_depth=3)
    assert hybrid.head_depth == 3 and hybrid.lookup_length == 2
    with pytest.raises(EntMTPError, match="only 2 heads"):
        Tree.from_choices([[-1], [-1, -1], [-1, -1, 0]], max_depth=2)
    bank = TopologyBank([tree, Tree.from_spec("chain:3")], ["h", "c"])
    assert bank.head_depth == 3 and bank.lookup_length == 4 and bank.max_depth == 4
