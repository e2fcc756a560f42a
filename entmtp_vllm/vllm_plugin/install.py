"""What the general plugin changes in vLLM, in every process, before any engine is built.

1. `CPU_ATTN` resolves to `TreeCPUAttentionBackend` (`register_backend`, vLLM 0.32.0
   `v1/attention/backends/registry.py:340`; `platforms/cpu.py:179` returns the overridden
   path). Without a tree step announced it behaves exactly like the stock backend.
2. The CPU platform's `check_and_update_config` (run while `VllmConfig` is built, in the process
   that parses the arguments) is wrapped: when the speculative model is EntMTP it validates
   `additional_config["entmtp"]` (an `EntMTPError` there makes vLLM refuse to start, before any
   model is loaded) and, if `--worker-cls` was left at auto, selects the EntMTP worker.
"""

from __future__ import annotations

from typing import Any

from entmtp_vllm.vllm_plugin.config import PROPOSER_CLASS, config_from_vllm, heads_folder, resolve

ATTENTION_BACKEND = "entmtp_vllm.vllm_plugin.attention.TreeCPUAttentionBackend"
CPU_WORKER = "entmtp_vllm.vllm_plugin.worker.EntMTPCPUWorker"
STOCK_CPU_WORKER = "vllm.v1.worker.cpu_worker.CPUWorker"
PROPOSER_NAMES = (PROPOSER_CLASS, "entmtp_vllm.vllm_plugin.proposer.EntMTPProposer")

_MARK = "_entmtp_wrapped"


def entmtp_requested(vllm_config: Any) -> bool:
    """Whether this engine drafts with EntMTP."""
    spec = getattr(vllm_config, "speculative_config", None)
    return spec is not None and spec.method == "custom_class" and spec.model in PROPOSER_NAMES


def prepare_config(vllm_config: Any) -> None:
    """Validate the EntMTP settings and pick the EntMTP worker (no-op for other engines)."""
    if not entmtp_requested(vllm_config):
        return
    settings = config_from_vllm(vllm_config)
    resolve(settings, vllm_config.speculative_config.num_speculative_tokens)
    heads_folder(settings)
    parallel = vllm_config.parallel_config
    if parallel.worker_cls in ("auto", STOCK_CPU_WORKER):
        parallel.worker_cls = CPU_WORKER


def register_attention_backend() -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CPU_ATTN, ATTENTION_BACKEND)


def wrap_cpu_platform() -> None:
    """Run `prepare_config` after the CPU platform's own config checks (once per process)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    platform_cls = current_platform if isinstance(current_platform, type) else type(current_platform)
    stock = platform_cls.check_and_update_config
    if getattr(stock, _MARK, False):
        return

    def check_and_update_config(cls, vllm_config) -> None:
        stock(vllm_config)
        prepare_config(vllm_config)

    setattr(check_and_update_config, _MARK, True)
    platform_cls.check_and_update_config = classmethod(check_and_update_config)
