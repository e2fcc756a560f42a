"""Whether the packed CPU matrix multiply runs, for a choice a user made: one decision shared by
the reference engine (`engine/loading.use_cpu_gemm`) and the front door (`serve_command`)."""

from __future__ import annotations

from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library
from entmtp_vllm.errors import EntMTPError


def why_not_packed(required: bool, dtype: str, float32: bool) -> str | None:
    """None when the packed kernel is to run for a model in `dtype`, else why not (one line).
    `required` (the user said `--cpu-gemm packed`): a reason is an `EntMTPError` instead."""
    reason = None
    if not float32:
        reason = (f"the packed kernel takes a float32 model, not {dtype}; pass --dtype float32, or leave "
                  "--cpu-gemm at its default")
    else:
        try:
            load_library()
        except CpuGemmUnavailable as exc:
            reason = str(exc)
    if reason and required:
        raise EntMTPError(f"--cpu-gemm packed: {reason}")
    return reason
