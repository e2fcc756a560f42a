#!/bin/bash
# Reference-engine measurements (docs/results/README.md). Run from the repository root:
#   nohup bash docs/results/offline/run_reference_engine.sh > docs/results/offline/run_reference_engine.log 2>&1 &
# (a) writes to docs/results/correctness/, (b) and (c) to docs/results/offline/.
# Waits for the shipped heads, then runs (a) greedy equality, (c) small trees vs AR (timing), (b) tau with mc_sim_7b_63.
set -u
cd "$(dirname "$0")/../../.."
ENT=.venv/bin/entmtp
export OMP_NUM_THREADS=1
HYDRA=entmtp_vllm/assets/heads/smollm2-135m-hydra
MEDUSA=entmtp_vllm/assets/heads/smollm2-135m-medusa
TREES=/work/shared/data/trees/medusa_hydra_trees.json
OUT=docs/results/offline
CORRECT=docs/results/correctness
STAGES=${STAGES:-"a b c"}  # e.g. STAGES="c b" bash docs/results/offline/run_reference_engine.sh

wait_for() { until [ -f "$1/heads.json" ] && [ -f "$1/heads.safetensors" ]; do sleep 60; done; sleep 10; }

if [[ " $STAGES " == *" a "* ]]; then
  wait_for $HYDRA
  echo "(a) greedy equality, fp32: $(date)"
  $ENT bench offline --dataset mt_bench,gsm8k,humaneval --split test -n 10 --max-tokens 128 --dtype float32 \
    --methods "tree:full:2,2,1,bank:$CORRECT/switching_check_bank.json,tree:$TREES#mc_sim_7b_63" \
    --check-equal --no-progress --out $CORRECT/a_greedy_equality_fp32
  echo "(a) exit $?: $(date)"
fi

if [[ " $STAGES " == *" c "* ]]; then
  wait_for $HYDRA
  echo "(c1) small-tree sweep, bf16, MT-bench calib: $(date)"
  $ENT bench offline --dataset mt_bench --split calib -n 8 --max-tokens 128 --dtype bfloat16 \
    --methods "tree:chain:1,tree:chain:2,tree:chain:3,tree:full:2,1,tree:full:3,1,tree:full:2,1,1" \
    --no-progress --out $OUT/c1_small_tree_sweep_bf16
  echo "(c1) exit $?: $(date)"
  BEST=$(.venv/bin/python -c "
import json; m = json.load(open('$OUT/c1_small_tree_sweep_bf16/offline.json'))['methods']
print(max((k for k in m if k != 'ar'), key=lambda k: m[k]['tokens_per_second']))")
  echo "(c2) picked $BEST; vs AR, bf16, MT-bench test + gsm8k test + humaneval test: $(date)"
  $ENT bench offline --dataset mt_bench,gsm8k,humaneval --split test -n 10 --max-tokens 128 --dtype bfloat16 \
    --methods "$BEST" --no-progress --out $OUT/c2_small_tree_vs_ar_bf16
  echo "(c2) exit $?: $(date)"
fi
if [[ " $STAGES " == *" b "* ]]; then
  wait_for $HYDRA; wait_for $MEDUSA
  echo "(b) tau mc_sim_7b_63, MT-bench test: $(date)"
  $ENT bench offline --dataset mt_bench --split test -n 1000 --max-tokens 128 --dtype float32 \
    --methods "tree:$TREES#mc_sim_7b_63,medusa:$TREES#mc_sim_7b_63" --no-progress --out $OUT/b_tau_mc_sim_7b_63
  echo "(b) exit $?: $(date)"
fi

echo "all done: $(date)"
