#!/usr/bin/env bash
# Issue #19 at temperature 0.7 after sampled verification went to one pass per step (SampledRows,
# the lossless rule walked on the host, the two-level sample): the protocol of ../epyc_interleaved
# (every server up at once, --interleave 4, the front door's defaults for every server, MT-bench
# test split, 46 prompts, 128 tokens, 3 rounds), concurrency 1 and 8.
#   t07:      this project's client
#   t07_vllm: vLLM's own client (`vllm bench serve`'s benchmark code)
# Run from the repository root with nothing else on the cores.
set -euo pipefail
D=docs/results/serving/epyc_sampled_verify
STAGES=${STAGES:-"t07 t07_vllm"}
common=(--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress --rounds 3 --interleave 4
        --concurrency 1,8 --temperature 0.7)
for s in $STAGES; do
  case $s in
    t07) .venv/bin/entmtp bench serve "${common[@]}" --out $D/t07 ;;
    t07_vllm) .venv/bin/entmtp bench serve "${common[@]}" --client vllm --out $D/t07_vllm ;;
    *) echo "unknown stage $s (t07, t07_vllm)"; exit 1 ;;
  esac
done
