#!/bin/bash
# Issue #19 with the step budget (session 18), on whatever machine runs it; nothing else may run.
#   STAGES="greedy vllm_client t07 soak" bash docs/results/serving/step_budget/run.sh
# greedy:      our client, no speculation vs vLLM ngram vs EntMTP, concurrency 1,4,8,16, --rounds 3
# vllm_client: the same servers measured by vLLM's own `vllm bench serve` (--client vllm), 1 and 8
# t07:         T=0.7 (EntMTP lossless acceptance), concurrency 1 and 8
# soak:        `entmtp serve` with no arguments, 16 concurrent clients for 5 minutes, server memory sampled
set -u
cd "$(dirname "$0")/../../../.."
OUT=docs/results/serving/step_budget
STAGES=${STAGES:-"greedy vllm_client t07 soak"}
COMMON="--compare --dataset mt_bench --split test -n 16 --max-tokens 128 --no-progress"
mkdir -p "$OUT"
{ lscpu | grep -E "^Model name|^CPU\(s\)"; grep -o -w -E "avx2|avx512f|avx512_bf16|amx_bf16" /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } > "$OUT/cpu.txt"
for stage in $STAGES; do
  echo "== $stage $(date -u +%FT%TZ); other vLLM / Ray processes: $(pgrep -fc 'VLLM|vllm serve|ray::' || true)"
  echo "cpu pressure before: $(head -1 /proc/pressure/cpu)"
  case $stage in
    greedy) .venv/bin/entmtp bench serve $COMMON --concurrency 1,4,8,16 --rounds 3 --out "$OUT/greedy" ;;
    vllm_client) .venv/bin/entmtp bench serve $COMMON --concurrency 1,8 --client vllm --out "$OUT/greedy_vllm_client" ;;
    t07) .venv/bin/entmtp bench serve $COMMON --concurrency 1,8 --temperature 0.7 --out "$OUT/t07" ;;
    soak)
      mkdir -p "$OUT/soak"
      PORT=${PORT:-8011}
      .venv/bin/entmtp serve -- --host 127.0.0.1 --port "$PORT" > "$OUT/soak/server.log" 2>&1 &
      SERVER=$!
      for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 2; done
      # resident memory (MiB) of the server and its engine processes, every 10 s
      ( echo "seconds,rss_mib"; t=0; while kill -0 $SERVER 2>/dev/null; do
          rss=$(ps -o rss= -p "$(pgrep -d, -f 'vllm serve|VLLM::')" 2>/dev/null | awk '{s+=$1} END {print int(s/1024)}')
          echo "$t,$rss"; sleep 10; t=$((t + 10)); done ) > "$OUT/soak/rss.csv" &
      SAMPLER=$!
      .venv/bin/entmtp bench serve --base-url "http://127.0.0.1:$PORT/v1" --dataset mt_bench,sharegpt \
        --concurrency 16 --duration 300 --max-tokens 64 --no-progress --out "$OUT/soak"
      kill -TERM $SERVER; wait $SERVER; wait $SAMPLER ;;
  esac
  echo "cpu pressure after: $(head -1 /proc/pressure/cpu)"
done
