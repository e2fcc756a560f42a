#!/usr/bin/env bash
# Sampled serving measured with vLLM's own client (`vllm bench serve`), EntMTP against vLLM
# without speculation, every server up at once and the prompts sent in turns (--interleave 1):
#
#   speed/   T=0.7, unseeded (what most clients send): output tok/s at concurrency 1 and 8, in the
#            dtype `entmtp serve` picks for this CPU
#   seeded/  T=0.7 with --request-seed 1234 on every request, float32: each EntMTP output compared
#            with vLLM's, prompt by prompt ("Outputs identical to `vllm`'s" in compare.md)
#
#   bash docs/results/serving/sampled/run.sh            # from anywhere; ~15 minutes on 2 cores
#
# Each folder gets compare.md / .json / .png (kept), the servers' logs and vLLM's per-turn
# results (left beside them, not kept).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
entmtp="${ENTMTP:-$repo/.venv/bin/entmtp}"
common=(bench serve --compare --methods vllm,entmtp --client vllm --dataset mt_bench --split test -n 16
        --max-tokens 128 --temperature 0.7 --concurrency 1,8 --interleave 1 --no-progress)

"$entmtp" "${common[@]}" --out "$here/speed"
"$entmtp" "${common[@]}" --request-seed 1234 --server-args "--dtype float32" --out "$here/seeded"
