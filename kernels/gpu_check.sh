#!/usr/bin/env bash
# One-command GPU check of entmtp_kernels: the kernel tests on CUDA (fp16/bf16), then the benchmark.
#
#   bash kernels/gpu_check.sh [--quick]      # --quick: the 12-configuration benchmark subset
#
# The tests cover every supported head dim (64, 80, 96, 128, 256) with and without logits
# soft-capping, GQA, split-KV, a cache whose KV heads lie more than 2^31 elements apart (needs
# 9 GiB of free GPU memory) and that no step compiles again after the warm-up launches. The
# benchmark times head dim 128 (Llama-7B shapes) plus the padded 96 and 256.
# Needs only python with CUDA torch and triton (no vLLM, this package not installed): a temporary
# directory holding a symlink entmtp_kernels -> kernels/ goes first on PYTHONPATH. pytest is
# pip-installed if missing; if that fails, `python -m entmtp_kernels.selfcheck` stands in for the
# tests. The sm_90 compile test is skipped here (the GPU run compiles and runs every kernel for
# the real device anyway; the CPU suite runs it). Results go to $OUT (default
# /tmp/entmtp-gpu-check): env.txt, pytest.log, pytest.xml, bench.log, bench.json, bench.md,
# cost_curve_smollm2-135m.json, cost_curve_llama-7b.json, cost_curve.log.
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

# Step-cost curves (random weights time like real ones) of the embedded model's shape and of a
# 7B Llama's, for `entmtp search rerank BANK --cost-curve ...` (banks for this GPU, no decoding).
# Needs only torch + transformers: the repository root goes on PYTHONPATH (nothing installed).
PYTHONPATH="$REPO:$PYTHONPATH" "$PY" - "$OUT_DIR" <<'PYEOF' 2>&1 | tee "$OUT_DIR/cost_curve.log"
import json, sys
from tree_search.cost_curve import measure_cost_curve
for shape in ("smollm2-135m", "llama-7b"):
    curve = measure_cost_curve(shape, tokens=(1, 2, 4, 8, 16, 32, 64), batches=(1, 8, 32), context=1024,
                               dtype="bfloat16", device="cuda", repeats=10, progress=False)
    with open(f"{sys.argv[1]}/cost_curve_{shape}.json", "w") as handle:
        json.dump(curve.to_json(), handle, indent=1)
    for batch in curve.batches:
        print(shape, "batch", batch, {n: round(curve.relative(batch, n), 3) for b, n in sorted(curve.points) if b == batch})
PYEOF
CURVE_RC=${PIPESTATUS[0]}
echo "gpu_check: cost curves exit status $CURVE_RC"

[ "$TESTS_RC" -eq 0 ] && [ "$BENCH_RC" -eq 0 ] && [ "$CURVE_RC" -eq 0 ]
