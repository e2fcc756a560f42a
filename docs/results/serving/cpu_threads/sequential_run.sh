#!/usr/bin/env bash
# The first look (session 41): entmtp bench serve --compare, no speculation and EntMTP interleaved,
# once with 1 torch thread for both servers and once with 2 (OMP_NUM_THREADS inherited by every
# server); the two runs one after the other, so the machine may have changed between them.
cd "$(git rev-parse --show-toplevel)"; D=docs/results/serving/cpu_threads
for t in 1 2; do
  OMP_NUM_THREADS=$t .venv/bin/entmtp bench serve --compare --methods vllm,entmtp --dataset mt_bench --split test -n 32 --max-tokens 128 --no-progress --rounds 1 --interleave 2 --concurrency 1,8,16 --out $D/sequential_$t > /dev/null
done
