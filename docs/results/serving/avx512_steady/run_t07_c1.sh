#!/usr/bin/env bash
# T=0.7 (EntMTP: lossless acceptance) at concurrency 1 after the sampler change (26d57a6), as
# avx512_load's t07 stage: 16 MT-bench test prompts, 128 tokens, two rounds. Run from the
# repository root with nothing else on the cores (about 12 minutes).
set -euo pipefail
D=docs/results/serving/avx512_steady
.venv/bin/entmtp bench serve --compare --dataset mt_bench --split test -n 16 --concurrency 1 \
  --max-tokens 128 --temperature 0.7 --rounds 2 --no-progress --out $D/t07_c1
