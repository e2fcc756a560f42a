#!/usr/bin/env bash
# Issue #19 on a CPU with native bf16 (Intel Xeon, AVX512 + AMX: avx512_bf16, amx_bf16; session 30,
# 2026-12-03): served speed under load with the front door's defaults on that CPU (the model in
# vLLM's own dtype, bf16; vLLM's oneDNN matrix multiply, since the packed kernel takes float32 only;
# the KV cache sized by `entmtp serve`; EntMTP: the shipped 4-layer heads and the default vLLM
# bank). No speculation, vLLM ngram and EntMTP, each level's servers started by
# `entmtp bench serve --compare` with the same arguments, 16 MT-bench test prompts, 128 tokens:
#   greedy  this project's client, concurrency 1, 4, 8, 16, three rounds (server order rotated);
#   vllm    the same with vLLM's own client, two rounds (`vllm bench serve`, openai-chat, the prompts as a
#           custom dataset);
#   t07     this project's client at T=0.7 (EntMTP: lossless acceptance), concurrency 1 and 8,
#           two rounds.
# Run from the repository root with nothing else on the cores (about 120 minutes).
set -euo pipefail
D=docs/results/serving/avx512_load
STAGES=${STAGES:-"greedy vllm t07"}
for s in $STAGES; do
  case $s in
    greedy) .venv/bin/entmtp bench serve --compare --dataset mt_bench --split test -n 16 --concurrency 1,4,8,16 \
              --max-tokens 128 --rounds 3 --no-progress --out $D/greedy ;;
    vllm) .venv/bin/entmtp bench serve --compare --client vllm --dataset mt_bench --split test -n 16 \
            --concurrency 1,4,8,16 --max-tokens 128 --rounds 2 --no-progress --out $D/vllm_client ;;
    t07) .venv/bin/entmtp bench serve --compare --dataset mt_bench --split test -n 16 --concurrency 1,8 \
           --max-tokens 128 --temperature 0.7 --rounds 2 --no-progress --out $D/t07 ;;
  esac
done
