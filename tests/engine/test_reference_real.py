"""The reference engine on the real embedded SmolLM2-135M-Instruct (slow)."""

from __future__ import annotations

import pytest
import torch

from entmtp_vllm.config import EMBEDDED_MODEL
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.model_store import prepared_model_problem

pytestmark = pytest.mark.slow

DATASETS = ("mt_bench", "gsm8k", "humaneval")


@pytest.fixture(scope="module")
def smollm2():
    if prepared_model_problem(EMBEDDED_MODEL.prepared_dir()) is not None:
        pytest.skip("the embedded model is not prepared (run `entmtp model prepare`)")
    from entmtp_vllm.engine.loading import load_target

    torch.set_num_threads(1)
    return load_target(None, "float32")


@pytest.fixture(scope="module")
def drafter(smollm2):
    """The shipped Hydra heads, else random Hydra heads of the right shape (equality holds for any heads)."""
    from entmtp_vllm.engine.loading import load_drafter
    from entmtp_vllm.heads import make_heads
    from entmtp_vllm.heads.checkpoint import default_heads_path
    from entmtp_vllm.heads.drafting import TreeDrafter

    model, _ = smollm2
    if default_heads_path("hydra").exists():
        return load_drafter(None, model)
    torch.manual_seed(0)
    heads = make_heads("hydra", model.config.hidden_size, model.config.vocab_size, num_heads=4)
    with torch.no_grad():
        for param in heads.parameters():
            param.add_(torch.randn_like(param) * 0.01)
    return TreeDrafter(heads.eval(), model.get_input_embeddings().weight, model.get_output_embeddings().weight)


def _prompt_ids(tokenizer, dataset: str, n: int) -> list[list[int]]:
    from entmtp_vllm.prompts import chat_text, load_prompts

    try:
        prompts = load_prompts(dataset, n, seed=123, split="test")
    except EntMTPError as exc:
        pytest.skip(f"{dataset} unavailable: {exc}")
    return [tokenizer(chat_text(tokenizer, p.text), add_special_tokens=False)["input_ids"] for p in prompts]


@pytest.mark.parametrize("dataset", DATASETS)
def test_greedy_tree_equals_greedy_ar_fp32(smollm2, drafter, dataset):
    from entmtp_vllm.engine.reference import ReferenceEngine
    from entmtp_vllm.policies import make_policy
    from entmtp_vllm.topology import TopologyBank
    from entmtp_vllm.tree import Tree

    model, tokenizer = smollm2
    bank = TopologyBank([Tree.from_spec("chain:2"), Tree.from_spec("full:3,2,1")], ["small", "big"])
    policy = make_policy({"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": 0.5}, bank)
    engine = ReferenceEngine(model, tokenizer, drafter, bank, policy)
    for ids in _prompt_ids(tokenizer, dataset, 3):
        ar = engine.generate(ids, 32, method="ar")
        tree = engine.generate(ids, 32)
        assert tree.token_ids == ar.token_ids, (tree.text, ar.text)
        assert len(ar.token_ids) == 32 or ar.stop_reason == "eos"


@pytest.mark.parametrize("dataset", ("mt_bench", "gsm8k"))
def test_greedy_hybrid_trees_equal_greedy_ar_fp32(smollm2, drafter, dataset):
    """Hybrid trees (a prompt-lookup chain beside and above head nodes), switched on the lookup
    match length: greedy output equals AR, lookup tokens get accepted, the policy switches."""
    from entmtp_vllm.policies import make_policy, parse_policy_arg
    from entmtp_vllm.engine.reference import ReferenceEngine
    from entmtp_vllm.topology import TopologyBank
    from entmtp_vllm.tree import Tree

    model, tokenizer = smollm2
    hybrid = Tree.from_choices([[-1], [-1, -1], [-1, -1, 0], [-1, -1, -1], [0], [1], [0, 0]])
    bank = TopologyBank([hybrid, Tree.from_spec("lookup:6+chain:1")], ["hybrid", "loop"])
    policy = make_policy(parse_policy_arg("hysteresis@lookup_match:2.5,1.5:hybrid,loop"), bank)
    engine = ReferenceEngine(model, tokenizer, drafter, bank, policy)
    switches = lookup_accepted = 0
    for ids in _prompt_ids(tokenizer, dataset, 3):
        ar = engine.generate(ids, 48, method="ar")
        tree = engine.generate(ids, 48)
        assert tree.token_ids == ar.token_ids, (tree.text, ar.text)
        switches += tree.tree_switches
        for step in tree.steps:
            buffers = bank.buffers(step.tree_index, lookup_length=int(step.features["lookup_tokens"]))
            assert step.nodes == buffers.num_nodes  # no match: the branch is absent, not junk
            lookup_accepted += len(set(step.accepted) & set(buffers.lookup_nodes))
    assert lookup_accepted > 0
    assert switches > 0
