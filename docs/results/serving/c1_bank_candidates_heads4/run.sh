#!/usr/bin/env bash
# Issue #21 items 5-6: the vLLM default bank with the 4-layer heads shipped on 2026-12-03. At
# concurrency 1 on 16 MT-bench test prompts (greedy, 128 tokens, this project's client, the front
# door's defaults): the default bank against no speculation and vLLM's ngram (--rounds 2, order
# rotated), then the same bank with an 8-node Hydra tree (tree8.json) or heads 1-4 as a chain
# (chain4.json) in place of heads 1-2, each against its own no-speculation server. The same runs
# as ../c1_bank_candidates (the 1-layer heads). Run from the repository root with nothing else on
# the cores.
set -euo pipefail
D=docs/results/serving/c1_bank_candidates_heads4
COMMON="--compare --dataset mt_bench --split test -n 16 --concurrency 1 --max-tokens 128 --no-progress"
STAGES=${STAGES:-"default tree8 chain4"}
for s in $STAGES; do
  case $s in
  default) .venv/bin/entmtp bench serve $COMMON --methods vllm,ngram,entmtp --rounds 2 --out $D/default ;;
  *)       .venv/bin/entmtp bench serve $COMMON --methods vllm,entmtp --bank $D/$s.json --out $D/$s ;;
  esac
done
