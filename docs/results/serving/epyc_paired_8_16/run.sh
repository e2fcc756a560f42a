#!/usr/bin/env bash
# Issue #19 at 8 and 16 requests, measured with more paired turns: the protocol of epyc_host_cuts
# (every server up at once, the methods taking turns, the front door's defaults for every server,
# OMP_NUM_THREADS=2, MT-bench test split, 46 prompts, 128 tokens, greedy) but `--interleave 2`
# and 5 rounds, so that at 16 each round has two turns per server (32 and 14 prompts) instead of
# one, and at 8 three (16, 16, 14) instead of two; the round's ratio is then taken over turns that
# alternate between the servers. Run from the repository root with nothing else on the cores.
#   vllm:   concurrency 8 and 16 with vLLM's own client (`vllm bench serve`'s benchmark)
#   greedy: the same with this project's client
#   t07:    temperature 0.7 at 1 and 8, this project's client, epyc_host_cuts' protocol
#           (--interleave 4, 3 rounds)
set -euo pipefail
D=docs/results/serving/epyc_paired_8_16
STAGES=${STAGES:-"vllm greedy"}
common=(--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress)
paired=(--rounds 5 --interleave 2 --concurrency 8,16)
for s in $STAGES; do
  case $s in
    vllm) .venv/bin/entmtp bench serve "${common[@]}" "${paired[@]}" --client vllm --out $D/vllm_client ;;
    greedy) .venv/bin/entmtp bench serve "${common[@]}" "${paired[@]}" --out $D/greedy ;;
    t07) .venv/bin/entmtp bench serve "${common[@]}" --rounds 3 --interleave 4 --concurrency 1,8 --temperature 0.7 --out $D/t07 ;;
    *) echo "unknown stage $s (vllm, greedy, t07)"; exit 1 ;;
  esac
done
