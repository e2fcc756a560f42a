"""Fixtures for the reference engine: a tiny random Llama and test drafters.

`OracleDrafter` is a test double with the `TreeDrafter` interface (`begin` -> step with
`greedy_chain` and `draft`). It finds where it is in a known greedy continuation by
matching the hidden state it is given against the hidden states of a from-scratch
forward pass, and hides the right token at a varying rank at each depth. So steps
accept long paths through non-zero ranks, which exercises KV compaction with gaps;
when the engine goes wrong the lookup fails and drafts stop matching, so greedy
equality with AR is still a real check.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 256


def tiny_llama(seed: int = 0, dtype: torch.dtype = torch.float32, eos: int | None = None, max_positions: int = 512):
    """A 2-layer random Llama (hidden 64, vocab 256), sharper than the default init."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        initializer_range=0.2,
        eos_token_id=eos,
        bos_token_id=None,
        pad_token_id=None,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).to(dtype).eval()
    model.generation_config.eos_token_id = eos
    return model


@dataclass
class FakeDraft:
    tokens: torch.Tensor
    draft_probs: torch.Tensor | None


class OracleStep:
    def __init__(self, drafter: "OracleDrafter", position: int, root: int) -> None:
        self.drafter, self.position, self.root = drafter, position, root

    def _future(self, depth: int) -> int | None:
        """The reference token `depth` places after the root, if known."""
        seq = self.drafter.sequence
        index = self.position + 1 + depth
        return seq[index] if self.position >= 0 and index < len(seq) else None

    def greedy_chain(self, depth: int) -> list[float]:
        # Deterministic pseudo-probabilities that vary along the sequence, so that a
        # ladder or hysteresis policy switches trees.
        return [((self.position * 37 + d * 11) % 100) / 100.0 for d in range(1, depth + 1)]

    def draft(self, buffers, want_probs: bool = False) -> FakeDraft:
        tokens = torch.zeros(buffers.num_nodes, dtype=torch.long)
        tokens[0] = self.root
        for i in range(1, buffers.num_nodes):
            depth, rank = int(buffers.depths[i]), int(buffers.ranks[i])
            right = self._future(depth)
            good_rank = (self.position + depth) % buffers.topk
            if right is not None and rank == good_rank:
                tokens[i] = right
            else:
                tokens[i] = ((right or 0) + 1 + rank + 3 * depth) % VOCAB
        return FakeDraft(tokens, None)


class OracleDrafter:
    """Drafts from a known token sequence (prompt + greedy continuation) of `model`."""

    num_heads = 8

    def __init__(self, model, sequence: list[int]) -> None:
        self.sequence = list(sequence)
        with torch.no_grad():
            out = model(torch.tensor([self.sequence]), output_hidden_states=True)
        self.hidden = out.hidden_states[-1][0].float()

    def begin(self, hidden: torch.Tensor, root_token: int) -> OracleStep:
        distance = (self.hidden - hidden.float().reshape(1, -1)).norm(dim=-1)
        position = int(distance.argmin())
        if float(distance[position]) > 0.05 * (1 + float(hidden.float().norm())):
            position = -1  # off the reference sequence: draft nonsense
        return OracleStep(self, position, int(root_token))


@pytest.fixture(scope="module")
def tiny_model():
    return tiny_llama()


def greedy_reference(model, prompt: list[int], n: int) -> list[int]:
    """Plain greedy decoding by full recomputation (no cache): prompt + n tokens."""
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq


@pytest.fixture
def make_oracle():
    """`make_oracle(model, prompt, n)` -> (OracleDrafter, greedy continuation of n tokens)."""

    def make(model, prompt: list[int], n: int):
        seq = greedy_reference(model, prompt, n + 8)
        return OracleDrafter(model, seq), seq[len(prompt) : len(prompt) + n]

    return make


@pytest.fixture
def greedy_ref():
    return greedy_reference


@pytest.fixture
def make_tiny():
    """`make_tiny(seed=0, dtype=torch.float32, eos=None, max_positions=512)` -> a tiny random Llama."""
    return tiny_llama
