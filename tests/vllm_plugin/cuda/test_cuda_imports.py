"""What the plugin imports on the CUDA platform changes nothing process-wide.

vLLM's CPU worker (`vllm/v1/worker/cpu/shm.py`) replaces, at import, torch's CUDA streams and
events, `torch.accelerator`'s synchronize / empty_cache / get_memory_info, `Tensor.pin_memory`
and vLLM's `async_tensor_h2d`: a CUDA worker that imported it would size its KV cache from host
memory and capture CUDA graphs without streams. In a fresh process, after vLLM's own CUDA modules
are imported (what any vLLM GPU worker imports), the plugin registers for a CUDA platform (a vLLM
`Platform` that says CUDA: vLLM's `CudaPlatform` cannot be imported without a GPU build) and
everything the CUDA worker and attention backends need is imported; the attributes above must be
the very same objects as before, and no CPU module of vLLM or EntMTP may be loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

PROBE = textwrap.dedent(
    """
    import json, sys
    import torch

    def snapshot():
        import vllm.utils.torch_utils as torch_utils
        found = {f"torch.cuda.{n}": getattr(torch.cuda, n, None)
                 for n in ("Stream", "Event", "set_stream", "current_stream", "stream", "synchronize",
                           "empty_cache", "mem_get_info")}
        found.update({f"torch.accelerator.{n}": getattr(torch.accelerator, n, None)
                      for n in ("synchronize", "empty_cache", "get_memory_info", "memory_allocated")})
        found.update({"torch.Event": torch.Event, "torch.Tensor.pin_memory": torch.Tensor.pin_memory,
                      "torch.Tensor.record_stream": torch.Tensor.record_stream,
                      "vllm.utils.torch_utils.async_tensor_h2d": torch_utils.async_tensor_h2d})
        return found

    # What vLLM's own GPU worker imports, before the plugin.
    import vllm.v1.worker.gpu_worker, vllm.v1.worker.gpu_model_runner  # noqa: E401
    import vllm.v1.attention.backends.flash_attn, vllm.v1.attention.backends.triton_attn  # noqa: E401
    before = snapshot()
    cpu_before = {name for name in sys.modules if MARKS(name)}

    import vllm.platforms
    from vllm.platforms.interface import Platform, PlatformEnum

    class CudaStandIn(Platform):
        _enum = PlatformEnum.CUDA
        device_name = device_type = "cuda"

    vllm.platforms._current_platform = CudaStandIn()

    from entmtp_vllm.vllm_plugin import register
    register()
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from entmtp_vllm.vllm_plugin.platforms import platform_package
    package = platform_package("cuda")
    worker = resolve_obj_by_qualname(package.WORKER)
    backends = [AttentionBackendEnum[name].get_class() for name in package.ATTENTION_BACKENDS]
    import entmtp_kernels  # the kernels the CUDA path launches
    after = snapshot()
    print(json.dumps({
        "changed": sorted(name for name in before if before[name] is not after[name]),
        "cpu_modules": sorted({name for name in sys.modules if MARKS(name)} - cpu_before),
        "worker": f"{worker.__module__}.{worker.__qualname__}",
        "backends": [f"{b.__module__}.{b.__qualname__}" for b in backends],
    }))
    """
)
MARKS = """
def MARKS(name):
    return (name.startswith(("vllm.v1.worker.cpu", "vllm.v1.attention.backends.cpu_attn", "entmtp_vllm.cpu_"))
            or name.startswith("entmtp_vllm.vllm_plugin.cpu"))
"""


@pytest.fixture(scope="module")
def probe() -> dict:
    done = subprocess.run([sys.executable, "-c", MARKS + PROBE], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cuda_worker_and_backends_are_what_the_plugin_installs(probe):
    assert probe["worker"] == "entmtp_vllm.vllm_plugin.cuda.worker.EntMTPGPUWorker"
    assert probe["backends"] == ["entmtp_vllm.vllm_plugin.cuda.attention.TreeFlashAttentionBackend",
                                 "entmtp_vllm.vllm_plugin.cuda.attention.TreeTritonAttentionBackend"]


def test_torch_and_vllm_functions_are_untouched(probe):
    assert probe["changed"] == []


def test_no_cpu_module_is_imported(probe):
    assert probe["cpu_modules"] == []
