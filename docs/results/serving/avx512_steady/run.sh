#!/usr/bin/env bash
# Issue #19 at 8 and 16 requests with the batch kept full: the whole MT-bench test split (46
# prompts) instead of 16, so at concurrency 16 the clients refill the batch as requests finish
# (with 16 prompts at 16 the run is one wave: its time is the slowest request's, and a speculative
# server's batch empties while it waits for it). No speculation, vLLM ngram and EntMTP, the front
# door's defaults (bf16 on this CPU: Intel Xeon, AVX512 + AMX), greedy, 128 tokens, three rounds
# (server order rotated), this project's client; then the same with vLLM's client, two rounds.
# Run from the repository root with nothing else on the cores (about 25 minutes).
set -euo pipefail
D=docs/results/serving/avx512_steady
STAGES=${STAGES:-"greedy vllm"}
for s in $STAGES; do
  case $s in
    greedy) .venv/bin/entmtp bench serve --compare --dataset mt_bench --split test -n 46 --concurrency 8,16 \
              --max-tokens 128 --rounds 3 --no-progress --out $D/greedy ;;
    vllm) .venv/bin/entmtp bench serve --compare --client vllm --dataset mt_bench --split test -n 46 \
            --concurrency 8,16 --max-tokens 128 --rounds 2 --no-progress --out $D/vllm_client ;;
  esac
done
