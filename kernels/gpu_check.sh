#!/usr/bin/env bash
# One-command GPU check of entmtp_kernels: the kernel tests on CUDA (fp16/bf16), then the benchmark.
#
#   bash kernels/gpu_check.sh [--quick]      # --quick: the 8-configuration benchmark subset
#
# Needs only python with CUDA torch and triton (no vLLM, this package not installed): a temporary
# directory holding a symlink entmtp_kernels -> kernels/ goes first on PYTHONPATH. pytest is
# pip-installed if missing; if that fails, `python -m entmtp_kernels.selfcheck` stands in for the
# tests. The sm_90 compile test is skipped here (the GPU run compiles and runs every kernel for
# the real device anyway; the CPU suite runs it). Results go to $OUT (default
# /tmp/entmtp-gpu-check): env.txt, pytest.log, pytest.xml, bench.log, bench.json, bench.md.
# Exit status: non-zero if the tests or the benchmark failed.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${OUT:-/tmp/entmtp-gpu-check}"
PY="${PYTHON:-python3}"
BENCH_ARGS=("$@")
mkdir -p "$OUT_DIR"
cd "$REPO"

SHIM="$(mktemp -d)"
trap 'rm -rf "$SHIM"' EXIT
ln -s "$REPO/kernels" "$SHIM/entmtp_kernels"
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
unset TRITON_INTERPRET

{
    date -u
    nvidia-smi -L 2>&1 || true
    "$PY" -c 'import sys, torch, triton, entmtp_kernels
print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)
print("cuda available:", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")
print("entmtp_kernels from", entmtp_kernels.__file__)'
} 2>&1 | tee "$OUT_DIR/env.txt"
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: torch sees no CUDA device; nothing to check" | tee -a "$OUT_DIR/env.txt"
    exit 2
fi

if ! "$PY" -c 'import pytest' 2>/dev/null; then
    echo "gpu_check: pytest missing, trying pip install"
    timeout 180 "$PY" -m pip install -q --disable-pip-version-check pytest || true
fi

if "$PY" -c 'import pytest' 2>/dev/null; then
    # --confcutdir: only tests/kernels/conftest.py applies (a conftest above might import
    # entmtp_vllm, which is not installed here).
    "$PY" -m pytest -q -rA -p no:cacheprovider --confcutdir=tests/kernels \
        --ignore=tests/kernels/test_compile_sm90.py --junitxml="$OUT_DIR/pytest.xml" \
        tests/kernels 2>&1 | tee "$OUT_DIR/pytest.log"
    TESTS_RC=${PIPESTATUS[0]}
else
    echo "gpu_check: no pytest; running python -m entmtp_kernels.selfcheck instead" \
        | tee "$OUT_DIR/pytest.log"
    "$PY" -m entmtp_kernels.selfcheck 2>&1 | tee -a "$OUT_DIR/pytest.log"
    TESTS_RC=${PIPESTATUS[0]}
fi
echo "gpu_check: tests exit status $TESTS_RC"

"$PY" -m entmtp_kernels.bench ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"} --out "$OUT_DIR/bench.json" \
    --md "$OUT_DIR/bench.md" 2>&1 | tee "$OUT_DIR/bench.log"
BENCH_RC=${PIPESTATUS[0]}
echo "gpu_check: bench exit status $BENCH_RC; results in $OUT_DIR"

[ "$TESTS_RC" -eq 0 ] && [ "$BENCH_RC" -eq 0 ]
