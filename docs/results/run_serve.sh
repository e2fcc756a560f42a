#!/bin/bash
# Serve comparisons (vLLM on this CPU, bf16, held-out MT-bench test prompts, 128 tokens): every
# server is started by `entmtp bench serve --compare`, one after another, on an otherwise idle machine.
#   nohup bash docs/results/run_serve.sh > docs/results/run_serve.log 2>&1 &
# (g1) greedy, concurrency 1 and 8: no speculation / vLLM ngram / EntMTP (default bank and fallback);
# (g2) the same servers with vLLM's async scheduling off for all (vLLM turns it off for every
#      proposer that is not EAGLE/MTP/draft-model, ngram included): what async scheduling is worth;
# (g3) T=0.7 at concurrency 1 (EntMTP: lossless acceptance, its default for sampled requests);
# (g4) greedy c=1 with a static hybrid tree (lookup:4+chain:1, the best tree of run d5) instead of
#      the default switching bank.
set -u
cd "$(dirname "$0")/../.."
ENT=.venv/bin/entmtp
OUT=docs/results
STAGES=${STAGES:-"g1 g4 g2 g3"}
# The model's own dtype (bf16). vLLM on CPU refuses to start unless --gpu-memory-utilization (a
# fraction of the machine's memory) is free; its default 0.92 failed here once other processes held
# ~2 GB, so every server gets 0.5 (a start-up check only: the KV cache is VLLM_CPU_KVCACHE_SPACE).
MEM=--gpu-memory-utilization=0.5
COMMON="--compare --dataset mt_bench --split test -n 16 --max-tokens 128 --no-progress"
if [[ " $STAGES " == *" g1 "* ]]; then
  echo "(g1) greedy c=1,8: $(date)"
  $ENT bench serve $COMMON --server-args=$MEM --concurrency 1,8 --out $OUT/g1_serve_compare_greedy_bf16
  echo "(g1) exit $?: $(date)"
fi
if [[ " $STAGES " == *" g2 "* ]]; then
  echo "(g2) greedy c=8, async scheduling off everywhere: $(date)"
  $ENT bench serve $COMMON --concurrency 8 --methods vllm,entmtp \
    --server-args="$MEM --no-async-scheduling" --out $OUT/g2_serve_c8_no_async_bf16
  echo "(g2) exit $?: $(date)"
fi
if [[ " $STAGES " == *" g3 "* ]]; then
  echo "(g3) T=0.7 c=1: $(date)"
  $ENT bench serve $COMMON --server-args=$MEM --concurrency 1 --temperature 0.7 --out $OUT/g3_serve_compare_t07_bf16
  echo "(g3) exit $?: $(date)"
fi
if [[ " $STAGES " == *" g4 "* ]]; then
  echo "(g4) greedy c=1, static hybrid bank: $(date)"
  $ENT bench serve $COMMON --server-args=$MEM --concurrency 1 --methods vllm,ngram,entmtp --bank lookup:4+chain:1 \
    --out $OUT/g4_serve_compare_hybrid_tree_bf16
  echo "(g4) exit $?: $(date)"
fi
if [[ " $STAGES " == *" g5 "* ]]; then
  echo "(g5) greedy c=8 again after dropping the root softmax on steps without drafts: $(date)"
  $ENT bench serve $COMMON --server-args=$MEM --concurrency 8 --methods vllm,entmtp --out $OUT/g5_serve_c8_bf16
  echo "(g5) exit $?: $(date)"
fi
if [[ " $STAGES " == *" g6 "* ]]; then
  echo "(g6) greedy c=1 again after dropping the heads' chain for the policy: $(date)"
  $ENT bench serve $COMMON --server-args=$MEM --concurrency 1 --out $OUT/g6_serve_compare_c1_bf16
  echo "(g6) exit $?: $(date)"
fi
# (g7) the vLLM plugin's own default bank (smollm2-135m-vllm-cpu.json) after the per-step savings,
#      on all 46 MT-bench test prompts: a concurrency-8 level of 16 prompts lasts ~12 s, too short;
# (g8) concurrency 8, 46 prompts, vLLM's async scheduling off for both servers.
ALL="--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress"
if [[ " $STAGES " == *" g7 "* ]]; then
  echo "(g7) greedy c=1,8, 46 prompts: $(date)"
  $ENT bench serve $ALL --server-args=$MEM --concurrency 1,8 --out $OUT/g7_serve_compare_46_bf16
  echo "(g7) exit $?: $(date)"
fi
if [[ " $STAGES " == *" g8 "* ]]; then
  echo "(g8) greedy c=8, 46 prompts, async scheduling off everywhere: $(date)"
  $ENT bench serve $ALL --concurrency 8 --methods vllm,entmtp \
    --server-args="$MEM --no-async-scheduling" --out $OUT/g8_serve_c8_no_async_46_bf16
  echo "(g8) exit $?: $(date)"
fi
# (g9) g7's concurrency 1 again (same code): how much the EntMTP / ngram ratio moves between runs.
if [[ " $STAGES " == *" g9 "* ]]; then
  echo "(g9) greedy c=1, 46 prompts, again: $(date)"
  $ENT bench serve $ALL --server-args=$MEM --concurrency 1 --out $OUT/g9_serve_compare_46_c1_bf16
  echo "(g9) exit $?: $(date)"
fi
# (g10) T=0.7 at concurrency 1 on the 46 prompts with the plugin's new default bank (EntMTP: lossless).
if [[ " $STAGES " == *" g10 "* ]]; then
  echo "(g10) T=0.7 c=1, 46 prompts: $(date)"
  $ENT bench serve $ALL --server-args=$MEM --concurrency 1 --temperature 0.7 --out $OUT/g10_serve_compare_46_t07_bf16
  echo "(g10) exit $?: $(date)"
fi
echo "all done: $(date)"
