"""Building the packed kernel: cached by source, and one-line reasons where it cannot be built."""

from __future__ import annotations

import subprocess
import sys

import pytest

from entmtp_vllm.cpu_gemm import build


def _in_a_fresh_process(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_no_compiler_is_a_one_line_reason(tmp_path):
    """A fresh cache and no compiler on PATH: CpuGemmUnavailable naming the missing compiler."""
    code = (
        "from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library\n"
        "try:\n    load_library()\nexcept CpuGemmUnavailable as exc:\n    print('REASON', exc)\n"
    )
    env = {"PATH": str(tmp_path), "ENTMTP_CACHE": str(tmp_path / "cache"), "CXX": ""}
    out = _in_a_fresh_process(code, env)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    if "lacks" in line:  # a CPU without AVX2/FMA says so first
        pytest.skip(line)
    assert line.startswith("REASON no C++ compiler") and "\n" not in line


def test_a_compiler_error_is_a_one_line_reason(tmp_path):
    fake = tmp_path / "broken-c++"
    fake.write_text("#!/bin/sh\necho 'error: this compiler is broken' >&2\nexit 1\n")
    fake.chmod(0o755)
    code = (
        "from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library\n"
        "try:\n    load_library()\nexcept CpuGemmUnavailable as exc:\n    print('REASON', exc)\n"
    )
    out = _in_a_fresh_process(code, {"PATH": "/usr/bin:/bin", "ENTMTP_CACHE": str(tmp_path / "cache"), "CXX": str(fake)})
    line = out.stdout.strip()
    if "lacks" in line:
        pytest.skip(line)
    assert "could not build packed_gemm.cpp: error: this compiler is broken" in line
    assert not list((tmp_path / "cache").rglob("*.so"))  # nothing half-written is left to load


def test_the_library_is_built_once_per_source(tmp_path, monkeypatch):
    if build.find_compiler() is None or not {"avx2", "fma"} <= build.cpu_flags():
        pytest.skip("no compiler or no AVX2/FMA here")
    monkeypatch.setenv("ENTMTP_CACHE", str(tmp_path))
    path = build.library_path()
    assert str(path).startswith(str(tmp_path)) and not path.exists()
    build.compile_library(path)
    assert path.is_file()
    assert build.library_path() == path  # same source and flags: same file, nothing rebuilt
