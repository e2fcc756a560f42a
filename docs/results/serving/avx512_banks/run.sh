#!/usr/bin/env bash
# Issues #21 and #19: which heads tree the default vLLM bank should hold at concurrency 1 on a CPU
# with native bf16 (Intel Xeon, AVX512 + AMX; session 30, 2026-12-03), all in one run: the default
# bank (prompt-lookup chain, else heads 1-2 as a chain) and its two candidates from
# c1_bank_candidates_heads4 (heads 1-4 as a chain; an 8-node Hydra tree) as EntMTP variants,
# against vLLM without speculation and vLLM ngram, every server started by
# `entmtp bench serve --compare` with the same arguments (the front door's defaults: bf16 here),
# 16 MT-bench test prompts, greedy, 128 tokens, this project's client, three rounds with the order
# rotated. Run from the repository root with nothing else on the cores (about 35 minutes).
set -euo pipefail
C=docs/results/serving/c1_bank_candidates_heads4
.venv/bin/entmtp bench serve --compare --methods vllm,ngram,entmtp \
  --variant "chain4={\"bank\": \"$C/chain4.json\"}" --variant "tree8={\"bank\": \"$C/tree8.json\"}" \
  --dataset mt_bench --split test -n 16 --concurrency 1 --max-tokens 128 --rounds 3 --no-progress \
  --out docs/results/serving/avx512_banks
