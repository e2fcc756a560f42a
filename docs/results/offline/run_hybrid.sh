#!/bin/bash
# Hybrid trees (prompt lookup + Hydra heads) vs lookup alone, Hydra alone and AR, reference engine.
# Run from the repository root (one torch thread; an otherwise idle machine for the timings):
#   nohup bash docs/results/offline/run_hybrid.sh > docs/results/offline/run_hybrid.log 2>&1 &
# (d1) greedy, bf16, held-out MT-bench + ShareGPT prompts; (d2) T=0.7 typical; (d3) T=0.7 lossless;
# (d4) the shipped default bank vs AR on the d1 prompts; (d5) T=0.7 typical again on twice the
# prompts, with the hybrid tree a superset of the lookup chain (lookup:4+chain:1) and the default bank.
set -u
cd "$(dirname "$0")/../../.."
ENT=.venv/bin/entmtp
OUT=docs/results/offline
ARCHIVE=docs/results/archive  # d2, superseded by d5
HYDRA=${HYDRA:-"tree:chain:1,tree:full:2,1"}
LOOKUP=${LOOKUP:-"tree:lookup:4"}
HYBRID=${HYBRID:-"tree:lookup:3+chain:1,tree:lookup:4+full:2,1"}
STAGES=${STAGES:-"d1 d2 d3 d4"}
COMMON="--dataset mt_bench,sharegpt --split test --max-tokens 128 --dtype bfloat16 --no-progress"

if [[ " $STAGES " == *" d1 "* ]]; then
  echo "(d1) greedy: $(date)"
  $ENT bench offline $COMMON -n 10 --methods "$HYDRA,$LOOKUP,$HYBRID" --out $OUT/d1_hybrid_greedy_bf16
  echo "(d1) exit $?: $(date)"
fi
for mode in typical lossless; do
  stage=$([ $mode = typical ] && echo d2 || echo d3)
  if [[ " $STAGES " == *" $stage "* ]]; then
    echo "($stage) T=0.7 $mode: $(date)"
    $ENT bench offline $COMMON -n 6 --temperature 0.7 --acceptance $mode \
      --methods "${HYDRA%%,*},$LOOKUP,${HYBRID%%,*}" --out $([ $stage = d2 ] && echo $ARCHIVE || echo $OUT)/${stage}_hybrid_t07_${mode}_bf16
    echo "($stage) exit $?: $(date)"
  fi
done
if [[ " $STAGES " == *" d4 "* ]]; then
  echo "(d4) the default bank vs AR, greedy: $(date)"
  $ENT bench offline $COMMON -n 10 --methods "bank:entmtp_vllm/assets/banks/smollm2-135m-lookup-switch.json" \
    --out $OUT/d4_default_bank_greedy_bf16
  echo "(d4) exit $?: $(date)"
fi
if [[ " $STAGES " == *" d5 "* ]]; then
  echo "(d5) T=0.7 typical, 12 prompts per dataset: $(date)"
  $ENT bench offline $COMMON -n 12 --temperature 0.7 --acceptance typical \
    --methods "tree:chain:1,$LOOKUP,tree:lookup:4+chain:1,bank:entmtp_vllm/assets/banks/smollm2-135m-lookup-switch.json" \
    --out $OUT/d5_hybrid_t07_typical_24_bf16
  echo "(d5) exit $?: $(date)"
fi
echo "all done: $(date)"
