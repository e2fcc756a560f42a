#!/usr/bin/env bash
# The vLLM plugin's default bank served against candidates for the shipped heads. The candidates
# come from the tree search's frontiers for these heads (build_candidates.py); each is served as an
# EntMTP variant beside the default bank and vLLM without speculation, every server started by
# `entmtp bench serve --compare` with the same arguments (the front door's defaults), 16 MT-bench
# test prompts, greedy, 128 tokens, concurrency 1 and 4, three rounds with the order rotated. Run
# from the repository root with nothing else on the cores (about 30 minutes on 2 cores;
# `confirm`, the best candidate against the default bank again: 18 minutes).
#   STAGES="build served confirm" bash docs/search/vllm_default/run.sh
set -euo pipefail
HERE=docs/search/vllm_default
STAGES=${STAGES:-"build served"}
common="--compare --methods vllm,entmtp --dataset mt_bench --split test -n 16 --concurrency 1,4 --max-tokens 128 --rounds 3 --no-progress"
variant() { echo "$1={\"bank\": \"$HERE/candidates/$1.json\"}"; }
for stage in $STAGES; do
  case $stage in
    build) .venv/bin/python $HERE/build_candidates.py $HERE/candidates ;;
    served)
      .venv/bin/entmtp bench serve $common --variant "$(variant switch_n4)" --variant "$(variant switch_n8)" \
        --variant "$(variant hybrid_n8)" --out $HERE/served ;;
    confirm)  # the best candidate of `served` against the default bank again, three more rounds
      .venv/bin/entmtp bench serve $common --variant "$(variant switch_n8)" --out $HERE/confirm ;;
    *) echo "unknown stage $stage (build, served, confirm)"; exit 1 ;;
  esac
done
