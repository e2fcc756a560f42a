#!/usr/bin/env bash
# T=0.7 (EntMTP: lossless acceptance) at 8 and 16 (OUT: the folder under avx512_steady, default t07) requests with the batch kept full: as run.sh's
# greedy stage, two rounds. Run from the repository root with nothing else on the cores (about 12 minutes).
set -euo pipefail
D=docs/results/serving/avx512_steady
.venv/bin/entmtp bench serve --compare --dataset mt_bench --split test -n 46 --concurrency 8,16 \
  --max-tokens 128 --temperature 0.7 --rounds 2 --no-progress --out $D/${OUT:-t07}
