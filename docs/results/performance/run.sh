#!/usr/bin/env bash
# The Performance page's measurements, with the current code and `entmtp serve`'s defaults for every
# server, loaded by vLLM's own client (`vllm bench serve`). Stages, in the order they run:
#
#   greedy  vLLM without speculation, vLLM's ngram and EntMTP, every server up at once, each level's
#           prompts sent in turns of 4 x concurrency to one server after another (`--interleave 4`);
#           32 GSM8K + 32 Spec-Bench test prompts, 128 tokens, concurrency 1, 4, 8, 16, greedy
#   t07     the same at temperature 0.7 (unseeded, as most clients send)
#   load    greedy at concurrency 8 and 16 again, 3 rounds, in turns of 2 x concurrency prompts
#           (`--interleave 2`), so that at 16 the methods take turns twice a round instead of once
#   exact   float32, EntMTP against vLLM without speculation, 8 MT-bench + 8 GSM8K test prompts at
#           concurrency 1 and 8: greedy, then T=0.7 with a seed on every request; compare.md counts
#           the outputs identical to vLLM's, prompt by prompt
#   soak    `entmtp serve` with no arguments, 16 streaming clients for 5 minutes (run_soak.sh)
#   plot    speedup.png and the page's table from greedy/ and t07/ (summarize.py)
#
#   bash docs/results/performance/run.sh                 # every stage, ~50 minutes on 2 cores
#   STAGES="exact plot" bash docs/results/performance/run.sh
#
# Needs the prompt sets (../shared/data or $ENTMTP_SHARED_DATA) and nothing else running
# (`pgrep -af VLLM` prints nothing). Each folder keeps compare.md / .json / .png (or serve.* and
# memory.* for the soak); the servers' logs and vLLM's per-turn results are left beside them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
entmtp=.venv/bin/entmtp
STAGES=${STAGES:-"greedy t07 load exact soak plot"}
speed=(bench serve --compare --methods vllm,ngram,entmtp --client vllm --dataset gsm8k,spec_bench
       --split test -n 32 --seed 2027 --max-tokens 128 --concurrency 1,4,8,16 --interleave 4 --no-progress)
exact=(bench serve --compare --methods vllm,entmtp --client vllm --dataset mt_bench,gsm8k --split test
       -n 8 --seed 2027 --max-tokens 128 --concurrency 1,8 --interleave 1 --request-seed 1234
       --server-args "--dtype float32" --no-progress)
lscpu > "$here/cpu.txt"
for stage in $STAGES; do
  case $stage in
    greedy) "$entmtp" "${speed[@]}" --out "$here/greedy" ;;
    t07) "$entmtp" "${speed[@]}" --temperature 0.7 --out "$here/t07" ;;
    load) "$entmtp" "${speed[@]}" --concurrency 8,16 --interleave 2 --rounds 3 --out "$here/load" ;;
    exact) "$entmtp" "${exact[@]}" --out "$here/exact_greedy"
           "$entmtp" "${exact[@]}" --temperature 0.7 --out "$here/exact_seeded" ;;
    soak) bash "$here/run_soak.sh" "$here/soak" > "$here/soak.log" 2>&1 ;;
    plot) .venv/bin/python "$here/summarize.py" "$here" ;;
    *) echo "unknown stage $stage (greedy, t07, load, exact, soak, plot)"; exit 1 ;;
  esac
done
