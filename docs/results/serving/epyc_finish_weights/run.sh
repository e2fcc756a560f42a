#!/usr/bin/env bash
# Issue #19: would weighting each request's tokens by how far it is from its end (the step budget
# favouring the requests that decide when a batch is done) raise served throughput at 8 and 16?
# The stages served1 and served2 need weights.patch applied to the code of b3f1634 (`git apply`); the patch adds
# `budget.remaining_weight` / `budget.remaining_per_pace` (not merged; its cap on nodes past a
# request's end was merged as 79c24c9). vLLM's client, every server up at once, the front door's
# defaults, OMP_NUM_THREADS=2, MT-bench test split, 46 prompts, 128 tokens, greedy, paired turns.
#   served1: no speculation, EntMTP, EntMTP with weight = (tokens to go / batch mean)
#   served2: no speculation, EntMTP, tokens to go squared, steps to go, steps to go squared
#   makespan: turn_makespan.py over both and over epyc_paired_8_16's vLLM-client run (no patch needed)
# Without the patch (79c24c9), sustained load, where no batch drains:
#   steady:    this project's client, `--duration 60` (prompts sent cyclically for 60 s, the
#              server's tokens counted over the window), servers one after another, 3 rounds
#   specbench: vLLM's client, 160 Spec-Bench test prompts per level in one go, servers one after
#              another, 3 rounds
#   sharegpt:  the same over 128 ShareGPT test prompts (the heads were trained on its train split)
set -euo pipefail
D=docs/results/serving/epyc_finish_weights
STAGES=${STAGES:-"steady specbench sharegpt makespan"}  # served1 served2: with weights.patch applied
common=(--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress --rounds 3 --interleave 2
        --concurrency 8,16 --client vllm --methods vllm,entmtp)
for s in $STAGES; do
  case $s in
    served1) .venv/bin/entmtp bench serve "${common[@]}" --variant 'rw1={"budget": {"remaining_weight": 1.0}}' --out $D/served1 ;;
    served2) .venv/bin/entmtp bench serve "${common[@]}" --variant 'rw2={"budget": {"remaining_weight": 2.0}}' \
               --variant 'fw1={"budget": {"remaining_weight": 1.0, "remaining_per_pace": true}}' \
               --variant 'fw2={"budget": {"remaining_weight": 2.0, "remaining_per_pace": true}}' --out $D/served2 ;;
    makespan) for f in $D/served1 $D/served2 docs/results/serving/epyc_paired_8_16/vllm_client; do
                echo "== $f"; .venv/bin/python $D/turn_makespan.py $f; done > $D/makespan.txt ;;
    steady) .venv/bin/entmtp bench serve --compare --methods vllm,entmtp --dataset mt_bench --split test -n 46 \
              --max-tokens 128 --no-progress --rounds 3 --duration 60 --concurrency 8,16 --out $D/steady ;;
    specbench) .venv/bin/entmtp bench serve --compare --client vllm --dataset spec_bench --split test -n 160 \
                 --max-tokens 128 --no-progress --rounds 3 --concurrency 8,16 --out $D/specbench ;;
    sharegpt) .venv/bin/entmtp bench serve --compare --client vllm --dataset sharegpt --split test -n 128 \
                --max-tokens 128 --no-progress --rounds 3 --concurrency 8,16 --out $D/sharegpt ;;
    *) echo "unknown stage $s (served1, served2, makespan, steady, specbench, sharegpt)"; exit 1 ;;
  esac
done
