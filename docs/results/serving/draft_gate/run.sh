#!/bin/bash
# Issue #19, session 23: served speed under steady load with the draft gate. Nothing else may run
# (the background jobs of issue #21 are paused with SIGSTOP for the whole run).
#   bash docs/results/serving/draft_gate/run.sh > docs/results/serving/draft_gate/run.log 2>&1
# Every level is a 60 s window of steady load (--duration 60: each client sends the next of the 46
# MT-bench test prompts as soon as its previous request ends; output tok/s is the server's own
# token count over the window, the drain after it left out).
# load:    no speculation vs vLLM ngram vs EntMTP (entmtp serve's defaults: the step budget and its
#          draft gate), greedy, concurrency 1, 4, 8, 16, 2 rounds
# nogate:  no speculation vs EntMTP with the step budget but without the gate, greedy, 8 and 16
# t07:     T=0.7 (EntMTP's lossless acceptance), the three servers, concurrency 1 and 8
# load2, nogate2 (after 5f69c32: the gate stops only the heads, prompt-lookup trees still draft):
#          no speculation vs EntMTP with the gate, then vs EntMTP without it, 8 and 16, 2 rounds each
#          (STAGES="load2 nogate2", run.log2)
# nodraft: no speculation vs EntMTP told to draft nothing above one request per step
#          (batch_fallback max_batch 1, tree null: no head call): the floor, 8 and 16 (not in the default STAGES)
set -u
cd "$(dirname "$0")/../../../.."
OUT=docs/results/serving/draft_gate
COMMON="--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --duration 60 --no-progress"
mkdir -p "$OUT"
{ lscpu | grep -E "^Model name|^CPU\(s\)"; grep -o -w -E "avx2|avx512f|avx512_bf16|amx_bf16" /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } > "$OUT/cpu.txt"
for stage in ${STAGES:-load nogate t07}; do
  echo "== $stage $(date -u +%FT%TZ); running vLLM / Ray processes: $(pgrep -fc 'VLLM|vllm serve|ray::' || true); cpu pressure: $(head -1 /proc/pressure/cpu)"
  case $stage in
    load)    .venv/bin/entmtp bench serve $COMMON --concurrency 1,4,8,16 --rounds 2 --out "$OUT/load" ;;
    nogate)  .venv/bin/entmtp bench serve $COMMON --methods vllm,entmtp --concurrency 8,16 \
               --entmtp-config '{"budget": {"gate": false}}' --out "$OUT/nogate" ;;
    t07)     .venv/bin/entmtp bench serve $COMMON --concurrency 1,8 --temperature 0.7 --out "$OUT/t07" ;;
    load2)   .venv/bin/entmtp bench serve $COMMON --methods vllm,entmtp --concurrency 8,16 --rounds 2 --out "$OUT/load2" ;;
    nogate2) .venv/bin/entmtp bench serve $COMMON --methods vllm,entmtp --concurrency 8,16 --rounds 2 \
               --entmtp-config '{"budget": {"gate": false}}' --out "$OUT/nogate2" ;;
    nodraft) .venv/bin/entmtp bench serve $COMMON --methods vllm,entmtp --concurrency 8,16 \
               --entmtp-config '{"budget": null, "batch_fallback": {"max_batch": 1, "tree": null}}' --out "$OUT/nodraft" ;;
  esac
  echo "cpu pressure after: $(head -1 /proc/pressure/cpu)"
done
