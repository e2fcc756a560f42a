#!/usr/bin/env bash
# Issue #19's protocol on Spec-Bench alone (long prompts: translation, summarization, RAG, math,
# QA, MT-bench-like), where session 46 measured 1.138x / 1.037x at 8 / 16 with older code
# (servers one after another). 96 test-split prompts (seed 7), the code of a3c95b6's entmtp_vllm,
# every server up at once, the front door's defaults (bf16 on this CPU, OMP_NUM_THREADS=2),
# `--interleave 4`, 128 tokens, greedy, 3 rounds, vLLM's client at 4, 8, 16.
# Run from the repository root; nothing else running (`pgrep -af VLLM` empty).
set -euo pipefail
D=docs/results/serving/epyc_specbench_test
lscpu > $D/lscpu.txt
.venv/bin/entmtp bench serve --compare --dataset spec_bench --split test -n 96 --seed 7 --max-tokens 128 \
  --no-progress --rounds 3 --interleave 4 --concurrency 4,8,16 --client vllm --out $D/vllm_client
