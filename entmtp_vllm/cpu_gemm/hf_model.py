"""Putting the packed CPU matrix multiply into torch modules: a transformers model (the reference
engine's) and the draft heads (both engines)."""

from __future__ import annotations

from typing import Callable

import torch

from entmtp_vllm.cpu_gemm.packed_linear import PackedLinear


Linear = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]
"""A matrix multiply `linear(x, weight, bias)` built for one weight (e.g. `PackedLinear`)."""


def _routed_forward(linear: Linear, module: torch.nn.Linear):
    def forward(x: torch.Tensor) -> torch.Tensor:
        return linear(x, module.weight, module.bias)

    return forward


def route_linears(model: torch.nn.Module, make: Callable[[torch.Tensor], Linear],
                  dtype: torch.dtype | None = None) -> int:
    """Route every `nn.Linear` of `model` (of `dtype` only, when given) through `make(weight)`;
    returns how many layers were routed. The weights stay in place (training, saving and the
    heads' tied weights see no change)."""
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and (dtype is None or module.weight.dtype == dtype):
            module.forward = _routed_forward(make(module.weight), module)
            count += 1
    return count


def route_drafter(drafter, make: Callable[[torch.Tensor], Linear]) -> int:
    """Route a `TreeDrafter`'s head layers and its shared LM-head projection (cut to the draft
    vocabulary, `TreeDrafter.lm_head_linear`) through `make(weight)`; returns how many layers
    were routed."""
    count = route_linears(drafter.heads, make)
    weight = drafter.lm_head_weight
    if weight is not None and not drafter.heads.own_lm_head:
        linear = make(weight)
        drafter.lm_head_linear = lambda x: linear(x, weight, None)
        count += 1
    return count


def use_packed_gemm(model: torch.nn.Module) -> int:
    """Route every float32 `nn.Linear` of `model` through the packed kernel (few rows) and its
    own `F.linear` (more rows); returns how many layers were routed. The packed copies add their
    size in memory. Raises CpuGemmUnavailable (one line) where the kernel cannot run."""
    return route_linears(model, PackedLinear, torch.float32)


def use_packed_drafter(drafter) -> int:
    """Route a `TreeDrafter`'s head layers and its shared LM-head projection (cut to the draft
    vocabulary) through the packed kernel; returns how many layers were routed (0 for heads
    that are not float32). A head call over a step's rows then streams each weight once: on one
    thread of a 2-core AVX2 AMD EPYC, head 1 for 8 rows took 3.1 ms against 6.2 ms with torch's
    `F.linear`. Raises CpuGemmUnavailable (one line) where the kernel cannot run."""
    if drafter.dtype != torch.float32 or drafter.device.type != "cpu":
        return 0
    return route_drafter(drafter, PackedLinear)
