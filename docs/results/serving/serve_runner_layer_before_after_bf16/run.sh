#!/usr/bin/env bash
# Served greedy speed at concurrency 1 before (54f3b4d) and after the session-17 runner layer,
# side by side: two checkouts with their own venvs (BEFORE_REPO at 54f3b4d, AFTER_REPO at the new
# code), each serving with exactly the same raw `vllm serve` arguments; rounds alternate
# before/after/after/before/... so drift on the machine hits both. Client: `entmtp bench serve`
# (the after checkout's), MT-bench test split.
#   BEFORE_REPO=/tmp/ci AFTER_REPO=/work/main bash docs/results/serving/serve_runner_layer_before_after_bf16/run.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROUNDS="${ROUNDS:-4}"
MODEL="$("$AFTER_REPO/.venv/bin/entmtp" model path)"
PORT=8123
ARGS=(serve "$MODEL" --speculative-config '{"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5}'
      --enforce-eager --kv-cache-memory-bytes 2G --max-model-len 2048 --seed 0
      --host 127.0.0.1 --port "$PORT")
{ lscpu | grep "Model name"; echo "ISA flags: $(grep -o -w -E "avx2|avx512f|avx512_bf16|amx_bf16" /proc/cpuinfo | sort -u | tr '\n' ' ')"; } > "$HERE/cpu.txt"
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 4 == 1 || round % 4 == 0 )); then order="before after"; else order="after before"; fi
  for which in $order; do
    repo="$BEFORE_REPO"; [[ $which == after ]] && repo="$AFTER_REPO"
    pgrep -af VLLM && { echo "stray vLLM processes"; exit 1; }
    log="$HERE/server-$which-r$round.log"
    "$repo/.venv/bin/vllm" "${ARGS[@]}" > "$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 2; done
    "$AFTER_REPO/.venv/bin/entmtp" bench serve --base-url "http://127.0.0.1:$PORT/v1" --dataset mt_bench \
      --split test -n 12 --concurrency 1 --max-tokens 128 --out "$HERE/$which-r$round" > "$HERE/bench-$which-r$round.log" 2>&1
    kill -TERM "$pid"; wait "$pid" || true
    for _ in $(seq 1 60); do pgrep -f VLLM >/dev/null || break; sleep 1; done
  done
done
