#!/usr/bin/env bash
# Issue #19 (and #21's served target): served speed after the draft heads moved onto the packed CPU
# matrix multiply and the drafts started travelling back with each step's output (session 29,
# 2026-12-03), with the front door's defaults for every server (float32, the packed kernel, the KV
# cache sized by `entmtp serve`; EntMTP: the shipped 4-layer heads and the default vLLM bank),
# measured with this project's client; each level's servers started by `entmtp bench serve
# --compare` with the same arguments, 16 MT-bench test prompts, 128 tokens:
#   greedy  no speculation, vLLM ngram and EntMTP at concurrency 1, 4, 8, 16, three rounds
#           (server order rotated);
#   t07     the same three at T=0.7 (EntMTP: lossless acceptance), concurrency 1 and 8, two rounds;
#   chain4  (not in the default stages; STAGES=chain4) the default bank with heads 1-4 as a chain in
#           place of heads 1-2 (../c1_bank_candidates_heads4/chain4.json) against no speculation,
#           concurrency 1, three rounds (about 15 minutes).
# Run from the repository root with nothing else on the cores (about 65 minutes).
set -euo pipefail
D=docs/results/serving/packed_heads_load
STAGES=${STAGES:-"greedy t07"}
for s in $STAGES; do
  case $s in
    greedy) .venv/bin/entmtp bench serve --compare --dataset mt_bench --split test -n 16 --concurrency 1,4,8,16 \
              --max-tokens 128 --rounds 3 --no-progress --out $D/greedy ;;
    t07) .venv/bin/entmtp bench serve --compare --dataset mt_bench --split test -n 16 --concurrency 1,8 \
           --max-tokens 128 --temperature 0.7 --rounds 2 --no-progress --out $D/t07 ;;
    chain4) .venv/bin/entmtp bench serve --compare --methods vllm,entmtp \
              --bank docs/results/serving/c1_bank_candidates_heads4/chain4.json --dataset mt_bench --split test -n 16 \
              --concurrency 1 --max-tokens 128 --rounds 3 --no-progress --out $D/chain4 ;;
  esac
done
