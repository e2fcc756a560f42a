#!/usr/bin/env bash
# torch threads in an in-process vLLM engine, 1 against 2, on this 2-core machine: four servers up
# at once (no speculation and EntMTP, each with OMP_NUM_THREADS=1 and =2; otherwise the front
# door's arguments of session 40: bf16, eager, the worker inside the engine core, one KV cache
# size), then per round and level the same prompts to each server in turn with this project's
# client: 8 MT-bench test prompts at concurrency 1, 32 at 16, 2 rounds (another sample each
# round). Run from the repository root with nothing else on the cores. Session 41 ran it with
# the paths under /tmp (this copy writes here; only serve.json / serve.md were kept).
cd "$(git rev-parse --show-toplevel)"; D=docs/results/serving/cpu_threads
M=$(.venv/bin/python -c "from entmtp_vllm.model_store import resolve_model; print(resolve_model(None))")
common="--enforce-eager --distributed-executor-backend uni --kv-cache-memory-bytes 1509949440 --max-model-len 4096 --host 127.0.0.1"
spec='{"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5}'
start() { # name threads port [spec]
  if [ -n "$4" ]; then
    OMP_NUM_THREADS=$2 VLLM_ENABLE_V1_MULTIPROCESSING=0 setsid .venv/bin/vllm serve $M $common --port $3 --speculative-config "$4" > $D/$1.log 2>&1 &
  else
    OMP_NUM_THREADS=$2 VLLM_ENABLE_V1_MULTIPROCESSING=0 setsid .venv/bin/vllm serve $M $common --port $3 > $D/$1.log 2>&1 &
  fi
  echo $! > $D/$1.pid
}
start vllm1 1 8401; start vllm2 2 8402; start ent1 1 8403 "$spec"; start ent2 2 8404 "$spec"
for p in 8401 8402 8403 8404; do for i in $(seq 1 200); do curl -sf localhost:$p/health >/dev/null && break; sleep 3; done; done
echo healthy
trap 'for n in vllm1 vllm2 ent1 ent2; do kill -TERM -- -$(cat $D/$n.pid) 2>/dev/null; done' EXIT
for r in 1 2; do
 for c in 1 16; do
  n=$([ $c = 1 ] && echo 8 || echo 32)
  for p in 8401 8402 8403 8404; do
   .venv/bin/entmtp bench serve --base-url http://127.0.0.1:$p/v1 --dataset mt_bench --split test -n $n --seed $((r*10+c)) --max-tokens 128 --concurrency $c --no-progress --warmup 1 --out $D/r$r-c$c-$p > /dev/null 2>&1
   python3 -c "import json,sys; d=json.load(open('$D/r$r-c$c-$p/serve.json')); l=d['levels'][0] if 'levels' in d else d; print('r$r c$c port $p', round(l.get('output_tok_s', l.get('output_throughput', 0)),1))" 2>/dev/null || ls $D/r$r-c$c-$p
  done
 done
done
