#!/usr/bin/env bash
# Issue #19 item 3: vLLM's process layout on a 2-core CPU, then issue #19's measurement with the
# layout the front door now picks. Run from the repository root with nothing else on the cores.
#   layout:  no speculation, ngram and EntMTP with the worker inside the engine core's process
#            (--in-process) and with vLLM's own three processes (--no-in-process), 16 MT-bench test
#            prompts at 1 and 16, one round each (about 18 minutes)
#   greedy:  the front door's defaults (in process), all 46 MT-bench test prompts at 1, 4, 8, 16,
#            greedy, 2 rounds, this project's client (about 20 minutes)
#   vllm:    the same with vLLM's own client (`vllm bench serve`), 2 rounds (about 20 minutes)
#   t07:     temperature 0.7 at 1 and 8, one round (about 12 minutes)
set -euo pipefail
D=docs/results/serving/process_layout
STAGES=${STAGES:-"layout greedy vllm t07"}
common="--compare --dataset mt_bench --split test --max-tokens 128 --no-progress"
for s in $STAGES; do
  case $s in
    layout) for layout in in-process no-in-process; do
              .venv/bin/entmtp bench serve $common -n 16 --concurrency 1,16 --rounds 1 --$layout --out $D/$layout
            done ;;
    greedy) .venv/bin/entmtp bench serve $common -n 46 --concurrency 1,4,8,16 --rounds 2 --out $D/greedy ;;
    vllm) .venv/bin/entmtp bench serve $common --client vllm -n 46 --concurrency 1,4,8,16 --rounds 2 --out $D/vllm_client ;;
    t07) .venv/bin/entmtp bench serve $common -n 46 --concurrency 1,8 --temperature 0.7 --rounds 1 --out $D/t07 ;;
  esac
done
