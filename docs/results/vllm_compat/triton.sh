#!/usr/bin/env bash
# The Triton kernels (kernels/, imported as entmtp_kernels) under another Triton release than the
# CPU setup's 3.7.1: every shipped variant compiled for sm_90 (no GPU needed) and the kernel tests
# under TRITON_INTERPRET=1, in a separate venv holding only torch (the CPU build, for tensors),
# that Triton, pytest and numpy. vLLM 0.33.0's torch 2.14.0 brings Triton 3.8.0.
#
#   bash docs/results/vllm_compat/triton.sh                 # TRITON=3.8.0; VENV=/path reuses a venv
#
# Writes next to itself: triton-<version>-compile.json (variant: "ok" or the error) and
# triton-<version>-tests.txt (pytest's summary).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
TRITON="${TRITON:-3.8.0}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
VENV="${VENV:-$WORK/venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0 "triton==$TRITON" pytest numpy
fi
ln -s "$REPO/kernels" "$WORK/entmtp_kernels"
cd "$REPO"
env -u TRITON_INTERPRET PYTHONPATH="$WORK" TRITON_CACHE_DIR="$WORK/cache" \
    "$VENV/bin/python" -m entmtp_kernels.compile_check > "$HERE/triton-$TRITON-compile.json"
echo "compile_check exit status $?"
{
    "$VENV/bin/python" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
    PYTHONPATH="$WORK" TRITON_INTERPRET=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
        --confcutdir=tests/kernels --ignore=tests/kernels/test_compile_sm90.py tests/kernels 2>&1 | tail -3
} > "$HERE/triton-$TRITON-tests.txt"
cat "$HERE/triton-$TRITON-tests.txt"
