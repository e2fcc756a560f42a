"""What the proposer reads of vLLM's target model: its embedding and LM head cut to the real
vocabulary (`vocab_weights`), who it is (`served_model`), and the heads' verifier record checked
against those weights at start-up (`check_target`), so that a raw `vllm serve` with heads that
draft for another model stops with one line naming both models. No vLLM import: the model and
its config are read through their attributes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads.verifier import ModelIdentity, Probe, check_config, identity_of_config, model_name, probe_tensors


def vocab_weights(model: torch.nn.Module, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input embedding, LM head) weights of a vLLM decoder, cut to the real vocabulary."""
    inner = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    lm_head = getattr(model, "lm_head", None)
    if embed is None or lm_head is None or not hasattr(lm_head, "weight"):
        raise EntMTPError(
            f"EntMTP heads need the target's embedding and LM head (model.embed_tokens, lm_head); "
            f"{type(model).__name__} does not expose them"
        )
    return embed.weight[:vocab_size], lm_head.weight[:vocab_size]


def served_model(model_config: Any) -> ModelIdentity:
    """The identity of the model vLLM serves, from its `ModelConfig`."""
    config = model_config
    return identity_of_config(config.hf_config, model_name(config.model), config.get_vocab_size(), config.get_hidden_size())


def check_target(folder: Path, served: Callable[[], ModelIdentity], target_model: torch.nn.Module) -> str | None:
    """The heads' verifier record against the target's loaded embedding and LM head: a one-line
    `EntMTPError` naming both models when they differ. For heads without a record, the warning to
    log (`served` and the target are then not read)."""
    from entmtp_vllm.heads.checkpoint import read_heads_config

    def target() -> tuple[ModelIdentity, Probe]:
        model = served()
        return model, probe_tensors(*vocab_weights(target_model, model.vocab_size))

    return check_config(read_heads_config(folder), str(folder), target)
