"""(a) One rollout over the joint tree T u F scores every T u {nu} exactly as a separate
verification of each T u {nu} would (one-step what-if), with the real drafter and target."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from entmtp_vllm.acceptance import accept_greedy
from entmtp_vllm.engine.reference import ReferenceEngine
from entmtp_vllm.lookup import LookupConfig, PromptLookup
from entmtp_vllm.topology import TopologyBank, build_tree_buffers
from entmtp_vllm.tree import LOOKUP, Tree
from tree_search.trajectories import UNRANKED, verify_tree_at
from tree_search.frontier import next_children, search_frontier
from tree_search.scoring import ForwardScorer, RankScorer, lookup_hits

from _search_parts import calibrate, random_drafter, random_prompts, tiny_llama


def separate_accept_length(model, drafter, trajectory, position: int, paths) -> int:
    """The engine's own step, from scratch: prefill the prefix, draft the tree with the heads
    (and the lookup drafter's copy for lookup nodes: the chain cut to what it found, as the
    engines do), verify it with ONE forward (the engine's mask and positions), accept greedily."""
    engine = ReferenceEngine(model, None)  # only its forward / tree-mask code is used
    seq = trajectory.prompt_ids + trajectory.tokens
    t = len(trajectory.prompt_ids) + position
    cache = DynamicCache(config=model.config)
    _, hidden = engine._forward(torch.tensor(seq[:t]), cache)
    tree = Tree.from_choices(sorted(paths))
    found = PromptLookup(LookupConfig()).propose(seq[: t + 1], tree.lookup_length).tokens if tree.lookup_length else []
    buffers = build_tree_buffers(tree.with_lookup_length(len(found)))
    tokens = drafter.begin(hidden[-1], seq[t]).draft(buffers, found).tokens
    logits, _ = engine._forward(tokens, cache, position_ids=t + buffers.depths,
                                attention_mask=engine._tree_mask(buffers, t))
    return accept_greedy(buffers, tokens, logits).accept_length


def grown_tree(calibration, size: int, depth: int) -> set:
    history = search_frontier(RankScorer(calibration), size, depth, progress=False)
    return {tuple(p) for p in history[-1].tree}


@pytest.mark.parametrize("shape", ["grown", "bushy"])
def test_one_rollout_equals_a_separate_forward_per_candidate(tiny, calibration, shape):
    model, drafter = tiny
    tree = grown_tree(calibration, 5, 3) if shape == "grown" else {(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)}
    candidates = next_children(tree, 3)
    one = RankScorer(calibration).score(tree, candidates, detail=True)
    joint = ForwardScorer(model, drafter, calibration).score(tree, candidates, detail=True)
    assert one.per_step == joint.per_step  # oracle ranks == literal joint-tree verification, step by step
    assert (one.steps, one.accepted, one.gains) == (joint.steps, joint.accepted, joint.gains)

    for step in one.per_step:
        trajectory = calibration.trajectories[step.prompt]
        assert separate_accept_length(model, drafter, trajectory, step.position, tree) == step.accept
        for candidate in candidates:
            alone = separate_accept_length(model, drafter, trajectory, step.position, tree | {candidate})
            assert alone == step.what_if[candidate], (step, candidate)
    # not a vacuous check: drafts are accepted, and some candidates gain
    assert one.accepted > one.steps
    assert any(one.gains.values())
    assert one.what_if_tau(max(candidates, key=one.gains.get)) > one.tau


def test_oracle_ranks_are_the_drafters_ranks(tiny, calibration):
    """Along the true path, the node at rank ranks[i][d-1] drafts exactly the true token."""
    model, drafter = tiny
    trajectory = calibration.trajectories[0]
    seq = trajectory.prompt_ids + trajectory.tokens
    with torch.no_grad():
        hidden = model(torch.tensor([seq]), output_hidden_states=True).hidden_states[-1][0]
    checked = 0
    for i, row in enumerate(trajectory.ranks[:-drafter.max_depth]):
        t = len(trajectory.prompt_ids) + i
        path = ()
        for rank in row:
            if rank == UNRANKED:
                break
            path = path + (rank,)
        if not path:
            continue
        buffers = build_tree_buffers(Tree.from_choices([list(path[:k]) for k in range(1, len(path) + 1)]))
        tokens = drafter.begin(hidden[t - 1], seq[t]).draft(buffers).tokens.tolist()
        assert tokens == seq[t : t + len(path) + 1]
        checked += 1
    assert checked > 0


def test_verify_tree_at_a_shorter_prefix_equals_the_engine_verification(tiny, calibration):
    """Masking the cache entries at and after the root equals verifying on the prefix alone."""
    model, drafter = tiny
    trajectory = calibration.trajectories[1]
    seq = trajectory.prompt_ids + trajectory.tokens
    buffers = build_tree_buffers(Tree.from_spec("full:2,2,1"))
    engine = ReferenceEngine(model, None)
    full = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([seq]), past_key_values=full, use_cache=True)
    for t in (len(trajectory.prompt_ids), len(trajectory.prompt_ids) + 7):
        tokens = torch.tensor([seq[t]] + [(seq[t] + k) % 24 for k in range(1, buffers.num_nodes)])
        with torch.no_grad():
            logits, _ = verify_tree_at(model, full, len(seq), t, tokens, buffers)
            prefix = DynamicCache(config=model.config)
            engine._forward(torch.tensor(seq[:t]), prefix)
            expected, _ = engine._forward(tokens, prefix, position_ids=t + buffers.depths,
                                          attention_mask=engine._tree_mask(buffers, t))
        torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
        assert full.get_seq_length() == len(seq)  # the tree's entries were cut off again


def test_what_if_counts_stop_at_eos_and_max_tokens():
    """The walk follows the engine: it stops after emitting EOS, and after max_tokens tokens."""
    model = tiny_llama(seed=3, eos=7)
    drafter = random_drafter(model)
    calibration = calibrate(model, drafter, random_prompts(4, seed=9), max_tokens=12)
    score = RankScorer(calibration).score({(0,), (0, 0)}, [], detail=True)
    for k, trajectory in enumerate(calibration.trajectories):
        engine = ReferenceEngine(model, None, drafter, TopologyBank([Tree.from_choices([[0], [0, 0]])], ["t"]))
        gen = engine.generate(trajectory.prompt_ids, 12, acceptance="greedy")
        assert gen.token_ids == trajectory.tokens[:12]
        assert [s.accept for s in score.per_step if s.prompt == k] == gen.accept_lengths


def test_oracle_ranks_follow_a_draft_vocabulary(tiny):
    """Heads that rank only a draft vocabulary: ranks are positions in that ranking, as the drafter's."""
    from entmtp_vllm.heads.drafting import TreeDrafter

    model, drafter = tiny
    vocab = torch.tensor([i for i in range(24) if i % 5 != 3])
    sliced = TreeDrafter(drafter.heads, model.get_input_embeddings().weight, model.get_output_embeddings().weight,
                         draft_vocab=vocab)
    calibration = calibrate(model, sliced, random_prompts(3))
    tree = {(0,), (1,), (0, 0)}
    candidates = next_children(tree, 3)
    one = RankScorer(calibration).score(tree, candidates, detail=True)
    assert one.per_step == ForwardScorer(model, sliced, calibration).score(tree, candidates, detail=True).per_step
    assert any(one.gains.values())
    # a true token outside the draft vocabulary can never be drafted: it has no rank
    for trajectory in calibration.trajectories:
        for i, row in enumerate(trajectory.ranks):
            for d, rank in enumerate(row, 1):
                if i + d < len(trajectory.tokens) and trajectory.tokens[i + d] % 5 == 3:
                    assert rank == UNRANKED


L = LOOKUP
HYBRID = {(L,), (L, L), (L, 0), (0,), (1,), (0, 0)}


def test_hybrid_one_rollout_equals_a_separate_forward_per_candidate(tiny, calibration):
    """Lookup nodes (copies of the context) next to and above head nodes: the rank scorer's
    what-if per step equals a separate engine step with the real lookup drafter, for every candidate."""
    model, drafter = tiny
    candidates = next_children(HYBRID, 3, lookup=3)
    assert (L, L, L) in candidates and (L, L, 0) in candidates and (L, 1) in candidates
    one = RankScorer(calibration).score(HYBRID, candidates, detail=True)
    copied = 0
    for step in one.per_step:
        trajectory = calibration.trajectories[step.prompt]
        assert separate_accept_length(model, drafter, trajectory, step.position, HYBRID) == step.accept
        heads_only = {p for p in HYBRID if L not in p}
        copied += step.accept > separate_accept_length(model, drafter, trajectory, step.position, heads_only)
        for candidate in candidates:
            alone = separate_accept_length(model, drafter, trajectory, step.position, HYBRID | {candidate})
            assert alone == step.what_if[candidate], (step, candidate)
    assert copied > 0, "no step accepted more thanks to the lookup nodes: a vacuous check"
    assert one.gains[(L, L, L)] > 0


def test_hybrid_tree_rollout_equals_the_engines_greedy_run(tiny, calibration):
    """A hybrid tree's own teacher-forced rollout is the reference engine's greedy run, step by step."""
    model, drafter = tiny
    tree = Tree.from_choices(sorted(HYBRID | {(L, L, L)}))
    score = RankScorer(calibration).evaluate(tree)
    per_step = RankScorer(calibration).score(tree.paths, [], detail=True).per_step
    engine = ReferenceEngine(model, None, drafter, TopologyBank([tree], ["hybrid"]))
    for k, trajectory in enumerate(calibration.trajectories):
        gen = engine.generate(trajectory.prompt_ids, calibration.max_tokens, acceptance="greedy")
        assert gen.token_ids == trajectory.tokens[: calibration.max_tokens]
        assert [s.accept for s in per_step if s.prompt == k] == gen.accept_lengths
    heads_only = RankScorer(calibration).score({p for p in HYBRID if L not in p})
    assert score.tau > heads_only.tau  # the copies add accepted tokens on this model


def test_lookup_hits_count_the_leading_correct_copies():
    lookup = PromptLookup(LookupConfig(min_ngram=1, max_ngram=2))
    # prompt [5, 6, 7], then 5 6 7 5 6 9: at root 5 (i=0) the copy of "5 -> 6 7 5" is right for 3 tokens
    hits = lookup_hits([5, 6, 7], [5, 6, 7, 5, 6, 9], lookup, 3)
    assert hits[0] == 3
    assert hits[3] == 1  # root 5 again, "6 7 5" proposed; the truth is 6 9
    assert hits[-1] == 0  # nothing after the end of the trajectory to compare with
    assert lookup_hits([1], [2, 3], lookup, 2) == [0, 0]  # no earlier occurrence: no copy
