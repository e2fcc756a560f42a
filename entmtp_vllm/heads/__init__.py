"""Draft heads (Hydra, Medusa), their checkpoints and the tree drafter (core: torch only)."""

from entmtp_vllm.heads.blocks import PrefixLayerConfig
from entmtp_vllm.heads.hydra import DraftHeads, HydraHeads
from entmtp_vllm.heads.medusa import MedusaHeads

HEAD_KINDS = {"hydra": HydraHeads, "medusa": MedusaHeads}


def make_heads(kind: str, hidden_size: int, vocab_size: int, **kwargs) -> DraftHeads:
    """Build fresh heads of `kind` (`hydra` | `medusa`)."""
    try:
        cls = HEAD_KINDS[kind]
    except KeyError:
        from entmtp_vllm.errors import EntMTPError

        raise EntMTPError(f"unknown head kind {kind!r}: use one of {', '.join(HEAD_KINDS)}") from None
    return cls(hidden_size, vocab_size, **kwargs)


__all__ = ["DraftHeads", "HydraHeads", "MedusaHeads", "PrefixLayerConfig", "HEAD_KINDS", "make_heads"]
