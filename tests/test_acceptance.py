"""Tests for entmtp_vllm/acceptance.py: greedy, typical and lossless acceptance."""

from __future__ import annotations

import math

import pytest
import torch
from _tree_strategies import prefix_closed_choices
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from entmtp_vllm import acceptance
from entmtp_vllm.acceptance import (
    ACCEPT_MODES,
    AcceptResult,
    _residual,
    accept,
    accept_greedy,
    accept_greedy_host,
    greedy_step,
    accept_lossless,
    accept_drawn,
    accept_typical,
)
from entmtp_vllm.config import SamplingParams, TypicalConfig
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.sampling import processed_probs
from entmtp_vllm.topology import TreeBuffers, build_tree_buffers
from entmtp_vllm.tree import Tree

# ---------------------------------------------------------------------------
# Hand-built cases
# ---------------------------------------------------------------------------

# Nodes: 0 root; 1 (0,), 2 (1,); 3 (0,0), 4 (1,0); 5 (1,0,0).
# Retrieve rows: [0, 1, 3, -1] and [0, 2, 4, 5].
UNEVEN = build_tree_buffers(Tree.from_choices([[0], [1], [0, 0], [1, 0], [1, 0, 0]]))


def peaked_logits(argmaxes: list[int], vocab: int = 8) -> torch.Tensor:
    """One row per node whose argmax is the given token (other tokens get smaller, distinct logits)."""
    logits = -torch.arange(vocab, dtype=torch.float32).repeat(len(argmaxes), 1) * 0.1
    for row, token in enumerate(argmaxes):
        logits[row, token] = 5.0
    return logits


def test_uneven_tree_layout() -> None:
    assert UNEVEN.retrieve_indices.tolist() == [[0, 1, 3, -1], [0, 2, 4, 5]]


def test_greedy_prefers_the_deeper_match_among_duplicated_siblings() -> None:
    # Both depth-1 drafts are token 2 (= root argmax); the first branch matches 2 drafts,
    # the second (same first token) matches 3: the longest wins.
    tokens = torch.tensor([7, 2, 2, 3, 3, 4])
    logits = peaked_logits([2, 3, 3, 0, 4, 6])
    result = accept_greedy(UNEVEN, tokens, logits)
    assert result.accepted == [0, 2, 4, 5]
    assert result.bonus_token == 6
    assert result.accept_length == 4
    assert result.emitted(tokens) == [2, 3, 4, 6]


def test_greedy_reads_a_precomputed_argmax_when_given_one() -> None:
    """The runner passes one argmax over the whole batch's rows: the rule reads it, and a
    different target gives the path that target implies (so it is not recomputed)."""
    tokens = torch.tensor([7, 2, 2, 3, 3, 4])
    logits = peaked_logits([2, 3, 3, 0, 4, 6])
    own = accept_greedy(UNEVEN, tokens, logits)
    given = accept_greedy(UNEVEN, tokens, logits, target=logits.argmax(-1))
    assert (given.accepted, given.bonus_token) == (own.accepted, own.bonus_token)
    other = accept_greedy(UNEVEN, tokens, logits, target=torch.tensor([2, 3, 0, 0, 0, 0]))
    assert other.accepted == [0, 1, 3] and other.bonus_token == 0


def _host_walk(buffers, tokens, argmaxes, offset: int = 0):
    """`accept_greedy_host` over one `greedy_step` (compared as on a GPU) of a step whose rows
    `offset:` are the tree's."""
    logits = peaked_logits([0] * offset + list(argmaxes), vocab=max(8, max(argmaxes) + 1))
    step = greedy_step(logits, [(offset, buffers, tokens)], on_device=True)
    assert step.targets[offset:] == list(argmaxes)
    return accept_greedy_host(buffers, step.node_ok[0], step.targets[offset:])


def test_greedy_host_walk_on_the_hand_built_tree() -> None:
    tokens = [7, 2, 2, 3, 3, 4]
    result = _host_walk(UNEVEN, tokens, [2, 3, 3, 0, 4, 6])
    assert (result.accepted, result.bonus_token) == ([0, 2, 4, 5], 6)
    tie = _host_walk(UNEVEN, [7, 2, 2, 0, 0, 1], [2, 0, 0, 0, 0, 0], offset=3)  # both rows match 2: first
    assert (tie.accepted, tie.bonus_token) == ([0, 1, 3], 0)


@settings(max_examples=200, deadline=None)
@given(choices=prefix_closed_choices(max_nodes=20, max_rank=3, max_depth=5, lookup=True), data=st.data())
def test_greedy_host_walk_equals_the_tensor_rule(choices: list[list[int]], data) -> None:
    """The runner's walk (one `greedy_step` for the whole step: argmaxes and node matches on the
    device, read back once) keeps the path and bonus of `accept_greedy` on any tree, duplicated
    siblings and ties included (tokens from 3 ids), for two trees side by side in one step."""
    buffers = build_tree_buffers(Tree.from_choices(choices))
    n = buffers.num_nodes
    trees, expected, argmaxes = [], [], []
    for _ in range(2):
        tokens = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        rows = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        expected.append(accept_greedy(buffers, torch.tensor(tokens), peaked_logits(rows, vocab=3)))
        trees.append((len(argmaxes), buffers, tokens))
        argmaxes += rows
    for on_device in (True, False):  # compared as a GPU step does (tensors), and in Python
        step = greedy_step(peaked_logits(argmaxes, vocab=3), trees, on_device=on_device)
        for (first, _, _), node_ok, want in zip(trees, step.node_ok, expected):
            got = accept_greedy_host(buffers, node_ok, step.targets[first:first + n])
            assert (got.accepted, got.bonus_token) == (want.accepted, want.bonus_token)


def test_greedy_ties_go_to_the_first_row() -> None:
    # Both branches match exactly two drafts: the first retrieve row wins.
    tokens = torch.tensor([7, 2, 2, 3, 3, 5])
    logits = peaked_logits([2, 3, 3, 1, 1, 0])
    result = accept_greedy(UNEVEN, tokens, logits)
    assert result.accepted == [0, 1, 3]
    assert result.bonus_token == 1


def test_greedy_shallow_match_beats_deeper_mismatch() -> None:
    # The second branch is deeper but fails at depth 2; the first matches 2 drafts.
    tokens = torch.tensor([7, 2, 1, 3, 3, 4])
    logits = peaked_logits([2, 3, 3, 0, 4, 6])
    assert accept_greedy(UNEVEN, tokens, logits).accepted == [0, 1, 3]


def test_greedy_padding_never_counts_as_accepted() -> None:
    # The root's own token equals the root argmax, so a -1 pad read as node 0 would "match".
    tokens = torch.tensor([2, 2, 5, 3, 0, 0])
    logits = peaked_logits([2, 3, 1, 1, 1, 1])
    result = accept_greedy(UNEVEN, tokens, logits)
    assert result.accepted == [0, 1, 3]
    assert result.bonus_token == 1


def test_greedy_rejects_everything() -> None:
    tokens = torch.tensor([7, 0, 1, 2, 3, 4])
    logits = peaked_logits([5, 3, 3, 0, 4, 6])
    result = accept_greedy(UNEVEN, tokens, logits)
    assert result.accepted == [0]
    assert result.emitted(tokens) == [5]


def test_emitted_reads_tensors_and_lists() -> None:
    result = AcceptResult(accepted=[0, 2], bonus_token=9)
    assert result.emitted([4, 5, 6]) == [6, 9]
    assert result.emitted(torch.tensor([4, 5, 6])) == [6, 9]


def test_shape_checks() -> None:
    with pytest.raises(ValueError, match="draft_tokens"):
        accept_greedy(UNEVEN, torch.zeros(5, dtype=torch.long), torch.zeros(6, 8))
    with pytest.raises(ValueError, match="logits"):
        accept_greedy(UNEVEN, torch.zeros(6, dtype=torch.long), torch.zeros(5, 8))


# ---------------------------------------------------------------------------
# Typical acceptance
# ---------------------------------------------------------------------------

# Nodes: 0 root; 1 (0,), 2 (1,); 3 (0,0), 4 (1,0). Rows [0, 1, 3] and [0, 2, 4].
FORK = build_tree_buffers(Tree.from_spec("full:2,1"))

# Root row: flat enough that alpha * exp(-H) (about 0.046) is below epsilon = 0.09.
FLAT = [0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05]
# Node 1's row: peaked enough that epsilon = 0.09 is the threshold.
PEAKED = [0.8, 0.1, 0.04, 0.02, 0.01, 0.01, 0.01, 0.01]
# Node 2's row: every draft of node 4 below is rejected (token 7 has 0.01).
OTHER = [0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.93]


def medusa_threshold(probs: list[float], epsilon: float = 0.09, alpha: float = 0.3) -> float:
    """min(epsilon, alpha * exp(-H)), H = -sum p log(p + 1e-5), by hand."""
    h = -sum(p * math.log(p + 1e-5) for p in probs)
    return min(epsilon, alpha * math.exp(-h))


def fork_logits() -> torch.Tensor:
    rows = [FLAT, PEAKED, OTHER, PEAKED, PEAKED]
    return torch.tensor(rows, dtype=torch.float64).log().float()


def test_hand_worked_thresholds() -> None:
    assert medusa_threshold(FLAT) == pytest.approx(0.0459, abs=5e-4)
    assert medusa_threshold(PEAKED) == 0.09
    # Token 5 of FLAT (0.05) passes only thanks to the entropy term; token 2 of PEAKED
    # (0.04) fails and token 1 (0.1) passes against epsilon.
    assert FLAT[5] > medusa_threshold(FLAT) and FLAT[5] < 0.09
    assert PEAKED[2] < medusa_threshold(PEAKED) < PEAKED[1]


TOP1 = SamplingParams(temperature=1.0, top_k=1)  # bonus = argmax, so results are deterministic


def test_typical_accepts_by_entropy_scaled_threshold() -> None:
    # Node 1 = token 5 (0.05 under FLAT: accepted), node 3 = token 1 (0.1 under PEAKED: accepted),
    # node 2 = token 0 (0.3: accepted), node 4 = token 0 (0.01 under OTHER: rejected).
    tokens = torch.tensor([7, 5, 0, 1, 0])
    result = accept_typical(FORK, tokens, fork_logits(), TOP1, TypicalConfig())
    assert result.accepted == [0, 1, 3]
    assert result.bonus_token == 0  # argmax of PEAKED


def test_typical_rejects_below_epsilon() -> None:
    # Node 1 = token 6 (0.05 under FLAT): accepted; node 3 = token 2 (0.04 under PEAKED): rejected;
    # node 2 = token 1 (0.2): accepted; node 4 = token 0 (0.01 under OTHER): rejected.
    tokens = torch.tensor([7, 6, 1, 2, 0])
    result = accept_typical(FORK, tokens, fork_logits(), TOP1, TypicalConfig())
    # Both rows accept one draft; Medusa keeps the more likely one: node 2 (0.2) over node 1 (0.05).
    assert result.accepted == [0, 2]
    assert result.bonus_token == 7  # argmax of OTHER


def test_typical_exact_likelihood_tie_goes_to_the_first_row() -> None:
    tokens = torch.tensor([7, 3, 4, 2, 0])  # 0.1 and 0.1 under FLAT, both children rejected
    result = accept_typical(FORK, tokens, fork_logits(), TOP1, TypicalConfig())
    assert result.accepted == [0, 1]


def test_typical_nothing_accepted() -> None:
    tokens = torch.tensor([7, 5, 6, 1, 0])
    strict = TypicalConfig(epsilon=0.5, alpha=10.0)  # threshold 0.5 everywhere
    result = accept_typical(FORK, tokens, fork_logits(), TOP1, strict)
    assert result.accepted == [0]
    assert result.bonus_token == 0  # argmax of FLAT


def test_typical_ignores_top_k_in_the_criterion() -> None:
    # top_k=1 would zero token 5 of FLAT, but the criterion uses softmax(logits / T) only.
    tokens = torch.tensor([7, 5, 0, 1, 0])
    assert accept_typical(FORK, tokens, fork_logits(), TOP1).accepted == [0, 1, 3]


def test_typical_temperature_enters_the_criterion() -> None:
    # At T = 0.25 FLAT sharpens: token 5 falls far below any threshold.
    tokens = torch.tensor([7, 5, 0, 1, 0])
    cold = SamplingParams(temperature=0.25, top_k=1)
    assert accept_typical(FORK, tokens, fork_logits(), cold).accepted == [0, 2]


def random_case(seed: int, buffers: TreeBuffers, vocab: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Random drafts and logits, with drafts often equal to their parent's argmax."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(buffers.num_nodes, vocab, generator=g) * 2
    tokens = torch.randint(0, vocab, (buffers.num_nodes,), generator=g)
    argmax = logits.argmax(dim=-1)[buffers.parents.clamp(min=0)]
    follow = torch.rand(buffers.num_nodes, generator=g) < 0.7
    return torch.where(follow, argmax, tokens), logits


@pytest.mark.parametrize("spec", ["full:3,2", "full:2^3"])
def test_typical_and_lossless_equal_greedy_at_temperature_zero(spec: str) -> None:
    buffers = build_tree_buffers(Tree.from_spec(spec))
    greedy = SamplingParams()
    for seed in range(50):
        tokens, logits = random_case(seed, buffers)
        expected = accept_greedy(buffers, tokens, logits)
        assert accept_typical(buffers, tokens, logits, greedy) == expected
        assert accept_lossless(buffers, tokens, logits, greedy) == expected


def test_lossless_equals_greedy_at_temperature_zero_with_duplicated_siblings() -> None:
    tokens = torch.tensor([7, 2, 2, 3, 3, 4])
    logits = peaked_logits([2, 3, 3, 0, 4, 6])
    assert accept_lossless(UNEVEN, tokens, logits, SamplingParams()).accepted == [0, 2, 4, 5]


def distinct_case(seed: int, buffers: TreeBuffers, vocab: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Random logits; the child of rank r drafts the r-th token of its parent's noisy ranking,
    so siblings are distinct and rank 0 is often the argmax."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(buffers.num_nodes, vocab, generator=g) * 2
    noisy = logits + torch.randn(buffers.num_nodes, vocab, generator=g)
    order = noisy.argsort(dim=-1, descending=True)
    tokens = order[buffers.parents.clamp(min=0), buffers.ranks]
    return tokens, logits


def test_lossless_with_top_k_one_walks_the_argmax_chain() -> None:
    # top_k = 1 makes every processed row one-hot: the draws are deterministic and, with
    # distinct siblings, the walk is the greedy path.
    buffers = build_tree_buffers(Tree.from_spec("full:3,2"))
    g = torch.Generator().manual_seed(0)
    lengths = set()
    for seed in range(30):
        tokens, logits = distinct_case(seed, buffers)
        result = accept_lossless(buffers, tokens, logits, TOP1, g)
        assert result == accept_greedy(buffers, tokens, logits)
        lengths.add(result.accept_length)
    assert lengths == {1, 2, 3}


def test_lossless_is_reproducible_with_a_seeded_generator() -> None:
    buffers = build_tree_buffers(Tree.from_spec("full:3,2"))
    tokens, logits = random_case(1, buffers)
    params = SamplingParams(temperature=1.0)
    runs = [
        [accept_lossless(buffers, tokens, logits, params, gen) for _ in range(20)]
        for gen in (torch.Generator().manual_seed(5), torch.Generator().manual_seed(5))
    ]
    assert runs[0] == runs[1]


def test_residual_zeroes_the_rejected_token_and_renormalises() -> None:
    p = torch.tensor([0.5, 0.3, 0.2])
    assert torch.allclose(_residual(p, 0, None), torch.tensor([0.0, 0.6, 0.4]))
    q = torch.tensor([0.2, 0.6, 0.2])
    assert torch.allclose(_residual(p, 1, q), torch.tensor([1.0, 0.0, 0.0]))


def test_residual_falls_back_to_p_when_nothing_is_left() -> None:
    p = torch.tensor([0.0, 1.0, 0.0])
    assert torch.equal(_residual(p, 1, None), p)
    q = torch.tensor([0.25, 0.5, 0.25])
    assert torch.equal(_residual(q, 0, q.clone()), q)


def test_lossless_rejects_a_draft_outside_the_target_support_and_its_duplicate() -> None:
    # top_k = 2 at the root keeps tokens 0 and 1; both depth-1 drafts are token 4 (p = 0),
    # so the bonus is always drawn from the root's processed distribution.
    tree = build_tree_buffers(Tree.from_spec("full:2"))
    tokens = torch.tensor([0, 4, 4])
    logits = torch.tensor([[2.0, 1.0, 0.0, 0.0, 0.0]] * 3)
    params = SamplingParams(temperature=1.0, top_k=2)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        result = accept_lossless(tree, tokens, logits, params, g)
        assert result.accepted == [0]
        assert result.bonus_token in (0, 1)


def test_lossless_refuses_a_token_its_draft_could_not_have_drawn() -> None:
    tree = build_tree_buffers(Tree.from_spec("full:1"))
    q = torch.tensor([[0.5, 0.5, 0.0]] * 2)
    with pytest.raises(ValueError, match="probability 0"):
        accept_lossless(tree, torch.tensor([0, 2]), torch.zeros(2, 3), SamplingParams(temperature=1.0), None, q)


# ---------------------------------------------------------------------------
# Dispatcher
# ---------------------------------------------------------------------------


def test_dispatcher_routes_every_mode() -> None:
    tokens = torch.tensor([7, 2, 2, 3, 3, 4])
    logits = peaked_logits([2, 3, 3, 0, 4, 6])
    for mode in ACCEPT_MODES:
        assert accept(mode, UNEVEN, tokens, logits).accepted == [0, 2, 4, 5]
    hot = SamplingParams(temperature=1.0, top_k=1)
    g = torch.Generator().manual_seed(0)
    assert accept("lossless", UNEVEN, tokens, logits, hot, generator=g).accepted == [0, 1, 3]


def test_dispatcher_rejects_unknown_modes() -> None:
    with pytest.raises(EntMTPError, match="greedy, typical, lossless"):
        accept("speculative", UNEVEN, torch.zeros(6, dtype=torch.long), torch.zeros(6, 8))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Lossless: statistical tests
# ---------------------------------------------------------------------------

VOCAB = 6
DRAWS = 10_000
P_VALUE = 1e-3
STAT_TREE = build_tree_buffers(Tree.from_spec("full:3,2"))
# A hybrid tree: a 2-token "lookup" chain (deterministic copies, which may repeat a top-k
# sibling) beside and above top-k head nodes.
HYBRID_TREE = build_tree_buffers(Tree.from_choices([[-1], [-1, -1], [-1, 0], [0], [1], [0, 0], [1, 0]]))


class ToyModels:
    """A toy target and draft: random logits for every prefix of up to 3 tokens.

    A prefix is the tokens emitted after a fixed context; it is stored at row
    `offsets[len] + (its tokens read as a base-V number)`. The draft's logits are the
    target's plus noise, so drafts are often, not always, accepted.
    """

    def __init__(self, seed: int, max_len: int = 3) -> None:
        g = torch.Generator().manual_seed(seed)
        self.offsets = [sum(VOCAB**k for k in range(length)) for length in range(max_len + 2)]
        rows = self.offsets[-1]
        self.target = torch.randn(rows, VOCAB, generator=g) * 1.5
        self.draft_probs = (self.target + torch.randn(rows, VOCAB, generator=g)).softmax(dim=-1)

    def target_probs(self, prefix: tuple[int, ...], params: SamplingParams) -> torch.Tensor:
        value = 0
        for token in prefix:
            value = value * VOCAB + token
        return processed_probs(self.target[self.offsets[len(prefix)] + value].double(), params)


def draft_step(
    models: ToyModels, prefix: tuple[int, ...], drafting: str, draws: int, g: torch.Generator, tree=STAT_TREE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Draft `draws` independent trees after `prefix` (its last token is the root).

    drafting: "topk" (node of rank r = r-th most likely draft token, q one-hot), "bottomk" (the
    r-th least likely, q one-hot),
    "iid" (siblings drawn independently from q, SpecInfer), or "unique" (siblings drawn
    without replacement: each from q with earlier siblings removed, renormalised).
    Lookup nodes (rank -1) copy a token that is a fixed function of the prefix (q one-hot).
    Returns draft tokens [draws, N], target logits [draws, N, V], draft_probs or None.
    """
    n = tree.num_nodes
    parents, depths, ranks = tree.parents.tolist(), tree.depths.tolist(), tree.ranks.tolist()
    tokens = torch.zeros(draws, n, dtype=torch.long)
    tokens[:, 0] = prefix[-1] if prefix else 0
    value = torch.zeros(draws, n, dtype=torch.long)  # base-V value of each node's full prefix
    for token in prefix:
        value[:, 0] = value[:, 0] * VOCAB + token
    probs = torch.zeros(draws, n, VOCAB)
    for i in range(1, n):
        parent = parents[i]
        q = models.draft_probs[models.offsets[len(prefix) + depths[parent]] + value[:, parent]]
        if ranks[i] == -1:  # a "prompt lookup" copy
            token = (value[:, parent] * 5 + 2) % VOCAB
        elif drafting == "topk":
            token = q.argsort(dim=-1, descending=True, stable=True)[:, ranks[i]]
        elif drafting == "bottomk":  # the least likely tokens: drafts that are mostly wrong
            token = q.argsort(dim=-1, descending=False, stable=True)[:, ranks[i]]
        else:
            if drafting == "unique":
                for sibling in tree.children[parent][: ranks[i]]:
                    q = q.scatter(1, tokens[:, sibling : sibling + 1], 0.0)
                q = q / q.sum(dim=-1, keepdim=True)
            token = torch.multinomial(q, 1, generator=g).squeeze(1)
        tokens[:, i] = token
        probs[:, i] = q
        value[:, i] = value[:, parent] * VOCAB + token
    rows = torch.tensor([models.offsets[len(prefix) + d] for d in depths]) + value
    return tokens, models.target[rows], None if drafting == "topk" else probs


def exponential_race(probs: torch.Tensor, g: torch.Generator) -> int:
    """One draw from `probs` as vLLM's sampler draws it: argmax(p / q), q one exponential per token."""
    return int((probs / torch.empty_like(probs).exponential_(generator=g)).argmax())


def _walk(tree, tokens: torch.Tensor, logits: torch.Tensor, params: SamplingParams, g: torch.Generator,
          probs: torch.Tensor | None, rule: str):
    """One lossless step: rejection sampling (`accept_lossless`), or (top-k drafts only) the
    draft-independent walk ("token": one exponential race per node the walk stands on;
    "shared-noise": the negative control, one noise vector for the whole step)."""
    if rule == "rejection":
        return accept_lossless(tree, tokens, logits, params, g, probs)
    rows = processed_probs(logits.double(), params)
    if rule == "token":
        return accept_drawn(tree, tokens.tolist(), lambda node: exponential_race(rows[node], g))
    noise = torch.empty(rows.shape[1], dtype=rows.dtype).exponential_(generator=g)
    return accept_drawn(tree, tokens.tolist(), lambda node: int((rows[node] / noise).argmax()))


def first_two_tokens(
    models: ToyModels, params: SamplingParams, drafting: str, seed: int, draws: int = DRAWS, tree=STAT_TREE,
    rule: str = "rejection",
) -> torch.Tensor:
    """The first two tokens emitted by `draws` independent runs of lossless decoding: [draws, 2].

    When a step emits only its bonus token, the second token is the first one emitted
    by the next step, whose tree is drafted after that bonus token.
    """
    g = torch.Generator().manual_seed(seed)
    out: list[list[int]] = []
    tokens, logits, probs = draft_step(models, (), drafting, draws, g, tree)
    for m in range(draws):
        result = _walk(tree, tokens[m], logits[m], params, g, None if probs is None else probs[m], rule)
        out.append(result.emitted(tokens[m])[:2])
    for first in range(VOCAB):
        waiting = [m for m, emitted in enumerate(out) if emitted == [first]]
        if not waiting:
            continue
        tokens, logits, probs = draft_step(models, (first,), drafting, len(waiting), g, tree)
        for j, m in enumerate(waiting):
            result = _walk(tree, tokens[j], logits[j], params, g, None if probs is None else probs[j], rule)
            out[m].append(result.emitted(tokens[j])[0])
    return torch.tensor(out)


def chi_square_pvalue(samples: torch.Tensor, expected: torch.Tensor) -> float:
    """Pearson chi-square p-value of integer samples against category probabilities.

    Categories with probability 0 must never occur. Categories expected fewer than 5
    times are pooled (into the smallest other category if the pool is itself below 5).
    """
    counts = torch.bincount(samples, minlength=len(expected)).double()
    assert counts[expected == 0].sum() == 0, "sampled a token the target gives probability 0"
    n = counts.sum()
    exp = expected.double() * n
    big = exp >= 5
    small = ~big & (expected > 0)
    obs_bins, exp_bins = counts[big].tolist(), exp[big].tolist()
    pooled_obs, pooled_exp = float(counts[small].sum()), float(exp[small].sum())
    if pooled_exp >= 5:
        obs_bins.append(pooled_obs)
        exp_bins.append(pooled_exp)
    elif pooled_exp > 0:
        smallest = min(range(len(exp_bins)), key=exp_bins.__getitem__)
        obs_bins[smallest] += pooled_obs
        exp_bins[smallest] += pooled_exp
    scale = sum(obs_bins) / sum(exp_bins)
    return float(chisquare(obs_bins, [e * scale for e in exp_bins]).pvalue)


def target_first_and_pair(models: ToyModels, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """p(a) and p(a, b) = p(a) p(b | a) over the first two tokens, from the target alone."""
    first = models.target_probs((), params)
    pair = torch.stack([first[a] * models.target_probs((a,), params) for a in range(VOCAB)])
    return first, pair.flatten()


LOSSLESS_CASES = [
    pytest.param(SamplingParams(temperature=1.0), "topk", id="T1-topk-drafts"),
    pytest.param(SamplingParams(temperature=1.0), "iid", id="T1-iid-sampled-drafts"),
    pytest.param(SamplingParams(temperature=0.8, top_k=3), "topk", id="topk3-topk-drafts"),
    pytest.param(SamplingParams(temperature=1.0, top_k=4), "unique", id="topk4-unique-sampled-drafts"),
    pytest.param(SamplingParams(temperature=1.0, top_p=0.8), "iid", id="topp0.8-iid-sampled-drafts"),
]


@pytest.mark.parametrize(("params", "drafting"), LOSSLESS_CASES)
def test_lossless_first_two_tokens_follow_the_target(params: SamplingParams, drafting: str) -> None:
    """The emitted stream must be distributed as sampling the processed target token by token.

    First token: ~ p(. | context). Pair: P(a, b) = p(a | context) * p(b | context, a).
    The pair is taken over the first two emitted tokens of the whole decode, not of
    one step: when the step emits only its bonus, b is the first token of the next
    step (a new tree drafted after a). Restricting to steps that emit two tokens would
    be wrong, because how many tokens a step emits depends on which token came first
    (drafted tokens are more likely to be accepted), so conditioning on it skews a.
    Sampling b from p(. | a) directly would assume what is being tested; running the
    next step keeps the check end to end. Target rows are random per prefix; draft
    distributions are the target's plus noise. Seeds are fixed: the test is deterministic.
    """
    models = ToyModels(seed=11)
    samples = first_two_tokens(models, params, drafting, seed=2024)
    first, pair = target_first_and_pair(models, params)
    assert chi_square_pvalue(samples[:, 0], first) > P_VALUE
    assert chi_square_pvalue(samples[:, 0] * VOCAB + samples[:, 1], pair) > P_VALUE


def test_lossless_hybrid_tree_follows_the_target() -> None:
    """Lookup copies are point masses like top-k drafts: a hybrid tree stays lossless, also
    when a copy repeats a sibling's token."""
    models = ToyModels(seed=11)
    params = SamplingParams(temperature=1.0)
    samples = first_two_tokens(models, params, "topk", seed=7, tree=HYBRID_TREE)
    first, pair = target_first_and_pair(models, params)
    assert chi_square_pvalue(samples[:, 0], first) > P_VALUE
    assert chi_square_pvalue(samples[:, 0] * VOCAB + samples[:, 1], pair) > P_VALUE


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=3),
                                    SamplingParams(temperature=1.3, top_p=0.8)], ids=["T1", "topk3", "topp0.8"])
@pytest.mark.parametrize("tree", [STAT_TREE, HYBRID_TREE], ids=["full-3-2", "hybrid"])
def test_token_walk_follows_the_target(params: SamplingParams, tree) -> None:
    """The draft-independent walk (what the vLLM runner runs for sampled requests) is lossless:
    the same end-to-end check as rejection sampling, with top-k (one-hot) drafts and lookup copies."""
    models = ToyModels(seed=11)
    samples = first_two_tokens(models, params, "topk", seed=99, tree=tree, rule="token")
    first, pair = target_first_and_pair(models, params)
    assert chi_square_pvalue(samples[:, 0], first) > P_VALUE
    assert chi_square_pvalue(samples[:, 0] * VOCAB + samples[:, 1], pair) > P_VALUE


def test_negative_control_detects_one_noise_vector_reused_across_a_step() -> None:
    """The same statistic flags a walk that draws one noise vector per step and reuses it at every
    node (one draw a step instead of one per emitted token): each token alone still follows its
    row, but the tokens of a step are coupled, which the pair distribution shows."""
    params = SamplingParams(temperature=1.0)
    models = ToyModels(seed=11)
    samples = first_two_tokens(models, params, "topk", seed=99, draws=DRAWS // 5, rule="shared-noise")
    first, pair = target_first_and_pair(models, params)
    assert chi_square_pvalue(samples[:, 0] * VOCAB + samples[:, 1], pair) < P_VALUE


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_k=3),
                                    SamplingParams(temperature=1.3, top_p=0.8)], ids=["T1", "topk3", "topp0.8"])
def test_token_walk_text_does_not_depend_on_the_drafts(params: SamplingParams) -> None:
    """The same generator seed gives the same three tokens whatever is drafted: without a tree
    (one draw per token, as decoding without speculation), with top-k trees of every shape, with
    drafts of the least likely tokens. The tokens emitted per step differ; the text does not."""
    models = ToyModels(seed=11, max_len=5)
    trees = {"none": None, "full-3-2": STAT_TREE, "hybrid": HYBRID_TREE, "uneven": UNEVEN}
    lengths = set()
    for seed in range(200):
        texts = {}
        for name, tree in trees.items():
            for wrong in (False, True) if tree is not None else (False,):
                g = torch.Generator().manual_seed(seed)
                text: list[int] = []
                while len(text) < 3:
                    if tree is None:
                        text.append(exponential_race(models.target_probs(tuple(text), params), g))
                        continue
                    tokens, logits, _ = draft_step(models, tuple(text), "bottomk" if wrong else "topk", 1, g, tree)
                    result = _walk(tree, tokens[0], logits[0], params, g, None, "token")
                    emitted = result.emitted(tokens[0])
                    lengths.add(len(emitted))
                    text.extend(emitted)
                texts[(name, wrong)] = text[:3]
        assert len(set(map(tuple, texts.values()))) == 1, (seed, texts)
    assert lengths >= {1, 2, 3}


def test_negative_control_detects_a_sampler_without_residuals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same statistic must flag a biased sampler: here a rejected draft leaves p
    unchanged (accept with probability p(t), no residual), which over-weights drafted tokens.
    A fifth of the draws is used: the bias is large, and fewer draws only make it harder to see."""
    monkeypatch.setattr(acceptance, "_residual", lambda p, token, q: p)
    params = SamplingParams(temperature=1.0)
    models = ToyModels(seed=11)
    samples = first_two_tokens(models, params, "topk", seed=2024, draws=DRAWS // 5)
    first, pair = target_first_and_pair(models, params)
    assert chi_square_pvalue(samples[:, 0], first) < P_VALUE
    assert chi_square_pvalue(samples[:, 0] * VOCAB + samples[:, 1], pair) < P_VALUE
