#!/usr/bin/env bash
# Issue #21, while the train stage is still running: export each kind's best heads so far and
# measure the engine τ they give (reference engine, greedy, float32, MT-bench test split, 10
# prompts, 128 tokens, the published mc_sim_7b_63 tree) next to the shipped heads. τ only: the
# trainings keep the cores, so the tok/s of these runs mean nothing.
# The runs are not disturbed: their best.pt and newest checkpoint are copied to a scratch folder
# ($RUN/snapshot/<kind>), and `train-heads --resume --steps <that checkpoint's step>` there only
# exports (no step is left to train).
#   bash docs/results/heads/selfdistill_1m/snapshot.sh        # writes $HERE/snapshot/
set -euo pipefail
HERE=docs/results/heads/selfdistill_1m
RUN=${RUN:-runs/heads2}
OUT=${OUT:-$HERE/snapshot}
TREES=../shared/data/trees/medusa_hydra_trees.json
mkdir -p "$OUT"
for kind in hydra4 hydrapp; do
  snap=$RUN/snapshot/$kind
  rm -rf "$snap"
  mkdir -p "$snap/checkpoints"
  latest=$(ls "$RUN/$kind/checkpoints"/step_*.pt | tail -1)
  cp "$RUN/$kind/best.pt" "$snap/"
  cp "$latest" "$snap/checkpoints/"
  step=$((10#$(basename "$latest" .pt | sed 's/^step_//')))
  extra=$([ $kind = hydrapp ] && echo --prefix-layer || true)
  .venv/bin/entmtp train-heads --kind hydra --num-layers 4 $extra --data "$RUN/answers.jsonl" --cache "$RUN/cache" \
    --no-cache-update --steps "$step" --threads 1 --work-dir "$snap" --out "$snap/heads" --resume --export best \
    2>&1 | grep -v -E "Loading|hydra heads:" | tee "$OUT/export_$kind.log"
done
for name in shipped hydra4 hydrapp; do
  heads=$([ $name = shipped ] && echo entmtp_vllm/assets/heads/smollm2-135m-hydra || echo "$RUN/snapshot/$name/heads")
  .venv/bin/entmtp bench offline --dataset mt_bench --split test -n 10 --max-tokens 128 --dtype float32 \
    --methods "tree:$TREES#mc_sim_7b_63" --heads "$heads" --threads 1 --no-progress --out "$OUT/mt_bench_$name"
done
