#!/usr/bin/env bash
# After 57794d3 (one softmax and one top-k per head call): no speculation and EntMTP at 16
# requests with the batch kept full, greedy, 2 rounds, to read EntMTP's phase timers (drafting)
# against run.sh's greedy stage. Run from the repository root with nothing else on the cores
# (about 8 minutes).
set -euo pipefail
D=docs/results/serving/avx512_steady
.venv/bin/entmtp bench serve --compare --methods vllm,entmtp --dataset mt_bench --split test -n 46 \
  --concurrency 16 --max-tokens 128 --rounds 2 --no-progress --out $D/batched_topk
