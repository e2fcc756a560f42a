#!/usr/bin/env bash
# Issue #19/#21: does a bigger head tree in the vLLM default bank pay at concurrency 1 on this CPU?
# The default bank, then the same bank with an 8-node Hydra tree (tree8.json) or a 4-head Hydra
# chain (chain4.json) in place of heads 1-2; each against its own no-speculation server. Run from
# the repository root with nothing else on the cores.
set -euo pipefail
D=docs/results/serving/c1_bank_candidates
COMMON="--compare --dataset mt_bench --split test -n 16 --concurrency 1 --max-tokens 128 --no-progress"
.venv/bin/entmtp bench serve $COMMON --methods vllm,entmtp --out $D/default
.venv/bin/entmtp bench serve $COMMON --methods vllm,entmtp --bank $D/tree8.json --out $D/tree8
.venv/bin/entmtp bench serve $COMMON --methods vllm,entmtp --bank $D/chain4.json --out $D/chain4
