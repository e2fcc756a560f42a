#!/usr/bin/env bash
# The tree-search pipeline for the embedded model, task after task, one job at a time, one torch
# thread: frontier -> throughput -> heldout -> calibrate -> compare -> regimes -> debias. Every stage resumes or is
# skipped once its output exists, so rerunning this script continues where it stopped. Run it from
# a copy (bash reads a script while it runs):
#
#   mkdir -p runs/search && cp docs/search/run_search.sh runs/search/run.sh
#   nohup bash runs/search/run.sh mt_bench sharegpt humaneval gsm8k > runs/search/pipeline.log 2>&1 &
#
# Costs on one CPU thread (AMD EPYC, SmolLM2-135M): AR ≈ 10-17 tok/s; trees above ~8 nodes are
# slower than AR, mc_sim_7b_63 ≈ 3 tok/s, so the engine runs use few prompts (THROUGHPUT_N, ...).
# HEADS=FOLDER searches for other heads than the shipped ones (the later stages read them from the
# frontier's log); RUNS=DIR puts the run folders elsewhere than runs/search.
set -u
cd "$(dirname "$(readlink -f "$0")")/../.." 2>/dev/null || true
[ -x .venv/bin/entmtp ] || { echo "no .venv/bin/entmtp: run from a copy two levels below a checkout (make setup)" >&2; exit 1; }
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
E=.venv/bin/entmtp
STAGES=${STAGES:-"frontier throughput heldout calibrate compare regimes debias"}
THROUGHPUT_N=${THROUGHPUT_N:-8}       # held-out test prompts timed per method
THROUGHPUT_SIZES=${THROUGHPUT_SIZES:-1,2,4,8,16,31}
CHECK_N=${CHECK_N:-5}                 # calibration prompts of the scheduler's engine check
TEST_N=${TEST_N:-16}                  # held-out test prompts of calibrate's Table-1 run
HELDOUT_N=${HELDOUT_N:-40}            # test prompts whose greedy trajectories the chosen policies are replayed on
COMPARE_N=${COMPARE_N:-48}           # test prompts of the timed EntMTP^tau vs EntMTP* comparison
DEBIAS_N=${DEBIAS_N:-5}               # calibration prompts self-rolled per tree (float32)
HEADS=${HEADS:-}                      # heads folder (default: the shipped heads)
RUNS=${RUNS:-runs/search}
stamp() { date -u +%H:%M:%S; }
run() { echo "[$(stamp)] $*"; local t0=$SECONDS; "$@"; local rc=$?; echo "[$(stamp)] rc=$rc after $((SECONDS - t0)) s: $2 $3"; return $rc; }
for TASK in "$@"; do
  D=$RUNS/$TASK
  for S in $STAGES; do
    case $S in
      frontier)
        [ -f "$D/frontier.json" ] && grep -q '"complete": true' "$D/frontier.json" && continue
        run $E search frontier --dataset "$TASK" --budget 64 --max-depth 4 -n 100 --max-tokens 128 \
            --dtype float32 --threads 1 --no-progress ${HEADS:+--heads "$HEADS"} --out "$D" || continue 2 ;;
      throughput)
        [ -f "$D/throughput/throughput.json" ] && continue
        run $E search throughput --frontier "$D" --sizes "$THROUGHPUT_SIZES" --reference mc_sim_7b_63 \
            --dtype bfloat16 --split test -n "$THROUGHPUT_N" --threads 1 --no-progress || continue 2 ;;
      heldout)
        [ -f "$D/heldout_replay/frontier.json" ] && grep -q '"complete": true' "$D/heldout_replay/frontier.json" && continue
        run $E search frontier --dataset "$TASK" --split test -n "$HELDOUT_N" --budget 4 --max-depth 4 --max-tokens 128 \
            --dtype float32 --threads 1 --no-progress ${HEADS:+--heads "$HEADS"} --out "$D/heldout_replay" || continue 2 ;;
      calibrate)
        [ -f "$D/calibrate/calibrate.json" ] && continue
        run $E search calibrate --bank "$D/throughput/bank_throughput.json" --frontier "$D" --dtype bfloat16 \
            -n "$CHECK_N" --test-n "$TEST_N" --reference mc_sim_7b_63 --heldout "$D/heldout_replay" --threads 1 \
            --no-progress || true ;;
      compare)
        # the bank's policy against EntMTP* (calibrate's best static, the baseline) and against every
        # other tree the policy switches between and the throughput run's best static, each as a static tree
        [ -f "$D/compare/offline.json" ] && continue
        B=$D/throughput/bank_throughput.json
        M=$(.venv/bin/python - "$D/calibrate/calibrate.json" "$B" <<'PY'
import json, sys
from tree_search.calibrate import policy_trees
best, bank = json.load(open(sys.argv[1]))["best"]["static"], json.load(open(sys.argv[2]))
statics = [best] + [f"static:{t}" for t in policy_trees(bank["policy"]) + [bank["metadata"]["best_static"]]]
print(",".join(["ar"] + [f"bank:{sys.argv[2]}:{s}" for s in dict.fromkeys(statics)] + [f"bank:{sys.argv[2]}"]))
PY
) || continue 2
        run $E bench offline --dataset "$TASK" --split test -n "$COMPARE_N" --dtype bfloat16 --threads 1 \
            --methods "$M" --baseline 2 ${HEADS:+--heads "$HEADS"} --out "$D/compare" --no-progress || true ;;
      regimes)
        [ -f "$D/regimes/regimes.json" ] && continue
        run $E search regimes --frontier "$D" --tree n16 --source replay --check-n 2 -n 100 --threads 1 \
            --no-progress || true ;;
      debias)
        [ -f "$D/debias.json" ] && continue
        run $E search debias --frontier "$D" --sizes 4,8,16,32 -n "$DEBIAS_N" --threads 1 --no-progress || true ;;
    esac
  done
done
echo "[$(stamp)] done: $*"
