"""The packed CPU matrix multiply: results, batch invariance, the fallback, one-line refusals."""

from __future__ import annotations

import pytest
import torch

from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library

try:
    load_library()
except CpuGemmUnavailable as exc:  # no compiler, or a CPU without AVX2/FMA
    pytest.skip(f"packed CPU matrix multiply unavailable: {exc}", allow_module_level=True)

from entmtp_vllm.cpu_gemm.packed_linear import PackedLinear  # noqa: E402


@pytest.mark.parametrize("out_features, in_features", [(1, 8), (16, 576), (100, 72), (33, 13), (49, 1536)])
@pytest.mark.parametrize("rows", [1, 2, 5, 6, 7, 13, 64])
def test_matches_torch_linear(out_features, in_features, rows):
    torch.manual_seed(out_features * 1000 + rows)
    weight, bias = torch.randn(out_features, in_features), torch.randn(out_features)
    x = torch.randn(rows, in_features)
    packed = PackedLinear(weight)
    assert packed.takes(x)
    expected = torch.nn.functional.linear(x.double(), weight.double(), bias.double())
    got = packed(x, weight, bias)
    assert got.dtype == torch.float32 and got.shape == (rows, out_features)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5 * in_features ** 0.5)


def test_a_rows_result_does_not_depend_on_the_other_rows():
    """Bit for bit: a verified tree row gets the logits it would get alone."""
    torch.manual_seed(0)
    weight = torch.randn(200, 576)
    packed = PackedLinear(weight)
    x = torch.randn(23, 576)
    together = packed(x)
    for i in range(23):
        assert torch.equal(together[i], packed(x[i:i + 1])[0])
    assert torch.equal(together[3:9], packed(x[3:9]))


def test_keeps_the_leading_shape_and_takes_non_contiguous_input():
    torch.manual_seed(1)
    weight = torch.randn(40, 32)
    x = torch.randn(32, 3, 5).permute(1, 2, 0)  # (3, 5, 32), not contiguous
    got = PackedLinear(weight)(x)
    assert got.shape == (3, 5, 40)
    torch.testing.assert_close(got, torch.nn.functional.linear(x, weight), rtol=1e-5, atol=1e-4)


def test_more_rows_than_max_rows_go_to_the_fallback():
    torch.manual_seed(2)
    weight = torch.randn(24, 16)
    calls = []

    def fallback(x, w, b):
        calls.append(x.shape[0])
        return torch.nn.functional.linear(x, w, b)

    packed = PackedLinear(weight, fallback=fallback, max_rows=4)
    packed(torch.randn(4, 16), weight)
    assert calls == []
    big = torch.randn(5, 16)
    torch.testing.assert_close(packed(big, weight), torch.nn.functional.linear(big, weight))
    assert calls == [5]
    assert not packed.takes(torch.randn(2, 16, dtype=torch.float64))
    assert not packed.takes(torch.randn(0, 16))


def test_gradients_go_to_the_fallback():
    weight = torch.randn(8, 4)
    x = torch.randn(2, 4, requires_grad=True)
    packed = PackedLinear(weight)
    assert not packed.takes(x)
    packed(x, weight).sum().backward()
    assert x.grad is not None
    with torch.no_grad():
        assert packed.takes(x)


@pytest.mark.parametrize("weight", [torch.randn(4, 4, dtype=torch.bfloat16), torch.randn(4), torch.randn(2, 3, 4)])
def test_refuses_what_it_cannot_pack_in_one_line(weight):
    with pytest.raises(CpuGemmUnavailable) as info:
        PackedLinear(weight)
    assert "\n" not in str(info.value) and "float32" in str(info.value)


def test_two_threads_give_the_same_result():
    torch.manual_seed(3)
    weight = torch.randn(300, 96)
    x = torch.randn(7, 96)
    packed = PackedLinear(weight)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = packed(x)
        torch.set_num_threads(2)
        two = packed(x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
