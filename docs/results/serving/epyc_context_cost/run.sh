#!/usr/bin/env bash
# Issue #19: a draft row of a long request costs more (its attention reads the whole KV cache);
# does the step-cost model pricing each row by its context (per_context) help?
#   fit:  context_fit.py: in process, 16 at a time, Spec-Bench (160 test prompts) and MT-bench
#         (46): least squares over the decode-only steps with and without the context term
#   ab:   in process (policy_ab.py), 16 at a time, no speculation / EntMTP before the change
#         (fdb9ba8) / after (NEW: a worktree at 5ff2396, reverted since), each a git worktree first on
#         PYTHONPATH (run from /tmp, so the editable install is not imported), in rotating order,
#         ROUNDS rounds, Spec-Bench 160 and MT-bench 46
# Every stage runs from the repository root with OMP_NUM_THREADS=2 (the front door's setting on 2 cores).
set -euo pipefail
D=docs/results/serving/epyc_context_cost
REPO=$(pwd)
OLD=${OLD:-/tmp/entmtp_fdb9ba8}
NEW=${NEW:?set NEW to a git worktree at 5ff2396 (the change, reverted in fa55df2)}
ROUNDS=${ROUNDS:-3}
STAGES=${STAGES:-"fit ab"}
export OMP_NUM_THREADS=2 VLLM_LOGGING_LEVEL=ERROR
export ENTMTP_SHARED_DATA=${ENTMTP_SHARED_DATA:-$(cd "$REPO/.." && pwd)/shared/data}  # the worktrees sit elsewhere
AB=$REPO/docs/results/serving/epyc_lookup_match/policy_ab.py
ab() {  # CODE_DIR DATASET PROMPTS METHOD: policy_ab.py's JSON line
  (cd /tmp && DATASET=$2 PYTHONPATH=$1 "$REPO/.venv/bin/python" "$AB" "$4" "$3" 16 2>/dev/null | tail -1)
}
for s in $STAGES; do
  case $s in
    fit) for data in "spec_bench 160" "mt_bench 46"; do
           (cd /tmp && PYTHONPATH=$NEW "$REPO/.venv/bin/python" "$REPO/$D/context_fit.py" $data 16 2>/dev/null) \
             | grep -v -E '^\(|^Loading'
         done | tee $D/fit.txt ;;
    ab) [ -d "$OLD" ] || git worktree add -f "$OLD" fdb9ba8
        for r in $(seq 1 "$ROUNDS"); do
          for data in "spec_bench 160" "mt_bench 46"; do
            set -- $data
            order=("none" "old" "new"); k=$(( (r - 1) % 3 ))
            for m in "${order[@]:k}" "${order[@]:0:k}"; do
              case $m in
                none) line=$(ab "$NEW" "$1" "$2" none) ;;
                new)  line=$(ab "$NEW" "$1" "$2" entmtp) ;;
                old)  line=$(ab "$OLD" "$1" "$2" entmtp) ;;
              esac
              echo "{\"round\": $r, \"code\": \"$m\", \"result\": $line}" | tee -a $D/ab.jsonl
            done
          done
        done ;;
    *) echo "unknown stage $s (fit, ab)"; exit 1 ;;
  esac
done
