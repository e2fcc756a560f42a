#!/usr/bin/env bash
# Issue #19's measurement at every level after the cap on draft nodes past a request's end
# (79c24c9; the code of fdb9ba8, unchanged since): the protocol of epyc_host_cuts (session 44):
# every server up at once, the front door's defaults (bf16 on this CPU, OMP_NUM_THREADS=2),
# `--interleave 4`, MT-bench test split, all 46 prompts, 128 tokens, 3 rounds.
#   vllm: greedy, vLLM's own client (`vllm bench serve`), concurrency 1, 4, 8, 16
#   t07:  T=0.7, this project's client, concurrency 1 and 8
#   greedy: greedy, this project's client, concurrency 8 and 16 (where the targets are closest)
#   greedy14: the same at concurrency 1 and 4
set -euo pipefail
D=docs/results/serving/epyc_after_cap
STAGES=${STAGES:-"vllm t07 greedy greedy14"}  # the order they ran in
common=(--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress --rounds 3 --interleave 4)
for s in $STAGES; do
  case $s in
    vllm) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4,8,16 --client vllm --out $D/vllm_client ;;
    t07) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,8 --temperature 0.7 --out $D/t07 ;;
    greedy) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 8,16 --out $D/greedy ;;
    greedy14) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4 --out $D/greedy_1_4 ;;
    *) echo "unknown stage $s (vllm, t07, greedy, greedy14)"; exit 1 ;;
  esac
done
