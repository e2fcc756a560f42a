#!/usr/bin/env bash
# Issue #21's offline target (EntMTP*, heads-only trees, >= 1.5x AR on every task) measured in
# bfloat16 on a CPU with native bf16 (AVX512 + AMX), where session 27 measured it in float32 on an
# AVX2 CPU (0.80-0.96x). Per task: AR against the heads-only frontier's trees (session 27's
# re-search for the shipped 4-layer heads, docs/search/heads4/TASK/bank.json, and chain:1 = its n1),
# 16 test prompts x 128 tokens, one thread, the methods taking turns step by step; two tasks at a
# time, one per core. Run from the repository root with nothing else on the cores (~25 minutes).
# TASKS: which tasks (default all four); N: prompts per task.
set -euo pipefail
OUT=docs/results/offline/heads_only_avx512
N=${N:-16}
run_task() {
  local task=$1 bank=docs/search/heads4/$1/bank.json
  .venv/bin/entmtp bench offline --dataset "$task" --split test -n "$N" --max-tokens 128 --dtype bfloat16 \
    --threads 1 --interleave step --no-progress \
    --methods "ar,tree:chain:1,tree:$bank#n4,tree:$bank#n8,tree:$bank#n16" --out "$OUT/$task" > "$OUT/$task.log" 2>&1
}
set -- ${TASKS:-mt_bench gsm8k humaneval sharegpt}
while [ $# -gt 0 ]; do
  run_task "$1" & first=$!
  if [ $# -gt 1 ]; then run_task "$2" & second=$!; wait $second; fi
  wait $first
  shift $(( $# > 1 ? 2 : 1 ))
done
