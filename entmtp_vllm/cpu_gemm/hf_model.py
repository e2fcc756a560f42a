"""Putting the packed CPU matrix multiply into torch modules: a transformers model (the reference
engine's) and the draft heads (both engines)."""

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


def use_packed_drafter(drafter) -> int:
    """Route a `TreeDrafter`'s head layers and its shared LM-head projection (cut to the draft
    vocabulary) through the packed kernel; returns how many layers were routed (0 for heads
    that are not float32). A head call over a step's rows then streams each weight once: on the
    AVX2 machine of docs/results/cpu_gemm, head 1 for 8 rows took 3.1 ms against 6.2 ms with
    torch's `F.linear`. Raises CpuGemmUnavailable (one line) where the kernel cannot run."""
    if drafter.dtype != torch.float32 or drafter.device.type != "cpu":
        return 0
    count = use_packed_gemm(drafter.heads)
    if drafter.lm_head_weight is not None and not drafter.heads.own_lm_head:
        drafter.lm_head_linear = PackedLinear(drafter.lm_head_weight)
        count += 1
    return count
