"""`rows_attention`: attention over vLLM's paged CPU KV cache for requests with a few query rows
each (a root and its drafts), every request's K and V read once for all its rows.

vLLM's CPU op (`cpu_attention_with_kv_cache`) reads a request's K and V once per query row: on
a 2-core AMD EPYC (AVX512-BF16, bf16, 16 requests) a verified draft row cost about as much
attention as a root row, 0.4-1.4 ms a step at 512-1024 tokens of context over 30 layers.
`rows_attention.cpp` is compiled once (`entmtp_vllm/cpu_gemm/build.py`; a CPU worker does it as it
starts, `build_at_start`) and called with
ctypes on vLLM's `vec` cache layout: float32 with AVX2 + FMA, bf16 with AVX512-BF16. The plugin
uses it as `$ENTMTP_CPU_ROWS_ATTENTION` says (`min_context`).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from entmtp_vllm.config import CPU_ROWS_ATTENTION
from entmtp_vllm.cpu_features import cpu_flags
from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, open_library
from entmtp_vllm.errors import EntMTPError

SOURCE = Path(__file__).with_name("rows_attention.cpp")
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-fno-math-errno", "-shared", "-fPIC", "-std=c++17")
"""No -ffast-math: a library built with it sets flush-to-zero for the process that loads it."""
LIBRARIES = ("-lm",)
NEEDS = {torch.float32: ({"avx2", "fma"}, 8), torch.bfloat16: ({"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}, 64)}
"""Per cache dtype: the CPU flags the kernel needs and what the head size must be a multiple of."""


MODES = ("on", "all", "off")
"""The values `$ENTMTP_CPU_ROWS_ATTENTION` takes (`CpuRowsAttentionConfig.env`)."""


def mode(environ: Mapping[str, str] | None = None) -> str:
    """`$ENTMTP_CPU_ROWS_ATTENTION` (in `environ`, default this process's), or the configured
    default when it is unset or empty; an `EntMTPError` naming the variable for any other value."""
    value = (os.environ if environ is None else environ).get(CPU_ROWS_ATTENTION.env, "").strip().lower()
    if not value:
        return CPU_ROWS_ATTENTION.default
    if value not in MODES:
        raise EntMTPError(f"{CPU_ROWS_ATTENTION.env}={value!r} is not one of {', '.join(MODES)} (unset: "
                          f"{CPU_ROWS_ATTENTION.default})")
    return value


def min_context() -> int | None:
    """The fewest tokens in the cache with which a request takes the kernel (None: it is off)."""
    chosen = mode()
    return None if chosen == "off" else 0 if chosen == "all" else CPU_ROWS_ATTENTION.min_context


def build_at_start() -> str | None:
    """Build (or load) the kernel when a worker starts and the setting asks for it, so that no
    served step pauses to compile it; the line the worker logs (None: the setting is off)."""
    least = min_context()
    if least is None:
        return None
    setting = f"{CPU_ROWS_ATTENTION.env}={mode()}"
    library, why = load_library()
    if library is None:
        return f"EntMTP's CPU rows attention ({setting}) cannot run here, vLLM's op serves every request: {why}"
    takes = "every drafting request" if least == 0 else f"the requests with at least {least} tokens in the cache"
    return f"EntMTP's CPU rows attention ({setting}) takes {takes} (float32 caches on AVX2 + FMA, bf16 on AVX512-BF16)"


@functools.lru_cache(maxsize=16)
def unsupported(dtype: torch.dtype, head_dim: int, block_size: int) -> str | None:
    """Why the kernel cannot take this cache here (None: it can); asked every step, read once."""
    if dtype not in NEEDS:
        return f"no kernel for {dtype} caches (float32 and bf16 only)"
    flags, multiple = NEEDS[dtype]
    missing = flags - cpu_flags()
    if missing:
        return f"this CPU lacks {', '.join(sorted(missing))} for {dtype} caches"
    if head_dim % multiple or block_size % 32:
        return f"head size {head_dim} / block size {block_size} (needs multiples of {multiple} / 32)"
    return None


@functools.lru_cache(maxsize=1)
def load_library() -> tuple[ctypes.CDLL | None, str]:
    """(the library, "") or (None, why it cannot be built or loaded); built once per source."""
    try:
        lib = open_library(SOURCE, FLAGS, "libentmtp_rows_attention.so", LIBRARIES)
    except (CpuGemmUnavailable, OSError) as exc:
        return None, str(exc)
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.entmtp_rows_attention.argtypes = [i, p, p, p, p, p, p, p, ctypes.c_long, p, i, i, i, i, i, ctypes.c_float,
                                          ctypes.c_long, ctypes.c_long]
    lib.entmtp_rows_attention.restype = None
    return lib, ""


def prepare(
    row_start: torch.Tensor,
    row_count: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    visible: torch.Tensor | None,
    scale: float,
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]:
    """The step's requests, checked once: returns `run(query, kv_cache, output)`, one call per
    layer, which writes the attention of these requests' rows into `output`.

    row_start int64[R] and row_count int32[R]: each request's rows of query/output; seq_lens
    int32[R]: its tokens in the cache, these rows included; block_table int32[R, B]; visible
    int64[T] or None: bit j of a row's entry lets it see its request's new row j (None: causal).
    query, output: [T, H, D] with contiguous heads (rows may be strided, as vLLM's q is a view of
    the fused qkv), the cache's dtype; kv_cache: vLLM's CPU cache of one layer, [num_blocks, Hkv,
    block_size, 2 * D], `vec` layout. Call `unsupported` first.
    """
    lib, reason = load_library()
    if lib is None:
        raise CpuGemmUnavailable(reason)
    expected = {"row_start": (row_start, torch.int64), "row_count": (row_count, torch.int32),
                "seq_lens": (seq_lens, torch.int32), "block_table": (block_table, torch.int32)}
    if visible is not None:
        expected["visible"] = (visible, torch.int64)
    for name, (tensor, dtype) in expected.items():
        if tensor.dtype != dtype or not tensor.is_contiguous():
            raise ValueError(f"rows_attention: {name} must be a contiguous {dtype} tensor (got {tensor.dtype})")
    if not len(row_start) == len(row_count) == len(seq_lens) == len(block_table):
        raise ValueError("rows_attention: one row_start, row_count, seq_len and block-table row per request")
    keep = (row_start, row_count, seq_lens, block_table, visible)
    fixed = (row_start.data_ptr(), row_count.data_ptr(), seq_lens.data_ptr(), block_table.data_ptr(),
             block_table.stride(0), None if visible is None else visible.data_ptr(), len(row_start))
    call = lib.entmtp_rows_attention

    def run(query: torch.Tensor, kv_cache: torch.Tensor, output: torch.Tensor) -> None:
        _, num_kv_heads, block_size, twice_d = kv_cache.shape
        _, num_heads, head_dim = query.shape
        if (query.stride(2) != 1 or query.stride(1) != head_dim or output.stride(2) != 1
                or output.stride(1) != head_dim):
            raise ValueError("rows_attention: the heads of query and output must be contiguous")
        if not kv_cache.is_contiguous() or query.dtype != kv_cache.dtype or output.dtype != kv_cache.dtype \
                or twice_d != 2 * head_dim:
            raise ValueError("rows_attention: query, output and a contiguous cache must share dtype and head size")
        call(query.element_size(), query.data_ptr(), kv_cache.data_ptr(), output.data_ptr(), *fixed,
             num_heads, num_kv_heads, head_dim, block_size, scale, query.stride(0), output.stride(0))

    run.keep = keep  # type: ignore[attr-defined]  # the per-step tensors live as long as the call
    return run


def rows_attention(query, kv_cache, output, row_start, row_count, seq_lens, block_table, visible, scale: float) -> None:
    """One call of `prepare(...)`'s `run` (the arguments as there)."""
    prepare(row_start, row_count, seq_lens, block_table, visible, scale)(query, kv_cache, output)
