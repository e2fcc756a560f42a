"""Registering a platform's EntMTP attention backends under vLLM's backend names.

`register_attention_backends` is what the platform packages' `install` call (`cpu/`: `CPU_ATTN`;
`cuda/`: `FLASH_ATTN`, `TRITON_ATTN`); the backend classes load when vLLM first asks for one.
"""

from __future__ import annotations


def register_attention_backends(backends: dict[str, str]) -> None:
    """Register each EntMTP backend class path under vLLM's backend name."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    for name, path in backends.items():
        register_backend(AttentionBackendEnum[name], path)
