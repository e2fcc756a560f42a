"""Compiling the packed CPU matrix multiply (`packed_gemm.cpp`) at first use.

The library is built with the system's C++ compiler (`$CXX`, else `c++` / `g++`) into the
EntMTP cache (`$ENTMTP_CACHE/cpu_gemm/<source hash>/`), once per source version and machine,
and loaded with ctypes: no build step at install time, no torch headers. Where it cannot be
built or run (no compiler, a CPU without AVX2 and FMA), `load_library` says why in one line
and callers keep their engine's own matrix multiply.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from entmtp_vllm.config import EMBEDDED_MODEL
from entmtp_vllm.cpu_features import cpu_flags

SOURCE = Path(__file__).with_name("packed_gemm.cpp")
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC", "-std=c++17")


class CpuGemmUnavailable(RuntimeError):
    """The packed CPU matrix multiply cannot run here; the message says why in one line."""


def find_compiler() -> str | None:
    """`$CXX`, else the first of `c++`, `g++`, `clang++` on PATH."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def library_path(source: Path = SOURCE, flags: tuple[str, ...] = FLAGS, name: str = "libentmtp_packed_gemm.so") -> Path:
    """Where `source` built with `flags` is kept: one file per source version, flags and machine."""
    digest = hashlib.sha256(source.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    return EMBEDDED_MODEL.cache_dir() / source.parent.name / digest / name


def compile_library(target: Path, source: Path = SOURCE, flags: tuple[str, ...] = FLAGS, libraries: tuple[str, ...] = ()) -> None:
    """Build `source` into `target`, or CpuGemmUnavailable with the compiler's first error line."""
    compiler = find_compiler()
    if compiler is None:
        raise CpuGemmUnavailable("no C++ compiler found (set CXX, or install g++)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        proc = subprocess.run(
            [compiler, *flags, str(source), "-o", str(out), *libraries], capture_output=True, text=True
        )
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["no output"])[0]
            raise CpuGemmUnavailable(f"{compiler} could not build {source.name}: {first}")
        os.replace(out, target)  # atomic: a concurrent process sees the old file or the whole new one


def open_library(source: Path = SOURCE, flags: tuple[str, ...] = FLAGS, name: str = "libentmtp_packed_gemm.so",
                 libraries: tuple[str, ...] = ()) -> ctypes.CDLL:
    """`source` built with `flags` (once: kept at `library_path`), loaded. Every C++ file of the
    package goes through here (the packed matrix multiply, `entmtp_vllm/cpu_attention`)."""
    target = library_path(source, flags, name)
    if not target.exists():
        compile_library(target, source, flags, libraries)
    return ctypes.CDLL(str(target))


def load_library() -> ctypes.CDLL:
    """The compiled library (built on first call), or CpuGemmUnavailable saying why (the outcome
    is kept for the process: a failed build is not retried for every weight)."""
    lib, reason = _load()
    if lib is None:
        raise CpuGemmUnavailable(reason)
    return lib


@functools.lru_cache(maxsize=1)
def _load() -> tuple[ctypes.CDLL | None, str]:
    try:
        return _build_and_open(), ""
    except (CpuGemmUnavailable, OSError) as exc:
        return None, str(exc)


def _build_and_open() -> ctypes.CDLL:
    missing = {"avx2", "fma"} - cpu_flags()
    if missing:
        raise CpuGemmUnavailable(f"this CPU lacks {', '.join(sorted(missing))}")
    lib = open_library()
    c_long, c_void = ctypes.c_long, ctypes.c_void_p
    lib.entmtp_pack_weight.argtypes = [c_void, c_void, c_long, c_long]
    lib.entmtp_pack_weight.restype = None
    lib.entmtp_packed_linear.argtypes = [c_void, c_void, c_void, c_long, c_long, c_long, ctypes.c_int]
    lib.entmtp_packed_linear.restype = None
    lib.entmtp_panel_width.restype = ctypes.c_int
    return lib
