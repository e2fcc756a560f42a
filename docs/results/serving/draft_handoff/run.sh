#!/usr/bin/env bash
# What the extra round trip per speculative step costs served, and what carrying the drafts with
# the step's output saved (entmtp_vllm/vllm_plugin/draft_handoff.py): EntMTP configured to draft
# nothing above one request (`batch_fallback: {max_batch: 1}`), so that at concurrency 4 and 8
# its steps are plain decoding steps plus whatever the speculative path itself costs, against vLLM
# without speculation in the same run; once with the code before the handoff (commit c4e7673,
# checked out at $BEFORE and put first on PYTHONPATH for every server) and once after. Front-door
# defaults (float32, packed matrix multiply), 16 MT-bench test prompts, greedy, 128 tokens,
# two rounds each. Run from the repository root with nothing else on the cores (~25 minutes).
#   git worktree add /tmp/before c4e7673 && BEFORE=/tmp/before bash docs/results/serving/draft_handoff/run.sh
set -euo pipefail
D=docs/results/serving/draft_handoff
BEFORE=${BEFORE:?set BEFORE to a checkout of c4e7673}
for side in before after; do
  if [ $side = before ]; then export PYTHONPATH=$BEFORE; else unset PYTHONPATH; fi
  .venv/bin/entmtp bench serve --compare --methods vllm,entmtp --entmtp-config '{"batch_fallback": {"max_batch": 1}}' \
    --dataset mt_bench --split test -n 16 --concurrency 4,8 --max-tokens 128 --rounds 2 --no-progress --out $D/$side
done
