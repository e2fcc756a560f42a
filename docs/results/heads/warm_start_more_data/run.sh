#!/usr/bin/env bash
# Issue #21: the shipped 4-layer Hydra heads trained further on answers they never saw. The ShareGPT
# train split has 8852 first turns; the shipped heads were trained on the first 5600 answered
# (../selfdistill_1m). `gen` answers the other 3252 (the same settings, archived with the first ones
# in ../selfdistill_1m/answers.jsonl.gz); `subset` keeps the new records and the old held-out ones;
# `cache` runs the teacher over them; `train` starts from the shipped heads (--init-heads; step 0 is
# their score on the same held-out positions); `trainpp` does the same with a Hydra++ prefix layer
# (fresh, the identity at step 0) over the same heads; `engine` measures engine τ as ../selfdistill_1m did.
# Every stage resumes. Run from the repository root; work goes to runs/heads2/ (not in git):
#   STAGES="gen subset cache train trainpp engine" bash docs/results/heads/warm_start_more_data/run.sh
set -euo pipefail
HERE=docs/results/heads/warm_start_more_data
SD=docs/results/heads/selfdistill_1m
RUN=${RUN:-runs/heads2}
STEPS=${STEPS:-5000}              # optimizer steps of 256 positions over the new records (≈ 2 epochs)
LR=${LR:-0.0003}                  # a third of the first run's peak: the heads start trained
THREADS=${THREADS:-2}
BUDGET=${BUDGET:-}                # optional wall-time budget in seconds: the schedule ends there (or at STEPS)
STAGES=${STAGES:-"gen subset cache train trainpp engine"}
SHIPPED=$RUN/shipped_heads        # a copy of the heads shipped when the run started (they may be replaced after it)
PY=.venv/bin/python
mkdir -p "$RUN" "$HERE/engine"
[ -d "$SHIPPED" ] || cp -r entmtp_vllm/assets/heads/smollm2-135m-hydra "$SHIPPED"
for stage in $STAGES; do
  case $stage in
  gen)    # all 8852 train-split first turns: the first 5600 come back from the archive
    RUN=$RUN PROMPTS=8852 STAGES=gen bash $SD/run.sh ;;
  subset) # the records after the first 5600 (never trained on) and the first run's held-out records
    $PY - "$RUN/answers.jsonl" "$RUN/answers_more.jsonl" <<'PY'
import json, shutil, sys
from entmtp_vllm.training.teacher_cache import split_of
src, dst = sys.argv[1], sys.argv[2]
lines = [l for l in open(src) if l.strip()]
keep = [l for i, l in enumerate(lines) if i >= 5600 or split_of(json.loads(l)["id"]) == "val"]
open(dst, "w").writelines(keep)
shutil.copy(src + ".meta.json", dst + ".meta.json")  # the generation settings, for the model card
print(f"{len(keep)} of {len(lines)} records: {len(lines) - 5600} new, {len(keep) - len(lines) + 5600} of the first run's held out")
PY
    ;;
  cache)  # the base model (transformers, float32) over prompt + answer: hidden states and top-32
    .venv/bin/entmtp train-heads --data "$RUN/answers_more.jsonl" --cache "$RUN/cache_more" --cache-dtype float32 \
      --threads "$THREADS" --stop-after cache 2>&1 | grep -v Loading | tee -a "$HERE/cache.log" ;;
  train)  # from the shipped heads, a new cosine schedule at a lower peak, the best evaluation exported
    .venv/bin/entmtp train-heads --kind hydra --num-layers 4 --data "$RUN/answers_more.jsonl" --cache "$RUN/cache_more" \
      --no-cache-update --init-heads "$SHIPPED" --steps "$STEPS" --lr "$LR" --threads "$THREADS" \
      --work-dir "$RUN/warm" --out "$RUN/warm/heads" --resume --export best --weights int8 ${BUDGET:+--time-budget "$BUDGET"} \
      >> "$HERE/train.log" 2>&1 ;;
  trainpp) # the same run with a Hydra++ prefix layer: the same heads to start from, data, steps and learning
           # rate; the prefix layer starts as the identity, so the pair measures what the layer adds
    .venv/bin/entmtp train-heads --kind hydra --num-layers 4 --prefix-layer --data "$RUN/answers_more.jsonl" \
      --cache "$RUN/cache_more" --no-cache-update --init-heads "$SHIPPED" --steps "$STEPS" --lr "$LR" --threads "$THREADS" \
      --work-dir "$RUN/warm_pp" --out "$RUN/warm_pp/heads" --resume --export best --weights int8 \
      ${BUDGET:+--time-budget "$BUDGET"} >> "$HERE/train_pp.log" 2>&1 ;;
  engine) # engine τ (reference engine, greedy, float32, the first 10 test prompts, 128 tokens) on the four
          # test splits, as ../selfdistill_1m: the new and the shipped heads with mc_sim_7b_63 and the task's
          # bank (measured again on this machine: float32 kernels differ between CPUs, and the banks were
          # re-searched since, docs/search/heads4). Two jobs at a time, a core each; τ does not depend on
          # what else runs, the × AR speeds do (read them as rough).
    TREES=../shared/data/trees/medusa_hydra_trees.json
    for task in mt_bench gsm8k humaneval sharegpt; do
      BANK=bank:entmtp_vllm/assets/banks/smollm2-135m-$task.json
      for heads in ${ENGINE_HEADS:-"$RUN/warm/heads" "$RUN/warm_pp/heads" "$SHIPPED"}; do
        [ -f "$heads/heads.json" ] || continue
        name=$([ "$heads" = "$SHIPPED" ] && echo shipped || basename "$(dirname "$heads")")
        [ -f "$HERE/engine/${task}_$name/offline.json" ] && continue
        while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
        OMP_NUM_THREADS=1 .venv/bin/entmtp bench offline --dataset $task --split test -n 10 --max-tokens 128 --dtype float32 \
          --methods "tree:$TREES#mc_sim_7b_63,$BANK" --threads 1 --heads "$heads" --no-progress --out "$HERE/engine/${task}_$name" \
          > "$HERE/engine/${task}_$name.log" 2>&1 &
      done
    done
    wait
    $PY $SD/compare.py "$HERE/engine" --heads shipped="shipped Hydra (4 layers, 1.1M tokens)" \
      --heads warm="warm start (+ 0.64M new tokens)" --heads warm_pp="warm start + prefix layer (Hydra++)" --shipped shipped ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
