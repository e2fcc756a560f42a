#!/usr/bin/env bash
# Issue #19's protocol (as epyc_threads: every server up at once, the methods taking turns,
# `--interleave 4`, OMP_NUM_THREADS=2 for every server) after the step budget began drafting depth
# by depth, with the default bank's lookup chain only on a match of 2 or more tokens, after the
# host-side cuts of session 44 (prompt lookup by byte search, shared sampling parameters, fewer
# per-request tensor calls in drafting and verification). Run from the
# repository root with nothing else on the cores. The front door's defaults for every server,
# MT-bench test split (46 prompts), 128 tokens, 3 rounds.
#   vllm:   concurrency 1, 4, 8, 16 with vLLM's own client (`vllm bench serve`'s benchmark)
#   greedy: the same with this project's client
#   vllm2:  the vllm stage again, into vllm_client_2 (a second sample of the same protocol)
#   t07:    temperature 0.7 at 1 and 8, this project's client (not in the default run)
set -euo pipefail
D=docs/results/serving/epyc_host_cuts
STAGES=${STAGES:-"vllm greedy"}
common=(--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress --rounds 3 --interleave 4)
for s in $STAGES; do
  case $s in
    vllm) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4,8,16 --client vllm --out $D/vllm_client ;;
    vllm2) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4,8,16 --client vllm --out $D/vllm_client_2 ;;
    greedy) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,4,8,16 --out $D/greedy ;;
    t07) .venv/bin/entmtp bench serve "${common[@]}" --concurrency 1,8 --temperature 0.7 --out $D/t07 ;;
    *) echo "unknown stage $s (vllm, vllm2, greedy, t07)"; exit 1 ;;
  esac
done
