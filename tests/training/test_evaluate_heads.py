"""Tests for entmtp_vllm/training/evaluate_heads.py."""

from __future__ import annotations

import torch

from entmtp_vllm.heads import HydraHeads
from entmtp_vllm.heads.drafting import TreeDrafter
from entmtp_vllm.topology import build_tree_buffers
from entmtp_vllm.training.evaluate_heads import greedy_accept_lengths, record_starts, walk_accept_length
from entmtp_vllm.training.teacher_cache import CacheSplit
from entmtp_vllm.tree import Tree

H, V = 8, 30


def split_with(tokens: list[int], hidden: torch.Tensor, end: int) -> CacheSplit:
    n = len(tokens)
    return CacheSplit(hidden=hidden.half(), tokens=torch.tensor(tokens), topk_ids=torch.zeros(n, 1, dtype=torch.long),
                      topk_logp=torch.zeros(n, 1), record_end=torch.full((n,), end), num_records=1)


def random_drafter() -> tuple[TreeDrafter, torch.Tensor]:
    """Hydra heads with random weights, and 6 hidden states exact in fp16."""
    torch.manual_seed(0)
    heads = HydraHeads(H, V, num_heads=3)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
    embed = torch.randn(V, H)
    return TreeDrafter(heads, embed, embed), torch.randn(6, H).half().float()


def test_accept_length_follows_the_greedy_continuation() -> None:
    drafter, hidden = random_drafter()
    chain = build_tree_buffers(Tree.from_spec("chain:3"))
    drafted = drafter.begin(hidden[0], 4).draft(chain).tokens.tolist()  # [4, a, b, c]
    tokens = drafted + [0, 0]
    assert greedy_accept_lengths(drafter, split_with(tokens, hidden, 6), chain, torch.tensor([0])).tolist() == [4.0]
    wrong = list(tokens)
    wrong[2] = (wrong[2] + 1) % V
    assert greedy_accept_lengths(drafter, split_with(wrong, hidden, 6), chain, torch.tensor([0])).tolist() == [2.0]
    # the record ends after row 1: only one drafted token can be checked
    assert greedy_accept_lengths(drafter, split_with(tokens, hidden, 2), chain, torch.tensor([0])).tolist() == [2.0]
    # a wider tree containing the chain accepts at least as much
    tree = build_tree_buffers(Tree.from_spec("full:2^3"))
    assert greedy_accept_lengths(drafter, split_with(tokens, hidden, 6), tree, torch.tensor([0])).tolist() == [4.0]


def test_replayed_tau_steps_over_the_accepted_runs() -> None:
    """A record whose first step accepts the whole chain and whose next steps accept nothing:
    after the prefill's token, the replay takes 1 + 1 steps for the 5 others (the last row's
    token ends the answer: nothing is drafted from it); rows 1-3, which the first step covers,
    are never drafted from."""
    drafter, hidden = random_drafter()
    chain = build_tree_buffers(Tree.from_spec("chain:3"))
    drafted = drafter.begin(hidden[0], 4).draft(chain).tokens.tolist()
    tokens = drafted + [0, 0]
    for row in (4, 5):  # make sure the last two rows' drafts miss their next token
        guess = drafter.begin(hidden[row], tokens[row]).draft(chain).tokens.tolist()
        if row + 1 < 6 and guess[1] == tokens[row + 1]:
            tokens[row + 1] = (tokens[row + 1] + 1) % V
    split = split_with(tokens, hidden, 6)
    assert record_starts(split) == [0]
    assert walk_accept_length(drafter, split, chain, [0]) == (5, 2)
    assert walk_accept_length(drafter, split, chain, [4]) == (1, 1)


def test_record_starts_of_a_two_record_split() -> None:
    n = 7
    split = CacheSplit(hidden=torch.zeros(n, H).half(), tokens=torch.zeros(n, dtype=torch.long),
                       topk_ids=torch.zeros(n, 1, dtype=torch.long), topk_logp=torch.zeros(n, 1),
                       record_end=torch.tensor([3, 3, 3, 7, 7, 7, 7]), num_records=2)
    assert record_starts(split) == [0, 3]
