"""Tests for entmtp_vllm/heads/draft_vocab.py and drafting over a reduced vocabulary."""

from __future__ import annotations

import json

import pytest
import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads import HydraHeads
from entmtp_vllm.heads.draft_vocab import FILE_NAME, build_draft_vocab, load_draft_vocab, save_draft_vocab
from entmtp_vllm.heads.drafting import TreeDrafter
from entmtp_vllm.topology import build_tree_buffers
from entmtp_vllm.tree import Tree

from conftest import HIDDEN, VOCAB, randomize

ROOT = 3


def test_build_ranks_by_frequency_then_id() -> None:
    ids, coverage = build_draft_vocab([[5, 5, 2, 9], [2, 5, 7, 9]], 3)
    assert ids == [5, 2, 9]  # 5 x3, then 2 and 9 x2 (smaller id first); 7 dropped
    assert coverage == pytest.approx(7 / 8)
    with pytest.raises(EntMTPError, match="at least 1"):
        build_draft_vocab([[1]], 0)
    with pytest.raises(EntMTPError, match="no tokens"):
        build_draft_vocab([[]], 4)


def test_save_load_round_trip_and_bad_files(tmp_path) -> None:
    assert load_draft_vocab(tmp_path, VOCAB) is None  # absent: full vocabulary
    save_draft_vocab(tmp_path, [4, 1, 7], {"coverage": 0.5})
    assert load_draft_vocab(tmp_path, VOCAB).tolist() == [4, 1, 7]
    # a size keeps the first (most frequent) ids; more than stored keeps them all
    assert load_draft_vocab(tmp_path, VOCAB, size=2).tolist() == [4, 1]
    assert load_draft_vocab(tmp_path, VOCAB, size=10).tolist() == [4, 1, 7]
    with pytest.raises(EntMTPError, match="at least 1"):
        load_draft_vocab(tmp_path, VOCAB, size=0)
    with pytest.raises(EntMTPError, match="in \\[0, 5\\)"):
        load_draft_vocab(tmp_path, 5)
    (tmp_path / FILE_NAME).write_text(json.dumps({"format": "entmtp-draft-vocab", "token_ids": [1, 1]}))
    with pytest.raises(EntMTPError, match="distinct"):
        load_draft_vocab(tmp_path, VOCAB)
    (tmp_path / FILE_NAME).write_text("{not json")
    with pytest.raises(EntMTPError, match="not a valid draft vocabulary"):
        load_draft_vocab(tmp_path, VOCAB)


def test_drafts_are_the_best_tokens_inside_the_vocabulary(base_weights) -> None:
    embed, lm_head = base_weights
    heads = randomize(HydraHeads(HIDDEN, VOCAB, num_heads=3), scale=0.5)
    hidden = torch.randn(HIDDEN)
    vocab = torch.randperm(VOCAB)[: VOCAB // 3]
    drafter = TreeDrafter(heads, embed, lm_head, draft_vocab=vocab)
    buffers = build_tree_buffers(Tree.from_choices([[0], [1], [0, 0], [0, 0, 0]]))
    draft = drafter.begin(hidden, ROOT).draft(buffers, want_probs=True)
    tokens = draft.tokens.tolist()
    allowed = set(vocab.tolist())
    assert all(t in allowed for t in tokens[1:])

    def best(depth, path, k):
        logits = heads.head_logits(depth, hidden[None], embed[torch.tensor(path)][None], lm_head)[0]
        masked = torch.full_like(logits, float("-inf"))
        masked[vocab] = logits[vocab]
        return masked.topk(k).indices.tolist()

    assert tokens[1:3] == best(1, [ROOT], 2)
    assert tokens[3] == best(2, [ROOT, tokens[1]], 1)[0]
    assert tokens[4] == best(3, [ROOT, tokens[1], tokens[3]], 1)[0]
    probs = draft.draft_probs
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[vocab] = False
    assert probs[1:, outside].abs().max() == 0 and torch.allclose(probs[1:].sum(-1), torch.ones(4))


def test_vocabulary_needs_a_shared_lm_head(base_weights) -> None:
    embed, lm_head = base_weights
    own = HydraHeads(HIDDEN, VOCAB, num_heads=2, own_lm_head=True)
    with pytest.raises(EntMTPError, match="share the base model's LM head"):
        TreeDrafter(own, embed, None, draft_vocab=torch.arange(4))
