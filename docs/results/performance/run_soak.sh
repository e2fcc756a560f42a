#!/bin/bash
# Soak: `entmtp serve` with its defaults (no arguments but the address: it sizes its own KV cache)
# under 16 concurrent streaming clients for 5 minutes (MT-bench + ShareGPT prompts, 64 tokens,
# greedy); the report counts failed requests, and memory.csv samples the resident memory of the
# server and all its processes every 5 s (memory.md: whether it stayed bounded).
#   bash docs/results/performance/run_soak.sh OUT_FOLDER > OUT_FOLDER.log 2>&1
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:?usage: run_soak.sh OUT_FOLDER}
PORT=${PORT:-8011}
mkdir -p "$OUT"
.venv/bin/entmtp serve -- --host 127.0.0.1 --port "$PORT" > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
tree_of() { echo "$1"; for child in $(pgrep -P "$1"); do tree_of "$child"; done; }
sample_memory() {  # seconds since the load began, resident MiB of the server's process tree, processes
  local start=$SECONDS
  echo "seconds,rss_mib,processes"
  while kill -0 "$SERVER" 2>/dev/null; do
    pids=$(tree_of "$SERVER" | tr '\n' ',' | sed 's/,$//')
    ps -o rss= -p "$pids" | awk -v t=$((SECONDS - start)) '{s += $1; n++} END {printf "%d,%.1f,%d\n", t, s / 1024, n}'
    sleep 5
  done
}
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 2; done
curl -sf "http://127.0.0.1:$PORT/health" > /dev/null || { echo "server did not become healthy"; exit 1; }
sample_memory > "$OUT/memory.csv" &
SAMPLER=$!
.venv/bin/entmtp bench serve --base-url "http://127.0.0.1:$PORT/v1" --dataset mt_bench,sharegpt \
  --concurrency 16 --duration 300 --max-tokens 64 --no-progress --out "$OUT"
kill "$SAMPLER"
.venv/bin/python docs/results/performance/memory.py "$OUT/memory.csv" | tee "$OUT/memory.md"
