#!/usr/bin/env bash
# In process at 16 requests (one engine each run, bf16, the front door's 2 threads): no speculation,
# EntMTP with its CPU rows attention (ENTMTP_CPU_ROWS_ATTENTION=on; it was the default when this
# ran, at fe1f66d) and EntMTP without it (=off; the default since ed9d3e2),
# rotating order, ROUNDS rounds, on MT-bench's 46 test prompts and 64 Spec-Bench test prompts.
# One JSON line per run in ab.jsonl (the run's label first). Run from the repository root.
set -euo pipefail
D=docs/results/serving/epyc_attention_rows
ROUNDS=${ROUNDS:-3}
SEQS=${SEQS:-16}
run() {  # label dataset prompts method [env...]
  local label=$1 dataset=$2 prompts=$3 method=$4; shift 4
  line=$(env "$@" OMP_NUM_THREADS=2 VLLM_LOGGING_LEVEL=ERROR DATASET=$dataset \
    .venv/bin/python docs/results/serving/epyc_lookup_match/policy_ab.py $method $prompts $SEQS 2>/dev/null | tail -1)
  echo "{\"label\": \"$label\", \"dataset\": \"$dataset\", \"seqs\": $SEQS, \"result\": $line}" | tee -a $D/ab.jsonl
}
for round in $(seq 1 "$ROUNDS"); do
  for dataset in mt_bench:46 spec_bench:64; do
    name=${dataset%%:*}; n=${dataset##*:}
    case $(( round % 3 )) in
      1) order="none rows off" ;;
      2) order="rows off none" ;;
      0) order="off none rows" ;;
    esac
    for m in $order; do
      case $m in
        none) run none $name $n none ;;
        rows) run rows $name $n entmtp ENTMTP_CPU_ROWS_ATTENTION=all ;;  # session 48's `on` (b170897 renamed it)
        off) run off $name $n entmtp ENTMTP_CPU_ROWS_ATTENTION=off ;;
      esac
    done
  done
done
