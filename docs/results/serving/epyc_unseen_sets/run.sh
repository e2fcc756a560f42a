#!/usr/bin/env bash
# Issue #19's measurement on prompts no serving default was chosen on: 32 GSM8K and 32 Spec-Bench
# test-split prompts (seed 2026; GSM8K never served here before, Spec-Bench's test split served once,
# in session 46), the code of fdb9ba8's entmtp_vllm (db9a995's), every server
# up at once, the front door's defaults (bf16 on this CPU, OMP_NUM_THREADS=2), `--interleave 4`
# (at 16 each server gets all 64 prompts in one turn, at 1 turns of 4), 128 tokens, greedy, 3 rounds.
#   vllm: vLLM's client at 1, 4, 8, 16
#   own:  this project's client at 8 and 16
#   wave: vLLM's client at 8 and 16 with `--interleave 1`: every turn is one wave of 8 (16) prompts
#         sent at once, so a turn ends with its slowest request (the worst case for speculation)
# Run from the repository root; nothing else running (`pgrep -af VLLM` empty).
set -euo pipefail
D=docs/results/serving/epyc_unseen_sets
STAGES=${STAGES:-"vllm own wave"}  # the order they ran in
common=(--compare --dataset gsm8k,spec_bench --split test -n 32 --seed 2026 --max-tokens 128 --no-progress --rounds 3)
lscpu > $D/lscpu.txt
for s in $STAGES; do
  case $s in
    vllm) .venv/bin/entmtp bench serve "${common[@]}" --interleave 4 --concurrency 1,4,8,16 --client vllm --out $D/vllm_client ;;
    own) .venv/bin/entmtp bench serve "${common[@]}" --interleave 4 --concurrency 8,16 --out $D/own_client ;;
    wave) .venv/bin/entmtp bench serve "${common[@]}" --interleave 1 --concurrency 8,16 --client vllm --out $D/vllm_client_waves ;;
    *) echo "unknown stage $s (vllm, own, wave)"; exit 1 ;;
  esac
done
