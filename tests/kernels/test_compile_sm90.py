"""Every kernel variant the dispatchers can launch compiles for sm_90 (H100/H200), no GPU needed.

The compile runs in a subprocess without TRITON_INTERPRET: in this process conftest.py may have
turned the interpreter on, and interpreted kernels cannot be compiled. Compiled kernels land in
Triton's cache, so reruns of an unchanged kernel take seconds.
"""

import json
import os
import subprocess
import sys

import pytest

from entmtp_kernels.compile_check import shipped_configs

# 51 variants, 1.3 to 2.5 minutes on a cold Triton cache (2 CPU cores): part of `make test`, not
# of `make test-fast`.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def compile_results() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "entmtp_kernels.compile_check"], env=env,
                          capture_output=True, text=True, timeout=1200)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"compile_check crashed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


@pytest.mark.parametrize("name", [c.name for c in shipped_configs()])
def test_compiles_for_sm90(compile_results: dict[str, str], name: str) -> None:
    assert compile_results.get(name) == "ok", compile_results.get(name, "not compiled")

