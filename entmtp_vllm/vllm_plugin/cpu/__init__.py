"""EntMTP on vLLM's CPU platform: what only a CPU process imports.

- `worker.py`        `EntMTPCPUWorker` (vLLM's `CPUWorker`, which patches torch's CUDA APIs at import)
- `model_runner.py`  `EntMTPCPUModelRunner`: the tree step over vLLM's `CPUModelRunner`
- `attention.py`     `CPU_ATTN` with per-request tree masks, and compaction through vLLM's cache op
- `rows.py`          which requests of a step take EntMTP's CPU rows attention (`entmtp_vllm/cpu_attention`)
- `ray_device.py`    vLLM's Ray executor on CPU (a Ray device for the CPU platform)

This `__init__` imports nothing of vLLM: `install.py` calls its hooks only on the CPU platform.
"""

from __future__ import annotations

from typing import Any

WORKER = "entmtp_vllm.vllm_plugin.cpu.worker.EntMTPCPUWorker"
"""The worker the plugin selects when `--worker-cls` is auto."""
STOCK_WORKERS = ("vllm.v1.worker.cpu_worker.CPUWorker",)
"""The stock workers it replaces when one is named explicitly."""
ATTENTION_BACKENDS = {"CPU_ATTN": "entmtp_vllm.vllm_plugin.cpu.attention.TreeCPUAttentionBackend"}
"""vLLM's backend name: the EntMTP backend registered under it."""


def install(platform_cls: type) -> None:
    """In every process, when the plugin registers: the tree backend under `CPU_ATTN`, the CPU
    platform's Ray device (`ray_device.py`), and the packed CPU matrix multiply's hook into vLLM's
    linear dispatch (`ENTMTP_CPU_GEMM=packed`; nothing changes without it)."""
    from entmtp_vllm.cpu_gemm import vllm_gemm
    from entmtp_vllm.vllm_plugin.cpu.ray_device import name_ray_device
    from entmtp_vllm.vllm_plugin.backends import register_attention_backends

    register_attention_backends(ATTENTION_BACKENDS)
    name_ray_device(platform_cls)
    vllm_gemm.install()


def prepare(vllm_config: Any) -> None:
    """While any engine's config is built: vLLM's Ray executor on CPU (`ray_device.py`)."""
    from entmtp_vllm.vllm_plugin.cpu.ray_device import prepare_ray_executor

    prepare_ray_executor(vllm_config)


def problems(vllm_config: Any) -> list[str]:
    """What an EntMTP engine on CPU cannot serve, beyond `support.py`'s common checks."""
    from entmtp_vllm.cpu_attention import rows
    from entmtp_vllm.errors import EntMTPError

    try:
        rows.mode()
    except EntMTPError as exc:
        return [str(exc)]
    return []
