"""The packed kernel inside a transformers model: same logits as torch's own linear layers, and
what `load_target` reports."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library
from entmtp_vllm.engine.loading import use_cpu_gemm
from entmtp_vllm.errors import EntMTPError

try:
    load_library()
except CpuGemmUnavailable as exc:
    pytest.skip(f"packed CPU matrix multiply unavailable: {exc}", allow_module_level=True)


def _tiny(dtype=torch.float32):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).to(dtype).eval()


def test_packed_model_gives_torchs_logits():
    model = _tiny()
    ids = torch.randint(0, 128, (1, 9))
    with torch.no_grad():
        expected = model(ids).logits
        assert use_cpu_gemm(model, "packed") == "packed"
        got = model(ids).logits  # 9 rows: packed
        last = model(ids[:, :1]).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert torch.equal(last[0, 0], got[0, 0])  # the first row alone: bit for bit
    # the tied LM head's weight is still the embedding's: nothing was replaced
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_choices():
    assert use_cpu_gemm(_tiny(), "torch") == "torch"
    assert use_cpu_gemm(_tiny(), "auto") == "packed"
    assert use_cpu_gemm(_tiny(torch.bfloat16), "auto") == "torch"
    with pytest.raises(EntMTPError, match="float32"):
        use_cpu_gemm(_tiny(torch.bfloat16), "packed")
    with pytest.raises(EntMTPError, match="auto, packed or torch"):
        use_cpu_gemm(_tiny(), "mkl")


def _drafter(dtype=torch.float32, draft_vocab=None):
    from entmtp_vllm.heads import HydraHeads
    from entmtp_vllm.heads.drafting import TreeDrafter

    gen = torch.Generator().manual_seed(3)
    heads = HydraHeads(64, 128, num_heads=3, num_layers=2)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    embed = torch.randn(128, 64, generator=gen)
    return TreeDrafter(heads.to(dtype), embed.to(dtype), embed.to(dtype), draft_vocab=draft_vocab)


def _drafts(drafter, hiddens, roots, buffers):
    from entmtp_vllm.heads.drafting import draft_trees

    steps = [drafter.begin(h, r) for h, r in zip(hiddens, roots)]
    return draft_trees(steps, [buffers] * len(steps), [None] * len(steps))


def test_packed_drafter_drafts_like_torch_and_alone_as_in_a_batch():
    from entmtp_vllm.cpu_gemm.hf_model import use_packed_drafter
    from entmtp_vllm.topology import build_tree_buffers
    from entmtp_vllm.tree import Tree

    buffers = build_tree_buffers(Tree.from_spec("full:3,2,1"))
    gen = torch.Generator().manual_seed(5)
    hiddens, roots = list(torch.randn(7, 64, generator=gen)), [3, 9, 27, 81, 5, 50, 100]
    vocab = torch.arange(0, 128, 2)  # a draft vocabulary: the heads rank only these ids
    for draft_vocab in (None, vocab):
        plain = _drafter(draft_vocab=draft_vocab)
        expected = _drafts(plain, hiddens, roots, buffers)
        packed = _drafter(draft_vocab=draft_vocab)
        assert use_packed_drafter(packed) == 3 * 2 + 3 * 1 + 1  # input blocks' 2 layers, stacks, LM head
        batched = _drafts(packed, hiddens, roots, buffers)
        for want, got in zip(expected, batched):
            assert got.tokens.tolist() == want.tokens.tolist()
            torch.testing.assert_close(torch.tensor(got.token_probs), torch.tensor(want.token_probs), rtol=1e-4, atol=1e-5)
        # each request drafted alone gets bit for bit what it got in the batch of 7
        for i in range(len(roots)):
            (alone,) = _drafts(packed, hiddens[i:i + 1], roots[i:i + 1], buffers)
            assert alone.tokens.tolist() == batched[i].tokens.tolist()
            assert alone.token_probs == batched[i].token_probs


def test_packed_drafter_leaves_other_dtypes_alone():
    from entmtp_vllm.cpu_gemm.hf_model import use_packed_drafter

    drafter = _drafter(torch.bfloat16)
    assert use_packed_drafter(drafter) == 0 and drafter.lm_head_linear is None
