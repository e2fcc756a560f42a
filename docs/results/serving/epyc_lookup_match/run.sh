#!/usr/bin/env bash
# Issue #19's protocol (as epyc_threads: every server up at once, the methods taking turns,
# `--interleave 4`, OMP_NUM_THREADS=2 for every server) after the step budget began drafting depth
# by depth, with the default bank's lookup chain only on a match of 2 or more tokens. Run from the
# repository root with nothing else on the cores. The front door's defaults for every server,
# MT-bench test split (46 prompts), 128 tokens, 3 rounds.
#   vllm:   concurrency 1, 4, 8, 16 with vLLM's own client (`vllm bench serve`'s benchmark)
#   greedy: the same with this project's client
#   t07:    temperature 0.7 at 1 and 8, this project's client (not in the default run)
set -euo pipefail
D=docs/results/serving/epyc_lookup_match
STAGES=${STAGES:-"vllm greedy"}
common=(--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress --rounds 3 --interleave 4)
for s in $STAGES; do
  case $s in
    vllm) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4,8,16 --client vllm --out $D/vllm_client ;;
    greedy) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4,8,16 --out $D/greedy ;;
    t07) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,8 --temperature 0.7 --out $D/t07 ;;
    *) echo "unknown stage $s (vllm, greedy, t07)"; exit 1 ;;
  esac
done
