"""Putting the packed CPU matrix multiply into a transformers model (the reference engine's)."""

from __future__ import annotations

import torch

from entmtp_vllm.cpu_gemm.packed_linear import PackedLinear


def _packed_forward(packed: PackedLinear, module: torch.nn.Linear):
    def forward(x: torch.Tensor) -> torch.Tensor:
        return packed(x, module.weight, module.bias)

    return forward


def use_packed_gemm(model: torch.nn.Module) -> int:
    """Route every float32 `nn.Linear` of `model` through the packed kernel (few rows) and its
    own `F.linear` (more rows); returns how many layers were routed. The weights stay in place
    (training, saving and the heads' tied weights see no change); the packed copies add their
    size in memory. Raises CpuGemmUnavailable (one line) where the kernel cannot run."""
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.dtype == torch.float32:
            module.forward = _packed_forward(PackedLinear(module.weight), module)
            count += 1
    return count
