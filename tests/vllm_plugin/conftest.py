"""Shared pieces of the vLLM plugin tests.

- Helpers live in `_vllm_engine.py` (a name no other test folder uses). One in-process engine
  per test module (`make_llm`): `VLLM_ENABLE_V1_MULTIPROCESSING=0`,
  `distributed_executor_backend="uni"`, eager, float32, a 1 GiB KV cache.
- The reference (vLLM greedy without speculation) runs once per session in a subprocess
  (`_reference.py`), so that no module needs a second engine; its outputs are cached in
  pytest's cache folder, keyed by everything that determines them.
- Prompts: mt_bench + gsm8k through `load_prompts`, chat-templated, mixed lengths.
- Heads: the shipped trained heads when `entmtp_vllm/assets/heads/smollm2-135m-hydra/` exists,
  else randomly initialised heads saved with the core's `save_heads` (greedy equality must
  hold for any heads).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _vllm_engine import MAX_TOKENS, NUM_PER_SET, run_reference


@pytest.fixture(scope="session")
def model_path() -> str:
    pytest.importorskip("vllm")
    from entmtp_vllm.model_store import resolve_model

    try:
        return resolve_model(None)
    except Exception as exc:  # the embedded model cannot be prepared here
        pytest.skip(f"embedded model unavailable: {exc}")


@pytest.fixture(scope="session")
def chat_prompts(model_path: str) -> list[str]:
    """12 MT-bench + 12 GSM8K questions, chat-templated, longest and shortest mixed."""
    from transformers import AutoTokenizer

    from entmtp_vllm.errors import EntMTPError
    from entmtp_vllm.prompts import chat_text, load_prompts

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    try:
        prompts = load_prompts("mt_bench", n=NUM_PER_SET) + load_prompts("gsm8k", n=NUM_PER_SET)
    except EntMTPError as exc:
        pytest.skip(f"prompt sets unavailable: {exc}")
    texts = [chat_text(tokenizer, prompt.text) for prompt in prompts]
    lengths = [len(tokenizer(text).input_ids) for text in texts]
    assert max(lengths) > 2 * min(lengths), "the batch should mix prompt lengths"
    return texts


@pytest.fixture(scope="session")
def reference_ids(request, model_path: str, chat_prompts: list[str]) -> list[list[int]]:
    """vLLM's own greedy outputs without speculation (same dtype, eager), computed once."""
    return run_reference(request, {"model": model_path, "prompts": chat_prompts, "max_tokens": MAX_TOKENS})


@pytest.fixture(scope="session")
def heads_folder(tmp_path_factory, model_path: str) -> str:
    """The shipped Hydra heads, or random heads saved with the core's `save_heads`."""
    from entmtp_vllm.heads.checkpoint import default_heads_path

    shipped = Path(default_heads_path("hydra"))
    if shipped.is_dir():
        return str(shipped)
    import torch
    from transformers import AutoConfig

    from entmtp_vllm.heads import HydraHeads
    from entmtp_vllm.heads.checkpoint import save_heads

    config = AutoConfig.from_pretrained(model_path)
    torch.manual_seed(0)
    heads = HydraHeads(config.hidden_size, config.vocab_size, num_heads=4)
    # Zero-initialised residual blocks would make every head copy its input; randomise them so
    # the drafts are arbitrary and acceptance depends on the verification only.
    with torch.no_grad():
        for parameter in heads.parameters():
            parameter.normal_(0.0, 0.02)
    return str(save_heads(heads, tmp_path_factory.mktemp("random_heads"), {"base_model": "random"}, dtype=torch.float32))
