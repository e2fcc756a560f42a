"""The shipped default banks choose their trees as documented: the prompt-lookup chain once the
lookup matched at least 2 tokens of the context's suffix, else the heads (in one in-process vLLM
engine at 8 requests on a 2-core AMD EPYC, a token copied after a one-token match was accepted 29%
of the time at depth 1, the heads' drafts 55%)."""

from __future__ import annotations

import pytest

from entmtp_vllm.bank_file import resolve_trees
from entmtp_vllm.config import DEFAULT_BANK, DEFAULT_VLLM_BANK
from entmtp_vllm.features import StepFeatures


def _features(match: int) -> StepFeatures:
    return StepFeatures(path_value=0.5, p0=0.5, head_top1=[0.5, 0.5], entropy=1.0, entropy_ema={},
                        recent_accept_mean=0.0, recent_accept_min=0.0, recent_accept_max=0.0,
                        last_accept_length=0, extra={"lookup_match": float(match)})


@pytest.mark.parametrize("path", [DEFAULT_VLLM_BANK, DEFAULT_BANK])
def test_lookup_chain_only_on_a_match_of_two_tokens_or_more(path):
    bank, policy = resolve_trees(path)
    state = policy.new_state()
    chosen = [bank.names[policy.choose(state, _features(match))] for match in (0, 1, 2, 4, 1, 0)]
    assert chosen == ["hydra", "hydra", "loop", "loop", "hydra", "hydra"]


def test_the_vllm_banks_head_tree_is_heads_one_and_two_as_a_chain():
    bank, _ = resolve_trees(DEFAULT_VLLM_BANK)
    hydra = bank.buffers(bank.index("hydra"), "cpu")
    assert list(hydra.nodes[1:]) == [(0,), (0, 0)]
    assert bank.lookup_length == 5
