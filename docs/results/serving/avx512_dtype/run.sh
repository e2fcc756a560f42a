#!/usr/bin/env bash
# Issue #19: bf16 against float32 served on a CPU with native bf16 (Intel Xeon, AVX512 + AMX,
# avx512_bf16 / amx_bf16; session 30, 2026-12-03). Each dtype: no speculation and EntMTP (the
# shipped heads, the default vLLM bank), started by `entmtp bench serve --compare` with the same
# arguments, 16 MT-bench test prompts, 128 tokens, greedy, concurrency 1, two rounds (server order
# rotated). bf16 is what the front door leaves (vLLM's default) on this CPU; float32 turns on the
# packed matrix multiply as well (the front door's automatic --cpu-gemm).
# Run from the repository root with nothing else on the cores (about 25 minutes).
set -euo pipefail
D=docs/results/serving/avx512_dtype
STAGES=${STAGES:-"bf16 fp32"}
for s in $STAGES; do
  case $s in
    bf16) .venv/bin/entmtp bench serve --compare --methods vllm,entmtp --dataset mt_bench --split test -n 16 \
            --concurrency 1 --max-tokens 128 --rounds 2 --no-progress --out $D/bf16 ;;
    fp32) .venv/bin/entmtp bench serve --compare --methods vllm,entmtp --server-args=--dtype=float32 \
            --dataset mt_bench --split test -n 16 --concurrency 1 --max-tokens 128 --rounds 2 --no-progress --out $D/fp32 ;;
  esac
done
