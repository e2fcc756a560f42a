"""Compile every kernel variant the dispatchers can launch for sm_90, without a GPU.

`shipped_configs()` enumerates the variants from the same `configs` functions the dispatchers
use; `compile_sm90()` builds one down to a cubin. This catches what the interpreter accepts but
hardware rejects (tile shapes under 16 for `tl.dot`, unsupported casts, register-file overflow at
compile time).

Run as `python -m entmtp_kernels.compile_check` with TRITON_INTERPRET unset (under the
interpreter `@triton.jit` yields objects that cannot be compiled): prints one JSON object
{name: "ok" | error} and exits 1 if any variant failed. `--resources` adds, per variant, the
registers, stack (spill) bytes and shared memory of every variant on stderr (read from the cubin
with the cuobjdump that ships with Triton).
"""

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

from . import configs
from .compaction import _compact_kv_kernel
from .tree_attention import _combine_splits_kernel, _tree_attention_kernel

SM90 = GPUTarget("cuda", 90, 32)


@dataclass(frozen=True)
class ShippedKernel:
    """One compiled variant: the kernel, its runtime argument types, its launch constants, the
    arguments left unspecialized and those 16-divisible in every serving launch."""

    name: str
    kernel: object
    signature: dict[str, str]
    launch: configs.LaunchConfig
    not_specialized: tuple[str, ...] = ()
    divisible_by_16: tuple[str, ...] = ()


def shipped_configs() -> list[ShippedKernel]:
    """Every (kernel, constexpr combination) that `paged_tree_attention` / `compact_kv` launch:
    dtypes × head dims × soft-cap on/off × split/no split, the combine kernel per dtype × head
    dim, and the compaction kernel (one for all dtypes)."""
    shipped = []
    for dtype, head_dim, softcap, split in configs.attention_variants():
        shipped.append(ShippedKernel(
            name=configs.attention_variant_name(dtype, head_dim, softcap, split),
            kernel=_tree_attention_kernel,
            signature=configs.attention_signature(dtype, split),
            launch=configs.attention_launch(head_dim, split, softcap),
            not_specialized=configs.ATTENTION_NOT_SPECIALIZED,
            divisible_by_16=configs.ATTENTION_DIVISIBLE_BY_16,
        ))
    for dtype in configs.GPU_DTYPES:
        for head_dim in configs.SUPPORTED_HEAD_DIMS:
            shipped.append(ShippedKernel(
                name=configs.combine_variant_name(dtype, head_dim),
                kernel=_combine_splits_kernel,
                signature=configs.combine_signature(dtype),
                launch=configs.combine_launch(head_dim),
                not_specialized=configs.COMBINE_NOT_SPECIALIZED,
                divisible_by_16=configs.COMBINE_DIVISIBLE_BY_16,
            ))
    shipped.append(ShippedKernel(
        name=configs.COMPACT_VARIANT_NAME,
        kernel=_compact_kv_kernel,
        signature=configs.compact_signature(),
        launch=configs.compact_launch(),
        not_specialized=configs.COMPACT_NOT_SPECIALIZED,
        divisible_by_16=configs.COMPACT_DIVISIBLE_BY_16,
    ))
    return shipped


def check_arguments(config: ShippedKernel) -> None:
    """Raise ValueError unless the configs describe the kernel's arguments exactly: the signature
    plus constexprs are its argument list, in order; the unspecialized arguments are the ones the
    kernel's `do_not_specialize` names (compiled kernels only: the interpreter does not keep it);
    the divisibility hints name specialized runtime arguments."""
    kernel = config.kernel
    constexprs = config.launch.constexprs
    names = list(config.signature) + [n for n in kernel.arg_names if n in constexprs]
    if names != list(kernel.arg_names) or set(constexprs) - set(kernel.arg_names):
        differ = sorted(set(kernel.arg_names) ^ (set(config.signature) | set(constexprs)))
        raise ValueError(f"compile_sm90: {config.name}: signature and kernel arguments differ "
                         f"(in {differ or 'order'})")
    unspecialized = {kernel.arg_names[i] if isinstance(i, int) else i
                     for i in getattr(kernel, "do_not_specialize", config.not_specialized)}
    if unspecialized != set(config.not_specialized) or unspecialized - set(config.signature):
        raise ValueError(f"compile_sm90: {config.name}: the kernel leaves {sorted(unspecialized)} "
                         f"unspecialized, configs say {sorted(config.not_specialized)}")
    stray = (set(config.divisible_by_16) - set(config.signature)) | (
        set(config.divisible_by_16) & set(config.not_specialized))
    if stray:
        raise ValueError(f"compile_sm90: {config.name}: divisibility hints on {sorted(stray)}, "
                         "which are not specialized runtime arguments")


def compile_sm90(config: ShippedKernel) -> triton.compiler.CompiledKernel:
    """Compile one variant for sm_90 (PTX and cubin); raises on any compiler error.

    Compiled with the divisibility-by-16 hints that Triton's runtime specialization gives a
    serving launch (aligned pointers, strides that are multiples of the head dim), so what is
    checked is the binary a GPU would run.
    """
    if not isinstance(config.kernel, JITFunction):
        raise RuntimeError("compile_sm90: the kernels were built by the Triton interpreter; "
                           "run with TRITON_INTERPRET unset")
    check_arguments(config)
    constexprs = config.launch.constexprs
    signature = {**config.signature, **{name: "constexpr" for name in constexprs}}
    arg_names = list(config.kernel.arg_names)
    attrs = {(arg_names.index(name),): [["tt.divisibility", 16]]
             for name in config.divisible_by_16}
    source = ASTSource(fn=config.kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=SM90, options={"num_warps": config.launch.num_warps,
                                                         "num_stages": config.launch.num_stages})


def resource_usage(compiled: triton.compiler.CompiledKernel) -> str:
    """Registers, stack (spills) and shared memory of a compiled variant, from cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        dump = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", cubin.name],
                              capture_output=True, text=True, check=True).stdout
    usage = re.search(r"REG:(\d+) STACK:(\d+)", dump)
    regs, stack = usage.groups() if usage else ("?", "?")
    return f"registers {regs}, stack {stack} B, shared {compiled.metadata.shared} B"


def main(argv: list[str] | None = None) -> int:
    resources = "--resources" in (sys.argv[1:] if argv is None else argv)
    results = {}
    for config in shipped_configs():
        try:
            compiled = compile_sm90(config)
            results[config.name] = "ok" if "cubin" in compiled.asm else "no cubin produced"
            if resources and results[config.name] == "ok":
                print(f"{config.name}: {resource_usage(compiled)}", file=sys.stderr)
        except Exception as error:  # report every failing variant, not just the first
            results[config.name] = f"{type(error).__name__}: {error}"
    json.dump(results, sys.stdout, indent=1)
    print()
    return 0 if all(v == "ok" for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
