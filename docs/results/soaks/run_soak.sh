#!/bin/bash
# Soak: `entmtp serve` with its defaults under 16 concurrent streaming clients for 5 minutes
# (MT-bench + ShareGPT prompts, 64 tokens, greedy); the report counts failed requests.
#   bash docs/results/soaks/run_soak.sh OUT_FOLDER > OUT_FOLDER.log 2>&1
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:?usage: run_soak.sh OUT_FOLDER}
PORT=${PORT:-8011}
mkdir -p "$OUT"
.venv/bin/entmtp serve -- --gpu-memory-utilization=0.5 --host 127.0.0.1 --port "$PORT" > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 2; done
curl -sf "http://127.0.0.1:$PORT/health" > /dev/null || { echo "server did not become healthy"; exit 1; }
.venv/bin/entmtp bench serve --base-url "http://127.0.0.1:$PORT/v1" --dataset mt_bench,sharegpt \
  --concurrency 16 --duration 300 --max-tokens 64 --no-progress --out "$OUT"
