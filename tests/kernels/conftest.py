"""Run the kernel tests on CUDA when there is a GPU, else on CPU under the Triton interpreter.

TRITON_INTERPRET must be set before `entmtp_kernels` (hence `triton.jit`) is imported: the
decorator picks interpreter or compiler at decoration time. torch does not import triton, so this
file sets it first thing, and refuses to go on if the kernels were already built the other way.
"""

import os
import sys

import torch

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"
if "entmtp_kernels._dispatch" in sys.modules and (
    sys.modules["entmtp_kernels._dispatch"].INTERPRETER == ON_GPU
):
    raise RuntimeError("entmtp_kernels was imported before tests/kernels/conftest.py could set "
                       "TRITON_INTERPRET; run these tests in their own pytest process")

import pytest  # noqa: E402

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
# Attention dtypes per mode: the interpreter cannot do bf16; fp32 is not a compiled GPU variant.
ATTENTION_DTYPES = (torch.float16, torch.bfloat16) if ON_GPU else (torch.float32, torch.float16)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Give every test that takes `dtype` the attention dtypes of this mode."""
    if "dtype" in metafunc.fixturenames:
        metafunc.parametrize("dtype", ATTENTION_DTYPES, ids=lambda d: str(d).split(".")[-1])


@pytest.fixture
def device() -> torch.device:
    return DEVICE
