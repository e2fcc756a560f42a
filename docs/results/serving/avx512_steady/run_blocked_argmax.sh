#!/usr/bin/env bash
# After ecd40ab (greedy_tokens in two passes over blocks of the row) and the root rows copied only
# when the policy reads them: no speculation and EntMTP at 16 requests with the batch kept full,
# greedy, 2 rounds, to read EntMTP's share of the step against run_batched_topk.sh's. Run from the
# repository root with nothing else on the cores (about 8 minutes).
set -euo pipefail
D=docs/results/serving/avx512_steady
.venv/bin/entmtp bench serve --compare --methods vllm,entmtp --dataset mt_bench --split test -n 46 \
  --concurrency 16 --max-tokens 128 --rounds 2 --no-progress --out $D/blocked_argmax
