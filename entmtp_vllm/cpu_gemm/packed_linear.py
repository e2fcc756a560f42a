"""A float32 linear layer on the packed CPU matrix multiply, for the few rows of a decode step.

`PackedLinear` repacks a weight once (`packed_gemm.cpp`) and computes `x @ W.T (+ bias)` for up
to `CPU_GEMM.max_rows` rows; more rows (a prefill) go to the engine's own matrix multiply, kept
as `fallback`. Each row's result is the same whatever the other rows are (the kernel sums every
output in one fixed order), so a verified tree row gets bit for bit the logits that row would
get alone, at the cost of one weight pass for all of them.
"""

from __future__ import annotations

from typing import Callable

import torch

from entmtp_vllm.config import CPU_GEMM
from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library

Fallback = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


class PackedLinear:
    """`y = x @ weight.T + bias` on the packed kernel for rows <= max_rows, else `fallback`."""

    def __init__(self, weight: torch.Tensor, fallback: Fallback | None = None, max_rows: int | None = None):
        if weight.ndim != 2 or weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise CpuGemmUnavailable(
                f"the packed CPU matrix multiply takes a 2-D float32 CPU weight, not {tuple(weight.shape)} "
                f"{weight.dtype} on {weight.device}"
            )
        self._lib = load_library()
        self.out_features, self.in_features = weight.shape
        self.max_rows = CPU_GEMM.max_rows if max_rows is None else max_rows
        self.fallback = fallback or torch.nn.functional.linear
        panel = self._lib.entmtp_panel_width()
        dense = weight.detach().contiguous()
        self.packed = torch.empty(-(-self.out_features // panel) * self.in_features * panel, dtype=torch.float32)
        self._lib.entmtp_pack_weight(dense.data_ptr(), self.packed.data_ptr(), self.out_features, self.in_features)

    def takes(self, x: torch.Tensor) -> bool:
        """True when the packed kernel computes `x` (else the fallback does)."""
        rows = x.numel() // max(x.shape[-1], 1)
        return (
            x.dtype == torch.float32
            and x.device.type == "cpu"
            and x.shape[-1] == self.in_features
            and 0 < rows <= self.max_rows
            and not (torch.is_grad_enabled() and x.requires_grad)
        )

    def __call__(self, x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's output; `weight` is only for the fallback (it may be an emptied tensor)."""
        if not self.takes(x):
            return self.fallback(x, weight, bias)
        rows = x.numel() // self.in_features
        flat = x.reshape(rows, self.in_features).contiguous()
        out = torch.empty(rows, self.out_features, dtype=torch.float32)
        self._lib.entmtp_packed_linear(
            flat.data_ptr(), self.packed.data_ptr(), out.data_ptr(), rows, self.out_features, self.in_features,
            torch.get_num_threads(),
        )
        if bias is not None:
            out += bias
        return out.reshape(*x.shape[:-1], self.out_features)
