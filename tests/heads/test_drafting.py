"""Tests for entmtp_vllm/heads/drafting.py (tiny random heads, real TreeBuffers)."""

from __future__ import annotations

import pytest
import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads import HydraHeads, MedusaHeads, PrefixLayerConfig
from entmtp_vllm.heads.drafting import LOOKUP_PROB, Draft, TreeDrafter, draft_trees, greedy_chains
from entmtp_vllm.topology import TopologyBank, build_tree_buffers
from entmtp_vllm.tree import LOOKUP, Tree

from conftest import HIDDEN, VOCAB, randomize

ROOT = 7


def hydra(num_heads: int = 4, **kwargs) -> HydraHeads:
    return randomize(HydraHeads(HIDDEN, VOCAB, num_heads=num_heads, **kwargs), scale=0.5)


def head(heads, lm_head, embed, hidden, d, path_tokens) -> torch.Tensor:
    """Head d's logits on one path, computed directly."""
    emb = embed[torch.tensor(path_tokens)][None]
    return heads.head_logits(d, hidden[None], emb, lm_head)[0]


class Counter:
    """Wraps `heads.head_logits` to count calls and rows per depth."""

    def __init__(self, heads) -> None:
        self.calls: dict[int, int] = {}
        self.rows: dict[int, int] = {}
        original = heads.head_logits

        def counted(depth, hidden, emb, lm=None):
            self.calls[depth] = self.calls.get(depth, 0) + 1
            self.rows[depth] = self.rows.get(depth, 0) + hidden.shape[0]
            return original(depth, hidden, emb, lm)

        heads.head_logits = counted


def test_chain_equals_stepwise_argmax(base_weights) -> None:
    embed, lm_head = base_weights
    heads = hydra()
    hidden = torch.randn(HIDDEN)
    draft = TreeDrafter(heads, embed, lm_head).begin(hidden, ROOT).draft(build_tree_buffers(Tree.from_spec("chain:4")))
    assert isinstance(draft, Draft) and draft.draft_probs is None
    path = [ROOT]
    for d in range(1, 5):
        path.append(int(head(heads, lm_head, embed, hidden, d, path).argmax()))
    assert draft.tokens.tolist() == path


def test_branching_children_are_parent_topk_in_rank_order(base_weights) -> None:
    embed, lm_head = base_weights
    heads = hydra()
    hidden = torch.randn(HIDDEN)
    buffers = build_tree_buffers(Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [2, 0], [2, 1], [2, 2], [2, 1, 0]]))
    tokens = TreeDrafter(heads, embed, lm_head).begin(hidden, ROOT).draft(buffers).tokens.tolist()
    assert tokens[0] == ROOT
    for i in range(1, buffers.num_nodes):
        path = buffers.nodes[i]
        parent = buffers.parents[i].item()
        chain, j = [], parent
        while j != -1:
            chain.append(tokens[j])
            j = buffers.parents[j].item()
        ancestors = chain[::-1]  # root token first
        topk = head(heads, lm_head, embed, hidden, len(path), ancestors).topk(3).indices.tolist()
        assert tokens[i] == topk[path[-1]], path


def test_greedy_chain_probs_and_reuse(base_weights) -> None:
    embed, lm_head = base_weights
    heads = hydra()
    hidden = torch.randn(HIDDEN)
    path, expected = [ROOT], []
    with torch.no_grad():
        for d in range(1, 4):
            p = torch.softmax(head(heads, lm_head, embed, hidden, d, path), -1)
            expected.append(float(p.max()))
            path.append(int(p.argmax()))
    counter = Counter(heads)
    step = TreeDrafter(heads, embed, lm_head).begin(hidden, ROOT)
    probs = step.greedy_chain(3)
    assert probs == pytest.approx(expected, rel=1e-5)
    assert counter.rows == {1: 1, 2: 1, 3: 1}
    # full binary tree of depth 3: internal nodes 1 + 2 + 4; the chain's 3 are reused
    buffers = build_tree_buffers(Tree.from_spec("full:2^3"))
    draft = step.draft(buffers)
    assert sum(counter.rows.values()) == 1 + 2 + 4
    assert counter.rows == {1: 1, 2: 2, 3: 4}
    assert counter.calls == {1: 1, 2: 2, 3: 2}  # one batched call per level beyond the probe
    # the chain's tokens are the tree's rank-0 path
    rank0 = [buffers.nodes.index(p) for p in [(), (0,), (0, 0), (0, 0, 0)]]
    assert draft.tokens[rank0].tolist() == path
    # drafting again recomputes nothing
    step.draft(buffers)
    assert sum(counter.rows.values()) == 7


def test_draft_probs_rows_are_parent_distributions(base_weights) -> None:
    embed, lm_head = base_weights
    heads = hydra()
    hidden = torch.randn(HIDDEN)
    buffers = build_tree_buffers(Tree.from_spec("full:3,2"))
    draft = TreeDrafter(heads, embed, lm_head).begin(hidden, ROOT).draft(buffers, want_probs=True)
    probs = draft.draft_probs
    assert probs.shape == (buffers.num_nodes, VOCAB)
    assert torch.all(probs[0] == 0)
    tokens = draft.tokens.tolist()
    for i in range(1, buffers.num_nodes):
        parent = buffers.parents[i].item()
        path_tokens = [ROOT] if parent == 0 else [ROOT, tokens[parent]]
        expected = torch.softmax(head(heads, lm_head, embed, hidden, buffers.depths[i].item(), path_tokens), -1)
        torch.testing.assert_close(probs[i], expected)
        assert probs[i].argsort(descending=True)[buffers.ranks[i]].item() == tokens[i]


def test_too_deep_tree_is_a_user_error(base_weights) -> None:
    embed, lm_head = base_weights
    step = TreeDrafter(hydra(num_heads=2), embed, lm_head).begin(torch.randn(HIDDEN), ROOT)
    with pytest.raises(EntMTPError, match="3 deep"):
        step.draft(build_tree_buffers(Tree.from_spec("chain:3")))
    with pytest.raises(EntMTPError):
        step.greedy_chain(3)


def test_wrong_base_weights_are_a_user_error(base_weights) -> None:
    embed, lm_head = base_weights
    with pytest.raises(EntMTPError, match="heads expect"):
        TreeDrafter(hydra(), embed[:, :-1], lm_head)
    with pytest.raises(EntMTPError, match="lm_head_weight"):
        TreeDrafter(hydra(), embed)


def test_medusa_drafting_uses_each_head_once(base_weights) -> None:
    embed, lm_head = base_weights
    heads = randomize(MedusaHeads(HIDDEN, VOCAB, num_heads=3), scale=0.5)
    counter = Counter(heads)
    hidden = torch.randn(HIDDEN)
    buffers = build_tree_buffers(Tree.from_spec("full:3,2,2"))
    tokens = TreeDrafter(heads, embed, lm_head).begin(hidden, ROOT).draft(buffers).tokens
    assert counter.rows == {1: 1, 2: 1, 3: 1}
    candidates = [ROOT] + [t for d in (1, 2, 3) for t in heads.head_logits(d, hidden[None], None, lm_head)[0].topk(buffers.topk).indices.tolist()]
    torch.testing.assert_close(tokens, torch.tensor(candidates)[buffers.medusa_gather])


def test_prefix_heads_draft_from_the_observed_prefix_output(base_weights) -> None:
    embed, lm_head = base_weights
    cfg = PrefixLayerConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=4, intermediate_size=24)
    heads = hydra(num_heads=2, prefix_layer=cfg)
    drafter = TreeDrafter(heads, embed, lm_head)
    states = torch.randn(6, HIDDEN)
    drafter.observe(states[:4], torch.arange(4))
    drafter.observe(states[4:], [4, 5])
    expected_hidden = heads.prefix(states, torch.arange(6))[-1]
    tokens = drafter.begin(states[-1], ROOT).draft(build_tree_buffers(Tree.from_spec("chain:2"))).tokens.tolist()
    t1 = int(head(heads, lm_head, embed, expected_hidden, 1, [ROOT]).argmax())
    t2 = int(head(heads, lm_head, embed, expected_hidden, 2, [ROOT, t1]).argmax())
    assert tokens == [ROOT, t1, t2]
    # re-observing from an earlier position cuts the cache back
    drafter.observe(states[3:5], [3, 4])
    assert drafter.prefix_cache.positions == [0, 1, 2, 3, 4]
    torch.testing.assert_close(drafter.prefix_cache.last_output, heads.prefix(states[:5], torch.arange(5))[-1], atol=1e-5, rtol=1e-4)
    drafter.reset()
    assert drafter.prefix_cache.length == 0


@pytest.mark.parametrize("context,observed", [("sequence", [0, 1, 2, 3, 4]), ("answer", [4])])
def test_the_prompt_is_observed_as_the_prefix_layer_was_trained(base_weights, context, observed) -> None:
    """Heads trained on whole sequences read the whole prompt; heads trained on the teacher
    cache's answer rows read only its last position (the cache's first row of a record)."""
    embed, lm_head = base_weights
    cfg = PrefixLayerConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=4, intermediate_size=24, context=context)
    drafter = TreeDrafter(hydra(num_heads=2, prefix_layer=cfg), embed, lm_head)
    states = torch.randn(5, HIDDEN)
    drafter.observe_prompt(states)
    assert drafter.prefix_cache.positions == observed
    first = observed[0]
    torch.testing.assert_close(drafter.prefix_cache.last_output, drafter.heads.prefix(states[first:], torch.arange(first, 5))[-1])


def test_hybrid_tree_lookup_nodes_copy_and_heads_see_them(base_weights) -> None:
    """Lookup nodes take the proposal's tokens; head nodes below them condition on them; the
    heads never run for a parent whose children are all lookup nodes."""
    from entmtp_vllm.topology import TopologyBank

    embed, lm_head = base_weights
    heads = hydra()
    counter = Counter(heads)
    hidden = torch.randn(HIDDEN)
    tree = Tree.from_choices([[-1], [-1, -1], [-1, -1, -1], [-1, -1, 0], [-1, -1, 1], [0], [0, 0]])
    lookup = [11, 12, 13]
    buffers = TopologyBank([tree], ["h"]).buffers(0, lookup_length=3)
    tokens = TreeDrafter(heads, embed, lm_head).begin(hidden, ROOT).draft(buffers, lookup).tokens.tolist()
    # head rows: depth 1 at the root, depth 2 at (0,), depth 3 at (-1, -1); none at () for
    # the lookup child or at (-1,) (whose only child is a lookup node)
    assert counter.rows == {1: 1, 2: 1, 3: 1}
    by_path = dict(zip(buffers.nodes, tokens))
    assert [by_path[(-1,) * k] for k in (1, 2, 3)] == lookup
    top2 = head(heads, lm_head, embed, hidden, 3, [ROOT, 11, 12]).topk(2).indices.tolist()
    assert [by_path[(-1, -1, 0)], by_path[(-1, -1, 1)]] == top2
    assert by_path[(0,)] == int(head(heads, lm_head, embed, hidden, 1, [ROOT]).argmax())


def test_hybrid_tree_needs_the_proposal_it_was_cut_to(base_weights) -> None:
    embed, lm_head = base_weights
    buffers = build_tree_buffers(Tree.from_spec("lookup:3+chain:1"))
    step = TreeDrafter(hydra(), embed, lm_head).begin(torch.randn(HIDDEN), ROOT)
    with pytest.raises(EntMTPError, match="3 lookup nodes but the lookup proposed 1"):
        step.draft(buffers, [5])


def test_batched_drafting_equals_one_sequence_at_a_time(base_weights) -> None:
    """`greedy_chains` / `draft_trees` over several sequences with different trees (a branching
    tree, a chain, a hybrid tree, a tree with nothing below depth 1) give every sequence the same
    tokens and probabilities as drafting it alone, with one head call per depth."""
    embed, lm_head = base_weights
    heads = hydra()
    bank = TopologyBank([Tree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]), Tree.from_spec("chain:3"),
                         Tree.from_spec("lookup:2+chain:2"), Tree.from_spec("chain:1")], ["a", "b", "c", "d"])
    gen = torch.Generator().manual_seed(3)
    hiddens = [torch.randn(HIDDEN, generator=gen) for _ in range(5)]
    roots = [3, 9, 9, 21, 5]
    trees = [bank.buffers(0), bank.buffers(1), bank.buffers(2, lookup_length=2), bank.buffers(3), bank.buffers(0)]
    lookups = [None, None, [17, 18], None, None]
    alone = []
    for h, r, t, lk in zip(hiddens, roots, trees, lookups):
        step = TreeDrafter(heads, embed, lm_head).begin(h, r)
        chain = step.greedy_chain(2)
        alone.append((chain, step.draft(t, lk)))
    drafter = TreeDrafter(heads, embed, lm_head)
    counter = Counter(heads)
    steps = [drafter.begin(h, r) for h, r in zip(hiddens, roots)]
    chains = greedy_chains(steps, 2)
    assert counter.calls == {1: 1, 2: 1}
    drafts = draft_trees(steps, trees, lookups)
    assert counter.calls == {1: 1, 2: 2, 3: 1}  # the chain's heads 1-2 outputs are reused
    for (chain, one), batch_chain, batched in zip(alone, chains, drafts):
        assert batch_chain == pytest.approx(chain, abs=1e-6)
        assert batched.tokens.tolist() == one.tokens.tolist()
        assert list(batched.token_ids) == batched.tokens.tolist() and list(one.token_ids) == one.tokens.tolist()
        assert all(type(t) is int for t in batched.token_ids)
        assert batched.token_probs == pytest.approx(one.token_probs, abs=1e-6)
    # token_probs: each head node's probability under its parent's head distribution
    step = TreeDrafter(heads, embed, lm_head).begin(hiddens[0], roots[0])
    draft = step.draft(trees[0], want_probs=True)
    for i in range(1, trees[0].num_nodes):
        assert draft.token_probs[i] == pytest.approx(float(draft.draft_probs[i, draft.tokens[i]]), abs=1e-6)
    lookup_nodes = list(trees[2].lookup_nodes)
    assert [drafts[2].token_probs[i] for i in lookup_nodes] == [LOOKUP_PROB, LOOKUP_PROB]
    assert [int(drafts[2].tokens[i]) for i in lookup_nodes] == [17, 18]


def test_a_limit_drafts_a_prefix_and_calls_no_head_for_a_level_no_tree_needs(base_weights) -> None:
    """`draft_trees(limit=)`: before each deeper level the limit sees what is drafted so far (None
    for the head nodes still to draft) and caps each tree to a prefix in node order; the drafts
    are those prefixes of the unlimited drafts, and a level no tree reaches calls no head."""
    embed, lm_head = base_weights
    heads = hydra()
    bank = TopologyBank([Tree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]), Tree.from_spec("chain:3"),
                         Tree.from_spec("lookup:2+chain:2")], ["a", "b", "c"])
    trees = [bank.buffers(0), bank.buffers(1), bank.buffers(2, lookup_length=2)]
    lookups = [None, None, [17, 18]]
    gen = torch.Generator().manual_seed(5)
    hiddens = [torch.randn(HIDDEN, generator=gen) for _ in trees]
    drafter = TreeDrafter(heads, embed, lm_head)
    full = draft_trees([drafter.begin(h, 4) for h in hiddens], trees, lookups)
    seen = []

    def limit(depth, probs):
        seen.append((depth, [list(p) for p in probs]))
        return [4, 2, 99] if depth == 2 else [4, 2, 3]  # tree a: 3 nodes; b: its first node; c: its lookup chain

    counter = Counter(heads)
    limited = draft_trees([drafter.begin(h, 4) for h in hiddens], trees, lookups, limit=limit)
    assert [len(d.tokens) for d in limited] == [4, 2, 3]
    for one, cut in zip(full, limited):
        n = len(cut.tokens)
        assert cut.tokens.tolist() == one.tokens[:n].tolist()
        assert cut.token_probs == pytest.approx(one.token_probs[:n], abs=1e-6)
    assert [depth for depth, _ in seen] == [2, 3]
    for buffers, one, probs in zip(trees, full, seen[0][1]):  # before head 2
        for node, p, drafted in zip(buffers.nodes, probs, one.token_probs):
            if node and node[-1] != LOOKUP and len(node) >= 2:
                assert p is None  # a head node not drafted yet
            else:  # the root, copied lookup nodes, depth-1 head nodes
                assert p == pytest.approx(drafted, abs=1e-6)
    # head 1: trees a, b, c; head 2: a's node [0] and c's head node; head 3 never (tree a is cut to
    # depth 1, b to its first node, c is 2 deep)
    assert counter.calls == {1: 1, 2: 1} and counter.rows == {1: 3, 2: 2}
    # depth 1 only: one head call; the draft distributions come along for the kept nodes
    counter.calls.clear()
    shallow = draft_trees([drafter.begin(h, 4) for h in hiddens], trees, lookups, limit=lambda d, p: [3, 2, 3],
                          want_probs=True)
    assert counter.calls == {1: 1}
    assert [len(d.tokens) for d in shallow] == [d.draft_probs.shape[0] for d in shallow] == [3, 2, 3]
