#!/usr/bin/env bash
# Greedy outputs token for token in bfloat16 and float32: no speculation one request at a time
# against all at once, and EntMTP (default settings) against no speculation both ways; 16 MT-bench
# test prompts x 128 tokens, in-process vLLM engines, one after another. From the repository root:
#   bash docs/results/correctness/b_greedy_dtype/run.sh
set -euo pipefail
HERE=docs/results/correctness/b_greedy_dtype
N=${N:-16}; MAX_TOKENS=${MAX_TOKENS:-128}
for dtype in ${DTYPES:-bfloat16 float32}; do
  for mode in nospec entmtp; do
    for batch in one all; do
      log=${TMPDIR:-/tmp}/greedy-$mode-$dtype-$batch.log
      OMP_NUM_THREADS=2 .venv/bin/python $HERE/greedy_outputs.py $mode $dtype $batch $HERE "$N" "$MAX_TOKENS" > "$log" 2>&1 \
        || { tail -30 "$log"; exit 1; }
      tail -1 "$log"
    done
  done
done
.venv/bin/python $HERE/compare.py $HERE
