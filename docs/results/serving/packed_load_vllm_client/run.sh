#!/usr/bin/env bash
# Issue #19: served speed under load with the front door's defaults of 2026-12-03 (the 4-layer
# heads, the default vLLM bank, float32 on CPUs without native bf16, EntMTP's packed CPU matrix
# multiply for every server, the KV cache sized by `entmtp serve`), measured with vLLM's own client
# (`vllm bench serve`, openai-chat, the prompts as a custom dataset): no speculation, vLLM ngram and
# EntMTP, each started by `entmtp bench serve --compare` with the same arguments, 16 MT-bench test
# prompts, greedy, 128 tokens, concurrency 1, 4, 8, 16, three rounds with the order rotated.
# Run from the repository root with nothing else on the cores (about 35 minutes).
set -euo pipefail
.venv/bin/entmtp bench serve --compare --client vllm --dataset mt_bench --split test -n 16 --concurrency 1,4,8,16 \
  --max-tokens 128 --rounds 3 --no-progress --out docs/results/serving/packed_load_vllm_client
