#!/usr/bin/env bash
# Issue #19 item 3: where a decode step's time goes, no speculation against EntMTP, one process
# each, sampled by py-spy. Run from the repository root with nothing else on the cores.
#   N=16 MAX_TOKENS=128 bash docs/results/serving/step_profile/run.sh   (writes c16/; N=1 writes c1/)
# DTYPE: the model's dtype (default float32); RATE: py-spy samples a second (default 50).
set -euo pipefail
HERE=docs/results/serving/step_profile
N=${N:-16}; MAX_TOKENS=${MAX_TOKENS:-128}; RATE=${RATE:-50}
OUT=${OUT:-$HERE/c$N}
mkdir -p "$OUT"
for mode in nospec entmtp; do
  rm -f "$OUT/ready"
  OMP_NUM_THREADS=2 .venv/bin/python $HERE/step_profile.py $mode "$OUT" "$N" "$MAX_TOKENS" > "$OUT/$mode.log" 2>&1 &
  job=$!
  while [ ! -f "$OUT/ready" ]; do sleep 1; kill -0 $job 2>/dev/null || { cat "$OUT/$mode.log"; exit 1; }; done
  .venv/bin/py-spy record --pid "$(cat "$OUT/ready")" --rate "$RATE" --format raw --output "$OUT/$mode.pyspy.txt" --nonblocking || true
  wait $job
done
.venv/bin/python $HERE/analyze.py "$OUT"
