#!/usr/bin/env bash
# Issue #21 item 6: with EntMTP's packed CPU matrix multiply (the front door's default since
# 2026-12-03), does a bigger Hydra tree beat the default vLLM bank at concurrency 1? The default
# bank with an 8-node Hydra tree (tree8.json) or heads 1-4 as a chain (chain4.json) in place of
# heads 1-2 (the banks of ../c1_bank_candidates_heads4), each against its own no-speculation
# server; 16 MT-bench test prompts, greedy, 128 tokens, this project's client, one round. The
# default bank's own run with the same settings is ../cpu_gemm_served/packed. Run from the
# repository root with nothing else on the cores.
set -euo pipefail
D=docs/results/serving/c1_bank_candidates_packed
BANKS=docs/results/serving/c1_bank_candidates_heads4
STAGES=${STAGES:-"tree8 chain4"}
for s in $STAGES; do
  .venv/bin/entmtp bench serve --compare --cpu-gemm packed --dataset mt_bench --split test -n 16 --concurrency 1 \
    --max-tokens 128 --no-progress --methods vllm,entmtp --bank $BANKS/$s.json --out $D/$s
done
