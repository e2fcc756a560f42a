#!/usr/bin/env bash
# Issue #19 at 4, 8 and 16 requests on the 2-core AMD EPYC with AVX512-BF16 (no AMX) after the
# step budget's lookup rates learnt from undrafted proposals (94a6eae) and drafting's and
# verification's bookkeeping got cheaper (79d3506, and the commit after it). Run from the
# repository root with nothing else on the cores. The front door's defaults for every server (bf16
# on this ISA, the worker inside the engine core), MT-bench test split, 46 prompts, 128 tokens,
# 3 rounds.
#   greedy:  no speculation, ngram, EntMTP, this project's client
#   vllm:    the same with vLLM's own client (`vllm bench serve`)
#   c1:      concurrency 1 alone, this project's client (STAGES=c1; not in the default run)
#   t07:     temperature 0.7 at 1 and 8, 16 prompts, this project's client (STAGES=t07; not in the default run)
#   t07c8:   temperature 0.7 at 8 with all 46 prompts, this project's client (STAGES=t07c8; not in the default run)
set -euo pipefail
D=docs/results/serving/epyc_lookup_rates
STAGES=${STAGES:-"greedy vllm"}
common="--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress --concurrency 4,8,16 --rounds 3"
for s in $STAGES; do
  case $s in
    greedy) .venv/bin/entmtp bench serve $common --out $D/greedy ;;
    vllm) .venv/bin/entmtp bench serve $common --client vllm --out $D/vllm_client ;;
    c1) .venv/bin/entmtp bench serve ${common/--concurrency 4,8,16/--concurrency 1} --out $D/c1 ;;
    t07) few=${common/-n 46/-n 16}; .venv/bin/entmtp bench serve ${few/--concurrency 4,8,16/--concurrency 1,8} --temperature 0.7 --out $D/t07 ;;
    t07c8) .venv/bin/entmtp bench serve ${common/--concurrency 4,8,16/--concurrency 8} --temperature 0.7 --out $D/t07_c8 ;;
    *) echo "unknown stage $s (greedy, vllm, c1, t07, t07c8)"; exit 1 ;;
  esac
done
