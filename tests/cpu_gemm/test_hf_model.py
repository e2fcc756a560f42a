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
