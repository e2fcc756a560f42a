"""`vllm_plugin/target.py` with real tensors laid out as vLLM holds them (no vLLM): the heads'
verifier record against the target's embedding and LM head, in bf16 and padded past the
vocabulary; another model is refused in one line naming both models."""

from __future__ import annotations

import pytest
import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads.hydra import HydraHeads
from entmtp_vllm.vllm_plugin.target import check_target, vocab_weights

HIDDEN, VOCAB = 16, 40


class _Decoder(torch.nn.Module):
    """A decoder laid out as vLLM's: `model.embed_tokens`, and `lm_head` (the same module when tied),
    their rows padded past the vocabulary as vLLM pads them."""

    def __init__(self, embed: torch.Tensor, lm_head: torch.Tensor | None, dtype: torch.dtype, pad: int = 24) -> None:
        super().__init__()

        def rows(weight: torch.Tensor) -> torch.nn.Embedding:
            module = torch.nn.Embedding(weight.shape[0] + pad, weight.shape[1], dtype=dtype)
            with torch.no_grad():
                module.weight[: weight.shape[0]] = weight.to(dtype)
            return module

        self.model = torch.nn.Module()
        self.model.embed_tokens = rows(embed)
        self.lm_head = self.model.embed_tokens if lm_head is None else rows(lm_head)


def test_vocab_weights_cut_the_padding_and_need_both_modules():
    embed = torch.randn(VOCAB, HIDDEN)
    cut_embed, cut_head = vocab_weights(_Decoder(embed, None, torch.bfloat16), VOCAB)
    assert cut_embed.shape == (VOCAB, HIDDEN) and cut_head is not None and torch.equal(cut_embed, embed.bfloat16())
    with pytest.raises(EntMTPError, match="Linear does not expose them"):
        vocab_weights(torch.nn.Linear(1, 1), VOCAB)


@pytest.mark.parametrize("tied", [True, False])
def test_heads_recorded_for_another_model_are_refused_in_one_line(tmp_path, tied):
    """`check_target`, what the proposer's `load_model` calls with vLLM's loaded model: the served
    weights in bf16, padded, pass; another model's are refused naming both models; heads without
    a record warn without reading the model."""
    from entmtp_vllm.heads.checkpoint import save_heads
    from entmtp_vllm.heads.verifier import ModelIdentity, probe_tensors, record_of

    gen = torch.Generator().manual_seed(0)
    embed, head = torch.randn(VOCAB, HIDDEN, generator=gen) * 0.05, torch.randn(VOCAB, HIDDEN, generator=gen) * 0.05
    trained = ModelIdentity("tiny-trained", "LlamaForCausalLM", "llama", VOCAB, HIDDEN)
    record = record_of(trained, tied, probe_tensors(embed, embed if tied else head))
    folder = save_heads(HydraHeads(HIDDEN, VOCAB, num_heads=2), tmp_path / "heads", verifier=record)
    served = ModelIdentity("tiny-served", "Qwen2ForCausalLM", "qwen2", VOCAB, HIDDEN)
    assert check_target(folder, lambda: served, _Decoder(embed, None if tied else head, torch.bfloat16)) is None
    other = _Decoder(torch.randn(VOCAB, HIDDEN, generator=gen) * 0.05, None if tied else head, torch.bfloat16)
    with pytest.raises(EntMTPError) as info:
        check_target(folder, lambda: served, other)
    message = str(info.value)
    assert "\n" not in message and "tiny-trained (LlamaForCausalLM)" in message and "tiny-served (Qwen2ForCausalLM)" in message
    unrecorded = save_heads(HydraHeads(HIDDEN, VOCAB, num_heads=2), tmp_path / "old", {"base_model": "tiny"})
    assert "carry no 'verifier' record" in check_target(unrecorded, pytest.fail, torch.nn.Linear(1, 1))


@pytest.mark.slow
def test_the_shipped_heads_pass_with_smollm2_weights_as_vllm_holds_them():
    """The shipped heads' records against SmolLM2-135M-Instruct's embedding in bf16 / fp16, padded."""
    from entmtp_vllm.config import EMBEDDED_MODEL
    from entmtp_vllm.heads.checkpoint import default_heads_path, load_base_embeddings
    from entmtp_vllm.heads.verifier import identity_of_config
    from entmtp_vllm.model_store import prepared_model_problem

    folder = EMBEDDED_MODEL.prepared_dir()
    if prepared_model_problem(folder) is not None:
        pytest.skip("the embedded model is not prepared")
    embed, _, config = load_base_embeddings(folder)
    served = identity_of_config(config, "SmolLM2-135M-Instruct")
    for kind, dtype in (("hydra", torch.bfloat16), ("medusa", torch.float16)):
        assert check_target(default_heads_path(kind), lambda: served, _Decoder(embed, None, dtype, pad=64)) is None


@pytest.mark.slow
def test_a_raw_vllm_serve_with_heads_recorded_for_another_model_stops_at_start_up(tmp_path):
    """`vllm serve B` with heads recorded for A (same shape, other weights; B served in bf16 from
    its float32 checkpoint): the server exits before it listens, on one line naming both models."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("vllm")
    from _tiny_saved_model import QWEN2_HIDDEN, QWEN2_VOCAB, save_tiny_qwen2
    from entmtp_vllm.heads.checkpoint import save_heads
    from entmtp_vllm.heads.verifier import record_of_folder

    model_a, model_b = save_tiny_qwen2(tmp_path / "tiny-qwen2-a", seed=0), save_tiny_qwen2(tmp_path / "tiny-qwen2-b", seed=1)
    heads = save_heads(HydraHeads(QWEN2_HIDDEN, QWEN2_VOCAB, num_heads=2), tmp_path / "heads-a", dtype=torch.float32,
                       verifier=record_of_folder(model_a))
    vllm = Path(sys.executable).with_name("vllm")
    argv = [str(vllm) if vllm.exists() else "vllm", "serve", str(model_b), "--dtype", "bfloat16", "--enforce-eager",
            "--distributed-executor-backend", "uni", "--max-model-len", "256", "--skip-tokenizer-init", "--port", "0",
            "--speculative-config", json.dumps({"method": "entmtp", "num_speculative_tokens": 2}),
            "--additional-config", json.dumps({"entmtp": {"heads": str(heads), "bank": "chain:2"}})]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode != 0
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("entmtp_vllm.errors.EntMTPError: ")]
    assert errors, done.stderr[-3000:]
    assert "tiny-qwen2-a (Qwen2ForCausalLM)" in errors[-1] and "tiny-qwen2-b (Qwen2ForCausalLM)" in errors[-1]
    assert "fingerprint" in errors[-1]
