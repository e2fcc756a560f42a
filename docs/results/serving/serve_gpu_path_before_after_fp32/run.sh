#!/usr/bin/env bash
# Issue #18's "served greedy concurrency-1 speed on CPU does not regress": the code before the
# GPU-path work (BEFORE, default 54f3b4d, the last commit before session 17's runner layer) against
# this checkout, side by side, float32 (what `entmtp serve` picks on a CPU without native bf16).
# One venv: the before code is a git worktree put first on PYTHONPATH (its `entmtp_vllm`, plugin
# and shipped heads/banks then load instead of this checkout's; the server log's first line says
# which). Both servers get exactly the same raw `vllm serve` arguments; rounds alternate
# before/after, after/before, ... so drift hits both. Client: this checkout's `entmtp bench serve`,
# 12 MT-bench test prompts, 128 tokens, greedy, concurrency 1.
#   bash docs/results/serving/serve_gpu_path_before_after_fp32/run.sh   (from the repository root)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(pwd)"
BEFORE="${BEFORE:-54f3b4d}"
ROUNDS="${ROUNDS:-4}"
WORKTREE="${WORKTREE:-/tmp/entmtp-before}"
[[ -d "$WORKTREE" ]] || git worktree add -q "$WORKTREE" "$BEFORE"
MODEL="$(.venv/bin/entmtp model path)"
WORKTREE="$(cd "$WORKTREE" && pwd)"
PORT=8123
ARGS=(serve "$MODEL" --speculative-config '{"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5}'
      --dtype float32 --enforce-eager --kv-cache-memory-bytes 2G --max-model-len 2048 --seed 0
      --host 127.0.0.1 --port "$PORT")
{ lscpu | grep "Model name"; echo "ISA flags: $(grep -o -w -E "avx2|avx512f|avx512_bf16|amx_bf16" /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "before: $(git -C "$WORKTREE" rev-parse --short HEAD); after: $(git rev-parse --short HEAD)"; } > "$HERE/cpu.txt"
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 4 == 1 || round % 4 == 0 )); then order="before after"; else order="after before"; fi
  for which in $order; do
    path="$ROOT"; [[ $which == before ]] && path="$WORKTREE"
    if pgrep -af VLLM; then echo "stray vLLM processes" >&2; exit 1; fi
    log="$HERE/server-$which-r$round.log"
    # from inside the checkout served, so that no other copy of entmtp_vllm comes first on sys.path
    (cd "$path" && PYTHONPATH="$path" "$ROOT/.venv/bin/python" -c \
      "import entmtp_vllm; print('entmtp_vllm from', entmtp_vllm.__file__)") > "$log"
    (cd "$path" && PYTHONPATH="$path" exec "$ROOT/.venv/bin/vllm" "${ARGS[@]}") >> "$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 2; done
    .venv/bin/entmtp bench serve --base-url "http://127.0.0.1:$PORT/v1" --dataset mt_bench --split test -n 12 \
      --concurrency 1 --max-tokens 128 --out "$HERE/$which-r$round" > "$HERE/bench-$which-r$round.log" 2>&1
    kill -TERM "$pid"; wait "$pid" || true
    for _ in $(seq 1 60); do pgrep -f VLLM >/dev/null || break; sleep 1; done
  done
done
.venv/bin/python "$HERE/summarize.py" "$HERE" > "$HERE/summary.md"
cat "$HERE/summary.md"
