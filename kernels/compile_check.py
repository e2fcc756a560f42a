"""Compile every kernel variant the dispatchers can launch for sm_90, without a GPU.

`shipped_configs()` enumerates the variants from the same `configs` functions the dispatchers
use; `compile_sm90()` builds one down to a cubin. This catches what the interpreter accepts but
hardware rejects (tile shapes under 16 for `tl.dot`, unsupported casts, register-file overflow at
compile time).

Run as `python -m entmtp_kernels.compile_check` with TRITON_INTERPRET unset (under the
interpreter `@triton.jit` yields objects that cannot be compiled): prints one JSON object
{name: "ok" | error} and exits 1 if any variant failed.
"""

import json
import sys
from dataclasses import dataclass

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

from . import configs
from .compaction import _compact_kv_kernel
from .tree_attention import _combine_splits_kernel, _tree_attention_kernel

SM90 = GPUTarget("cuda", 90, 32)


@dataclass(frozen=True)
class ShippedKernel:
    """One compiled variant: the kernel, its runtime argument types and its launch constants."""

    name: str
    kernel: object
    signature: dict[str, str]
    launch: configs.LaunchConfig


def shipped_configs() -> list[ShippedKernel]:
    """Every (kernel, constexpr combination) that `paged_tree_attention` / `compact_kv` launch."""
    shipped = []
    for dtype in configs.GPU_DTYPES:
        t = configs.TRITON_DTYPE_NAMES[dtype]
        for head_dim in configs.SUPPORTED_HEAD_DIMS:
            for split in (False, True):
                shipped.append(ShippedKernel(
                    name=f"tree_attention[{t},d{head_dim},{'split' if split else 'nosplit'}]",
                    kernel=_tree_attention_kernel,
                    signature=configs.attention_signature(dtype, split),
                    launch=configs.attention_launch(head_dim, split),
                ))
            shipped.append(ShippedKernel(
                name=f"combine_splits[{t},d{head_dim}]",
                kernel=_combine_splits_kernel,
                signature=configs.combine_signature(dtype),
                launch=configs.combine_launch(head_dim),
            ))
    shipped.append(ShippedKernel(
        name="compact_kv[words]",
        kernel=_compact_kv_kernel,
        signature=configs.compact_signature(),
        launch=configs.compact_launch(),
    ))
    return shipped


def compile_sm90(config: ShippedKernel) -> triton.compiler.CompiledKernel:
    """Compile one variant for sm_90 (PTX and cubin); raises on any compiler error."""
    if not isinstance(config.kernel, JITFunction):
        raise RuntimeError("compile_sm90: the kernels were built by the Triton interpreter; "
                           "run with TRITON_INTERPRET unset")
    constexprs = config.launch.constexprs
    signature = {**config.signature, **{name: "constexpr" for name in constexprs}}
    missing = set(config.kernel.arg_names) ^ set(signature)
    if missing:
        raise ValueError(f"compile_sm90: {config.name}: signature and kernel arguments differ "
                         f"in {sorted(missing)}")
    source = ASTSource(fn=config.kernel, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=SM90, options={"num_warps": config.launch.num_warps,
                                                         "num_stages": config.launch.num_stages})


def main() -> int:
    results = {}
    for config in shipped_configs():
        try:
            compiled = compile_sm90(config)
            results[config.name] = "ok" if "cubin" in compiled.asm else "no cubin produced"
        except Exception as error:  # report every failing variant, not just the first
            results[config.name] = f"{type(error).__name__}: {error}"
    json.dump(results, sys.stdout, indent=1)
    print()
    return 0 if all(v == "ok" for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
