"""The EntMTP runners and workers against vLLM 0.32's classes: every override still matches a
method of vLLM's `GPUModelRunner` / workers (name and parameters), so a vLLM upgrade that renames
or re-types one fails here, not while serving. Constructing the GPU runner needs a GPU; its class
is built and checked on CPU."""

from __future__ import annotations

import importlib
import inspect

import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

from vllm.v1.worker.cpu_model_runner import CPUModelRunner  # noqa: E402
from vllm.v1.worker.cpu_worker import CPUWorker  # noqa: E402
from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: E402
from vllm.v1.worker.gpu_worker import Worker  # noqa: E402

from entmtp_vllm.vllm_plugin.cpu.model_runner import EntMTPCPUModelRunner  # noqa: E402
from entmtp_vllm.vllm_plugin.cpu.worker import EntMTPCPUWorker  # noqa: E402
from entmtp_vllm.vllm_plugin.cuda.model_runner import EntMTPGPUModelRunner  # noqa: E402
from entmtp_vllm.vllm_plugin.cuda.worker import EntMTPGPUWorker  # noqa: E402
from entmtp_vllm.vllm_plugin.tree_runner import TreeRunnerMixin  # noqa: E402

VLLM_OVERRIDES = ("__init__", "_update_states", "_prepare_inputs", "_build_attention_metadata", "_sample",
                  "propose_draft_token_ids", "initialize_attn_backend", "execute_model", "sample_tokens")
"""The vLLM methods the mixin overrides (its `_entmtp*` and helper methods are its own)."""


def _names(function) -> list[str]:
    return [p.name for p in inspect.signature(function).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def test_the_mixin_overrides_exactly_these_vllm_methods():
    own = {name for name, value in vars(TreeRunnerMixin).items() if callable(value) and not name.startswith("__")}
    overrides = {name for name in own if hasattr(GPUModelRunner, name)}
    assert overrides == set(VLLM_OVERRIDES) - {"__init__"}


@pytest.mark.parametrize("name", VLLM_OVERRIDES)
def test_each_override_matches_vllms_signature(name):
    ours = getattr(TreeRunnerMixin, name)
    stock = getattr(GPUModelRunner, name)
    our_names = _names(ours)
    if any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(ours).parameters.values()):
        # forwards the rest (*args, **kwargs): the parameters it names come first in vLLM's
        assert our_names == _names(stock)[: len(our_names)], (name, our_names, _names(stock))
    else:
        assert our_names == _names(stock), (name, our_names, _names(stock))


@pytest.mark.parametrize("runner, stock", [(EntMTPCPUModelRunner, CPUModelRunner), (EntMTPGPUModelRunner, GPUModelRunner)])
def test_runners_put_the_tree_step_before_vllms_runner(runner, stock):
    mro = runner.__mro__
    assert mro.index(TreeRunnerMixin) < mro.index(stock)
    assert _names(runner.__init__) == _names(GPUModelRunner.__init__) == ["self", "vllm_config", "device"]
    # each platform compacts its own way: the CPU runner itself, the GPU runner through KernelCompaction
    owner = next(klass for klass in mro if "_entmtp_compact" in vars(klass))
    assert owner is not TreeRunnerMixin and mro.index(owner) < mro.index(TreeRunnerMixin)


def test_workers_override_what_vllm_builds_the_runner_in():
    assert "_make_model_runner" in vars(Worker)  # vLLM's hook for subclasses
    assert _names(EntMTPGPUWorker._make_model_runner) == _names(Worker._make_model_runner)
    assert issubclass(EntMTPGPUWorker, Worker) and issubclass(EntMTPCPUWorker, CPUWorker)
    import vllm.v1.worker.cpu_worker as cpu_worker

    assert cpu_worker.CPUModelRunner is CPUModelRunner  # the name EntMTPCPUWorker rebinds
    assert "CPUModelRunner" in inspect.getsource(CPUWorker.init_device)


@pytest.mark.parametrize("backend_name", ["FLASH_ATTN", "TRITON_ATTN"])
def test_cuda_tree_backends_subclass_the_stock_ones(backend_name):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from entmtp_vllm.vllm_plugin.cuda import attention as gpu_attention
    from entmtp_vllm.vllm_plugin.cuda.kernels import TREE_BACKEND_ATTR

    ours = {"FLASH_ATTN": gpu_attention.TreeFlashAttentionBackend,
            "TRITON_ATTN": gpu_attention.TreeTritonAttentionBackend}[backend_name]
    module, name = AttentionBackendEnum[backend_name].value.rsplit(".", 1)  # the stock class path
    stock_cls = getattr(importlib.import_module(module), name)
    assert issubclass(ours, stock_cls) and getattr(ours, TREE_BACKEND_ATTR)
    impl = ours.get_impl_cls()
    assert issubclass(impl, stock_cls.get_impl_cls())
    assert _names(impl.forward) == _names(stock_cls.get_impl_cls().forward)
    assert ours.get_name() == stock_cls.get_name()  # vLLM still sees FLASH_ATTN / TRITON_ATTN


def test_the_gpu_runner_refuses_a_backend_without_tree_rows_at_start_up():
    from types import SimpleNamespace

    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    from entmtp_vllm.errors import EntMTPError
    from entmtp_vllm.vllm_plugin.cuda.attention import TreeFlashAttentionBackend, TreeTritonAttentionBackend

    ours = SimpleNamespace(attn_groups=[[SimpleNamespace(backend=TreeFlashAttentionBackend),
                                         SimpleNamespace(backend=TreeTritonAttentionBackend)]])
    EntMTPGPUModelRunner._entmtp_check_backend(ours)
    stock = SimpleNamespace(attn_groups=[[SimpleNamespace(backend=FlashAttentionBackend)]])
    with pytest.raises(EntMTPError, match="--attention-backend FLASH_ATTN or TRITON_ATTN"):
        EntMTPGPUModelRunner._entmtp_check_backend(stock)
