#!/usr/bin/env bash
# Issue #19's protocol (as epyc_interleaved: every server up at once, the methods taking turns,
# `--interleave 4`) after the front door gave an in-process engine every core as torch threads
# (OMP_NUM_THREADS=2 on this 2-core machine, for every server alike; vLLM alone drops an
# in-process engine to 1). Run from the repository root with nothing else on the cores. The front
# door's defaults for every server, MT-bench test split (46 prompts), 128 tokens, 3 rounds.
#   greedy: concurrency 1, 4, 8, 16, this project's client
#   vllm:   the same with vLLM's own client (`vllm bench serve`'s benchmark)
#   t07:    temperature 0.7 at 1 and 8, this project's client (not in the default run)
#   c16:    concurrency 16 alone in turns of 16 prompts (--interleave 1), both clients (not in the
#           default run): at 16, --interleave 4 sends all 46 prompts in one turn per server
set -euo pipefail
D=docs/results/serving/epyc_threads
STAGES=${STAGES:-"greedy vllm"}
base=(--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress --rounds 3)
common=("${base[@]}" --interleave 4)
for s in $STAGES; do
  case $s in
    greedy) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4,8,16 --out $D/greedy ;;
    vllm) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4,8,16 --client vllm --out $D/vllm_client ;;
    t07) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,8 --temperature 0.7 --out $D/t07 ;;
    c16) for client in entmtp vllm; do
           .venv/bin/entmtp bench serve "${base[@]}" --interleave 1 --concurrency 16 --client $client --out $D/c16_turns16_$client
         done ;;
    *) echo "unknown stage $s (greedy, vllm, t07, c16)"; exit 1 ;;
  esac
done
