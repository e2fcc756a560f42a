"""A tiny random Llama saved like a real model (SmolLM2's tokenizer copied in, so real prompt
sets can be templated and encoded) and random heads saved like real ones; for end-to-end CLI
and tree-search tests. A tiny random Qwen2 (untied embeddings, head dim 32) saved without a
tokenizer, for checks that read only a model's config and weights. Helpers, not fixtures: each
test folder wraps them in its own fixture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

NUM_HEADS = 3
HIDDEN = 32
VOCAB = 49152


def save_tiny_model(root: Path, kinds: tuple[str, ...] = ("hydra",)) -> tuple[Path, list[Path]]:
    """(model folder, one heads folder per kind in `kinds`) under `root`; skips the test when the
    embedded model (whose tokenizer is reused) is not prepared."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from entmtp_vllm.config import EMBEDDED_MODEL
    from entmtp_vllm.heads import make_heads
    from entmtp_vllm.heads.checkpoint import save_heads
    from entmtp_vllm.model_store import prepared_model_problem

    embedded = EMBEDDED_MODEL.prepared_dir()
    if prepared_model_problem(embedded) is not None:
        pytest.skip("the embedded model is not prepared (its tokenizer is reused)")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=1,
        eos_token_id=2, pad_token_id=2, initializer_range=0.2,
    )
    LlamaForCausalLM(config).save_pretrained(root / "model")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (embedded / name).is_file():
            shutil.copy(embedded / name, root / "model" / name)
    folders = []
    for kind in kinds:
        heads = make_heads(kind, HIDDEN, VOCAB, num_heads=NUM_HEADS)
        with torch.no_grad():
            for param in heads.parameters():
                param.add_(torch.randn_like(param) * 0.05)
        folders.append(Path(save_heads(heads, root / kind, dtype=torch.float32)))
    return root / "model", folders


QWEN2_HIDDEN, QWEN2_VOCAB = 96, 1000


def save_tiny_qwen2(folder: Path, seed: int = 0) -> Path:
    """A tiny random Qwen2 (untied embeddings, 3 attention heads of dimension 32) saved as a
    Hugging Face folder (config.json + model.safetensors, no tokenizer) in `folder`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=QWEN2_VOCAB, hidden_size=QWEN2_HIDDEN, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=512, tie_word_embeddings=False,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return folder
