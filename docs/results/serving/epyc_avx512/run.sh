#!/usr/bin/env bash
# Issue #19's measurement on a 2-core AMD EPYC with AVX512 + AVX512-BF16 (no AMX), with the heads
# on the engine's matrix multiply (oneDNN, weights prepacked). Run from the repository root with
# nothing else on the cores. The front door's defaults for every server (bf16 on this ISA, the
# worker inside the engine core), MT-bench test split, 128 tokens.
#   heads:   EntMTP with its heads on vLLM's oneDNN matrix multiply (the default) against torch's
#            F.linear (variant torchheads), beside no speculation, 46 prompts at 1 and 16, 2 rounds
#   greedy:  no speculation, ngram, EntMTP at 1, 4, 8, 16, greedy, 3 rounds, this project's client
#   vllm:    the same with vLLM's own client (`vllm bench serve`), 3 rounds
#   t07:     temperature 0.7 at 1 and 8, one round
set -euo pipefail
D=docs/results/serving/epyc_avx512
STAGES=${STAGES:-"heads greedy vllm t07"}
common="--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress"
for s in $STAGES; do
  case $s in
    heads) .venv/bin/entmtp bench serve $common --methods vllm,entmtp --variant 'torchheads={"head_gemm": "torch"}' \
             --concurrency 1,16 --rounds 2 --out $D/heads ;;
    greedy) .venv/bin/entmtp bench serve $common --concurrency 1,4,8,16 --rounds 3 --out $D/greedy ;;
    vllm) .venv/bin/entmtp bench serve $common --client vllm --concurrency 1,4,8,16 --rounds 3 --out $D/vllm_client ;;
    t07) .venv/bin/entmtp bench serve $common --concurrency 1,8 --temperature 0.7 --rounds 1 --out $D/t07 ;;
  esac
done
