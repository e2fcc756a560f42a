"""Where a kernel may run, decided once per call.

Policy (documented in the package docstring): the Triton kernels run on CUDA tensors with the
compiled backend, or on CPU tensors under the Triton interpreter (`TRITON_INTERPRET=1` set before
`triton` is first imported). Anything else raises a `RuntimeError` that names the torch reference
to call instead: a silent fallback would hide a 100× slower path inside a serving loop.
"""

import torch
import triton

# The `@triton.jit` decorator reads this knob once, when the kernel modules are imported; reading
# it at the same time here says which kind of kernel objects those modules hold.
INTERPRETER: bool = bool(triton.knobs.runtime.interpret)


def check_runnable(op: str, device: torch.device, bf16_math: bool) -> None:
    """Raise a RuntimeError saying how to proceed when `op` cannot run on `device`.

    `bf16_math`: the kernel would do arithmetic in bfloat16 (the interpreter gets that wrong).
    """
    if INTERPRETER:
        if device.type != "cpu":
            raise RuntimeError(
                f"{op}: the Triton interpreter is on (TRITON_INTERPRET=1) but the tensors are on "
                f"{device}; pass CPU tensors, or unset TRITON_INTERPRET to run the compiled kernel"
            )
        if bf16_math:
            raise RuntimeError(
                f"{op}: bfloat16 is silently wrong in the Triton interpreter "
                f"(https://github.com/triton-lang/triton/issues/11584); use float16/float32 on CPU, or call {op}_ref"
            )
        return
    if device.type != "cuda":
        raise RuntimeError(
            f"{op}: the Triton kernel needs CUDA tensors (got {device}); call {op}_ref for the CPU "
            f"path, or set TRITON_INTERPRET=1 before triton is imported to run the kernel on CPU"
        )
