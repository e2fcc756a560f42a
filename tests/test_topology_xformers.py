"""The TopologyBank's tree buffers against xformers' `TreeAttnMetadata.from_tree_choices`, an
independent implementation (plain torch; xformers' CUDA op itself does not run on CPU), on the
published Medusa/Hydra trees and on random heads-only trees."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings

from _tree_strategies import prefix_closed_choices
from entmtp_vllm.topology import build_tree_buffers
from entmtp_vllm.tree import Tree

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    tree_attention = pytest.importorskip("xformers.ops.tree_attention")


def _same_as_xformers(choices: list[list[int]]) -> None:
    ours = build_tree_buffers(Tree.from_choices(choices))
    theirs = tree_attention.TreeAttnMetadata.from_tree_choices([tuple(c) for c in choices], dtype=torch.float32,
                                                               device=torch.device("cpu"))
    n = ours.num_nodes
    additive = torch.where(ours.attention_mask, 0.0, float("-inf"))
    assert torch.equal(theirs.attention_bias, additive)
    assert theirs.tree_seq_position_ids.tolist() == ours.depths.tolist()
    assert theirs.parent_node_indices.tolist() == ours.parents[1:].tolist()
    assert theirs.num_children_per_node.tolist() == [len(c) for c in ours.children]
    for node, children in enumerate(ours.children):  # xformers numbers children among non-root nodes
        assert [int(c) + 1 for c in theirs.child_node_indices[node, : len(children)]] == list(children)
    def paths(rows, lengths=None):
        found = set()
        for i, row in enumerate(rows.tolist()):
            cut = row[: lengths[i]] if lengths is not None else [x for x in row if x >= 0]
            found.add(tuple(cut))
        return found
    assert paths(theirs.retrieval_indices, theirs.path_lengths) == paths(ours.retrieve_indices)
    assert theirs.num_nodes_per_level.tolist() == [b - a for a, b in zip(ours.level_starts, ours.level_starts[1:])]
    assert sum(theirs.num_nodes_per_level.tolist()) == n


def test_published_trees_match_xformers(medusa_trees):
    assert "mc_sim_7b_63" in medusa_trees
    for choices in medusa_trees.values():
        _same_as_xformers(choices)


@settings(max_examples=200, deadline=None)
@given(prefix_closed_choices(max_nodes=40, max_rank=6, max_depth=6))
def test_random_trees_match_xformers(choices):
    _same_as_xformers(choices)


def test_a_wrong_mask_is_caught():
    """The comparison can fail: a mask that forgets the root differs from xformers'."""
    ours = build_tree_buffers(Tree.from_choices([[0], [1], [0, 0]]))
    theirs = tree_attention.TreeAttnMetadata.from_tree_choices([(0,), (1,), (0, 0)], dtype=torch.float32,
                                                               device=torch.device("cpu"))
    broken = ours.attention_mask.clone()
    broken[3, 0] = False
    assert not torch.equal(theirs.attention_bias, torch.where(broken, 0.0, float("-inf")))
