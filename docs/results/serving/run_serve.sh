#!/bin/bash
# Serve comparisons (vLLM on this CPU, bf16, held-out MT-bench test prompts, 128 tokens): every
# server is started by `entmtp bench serve --compare`, one after another, on an otherwise idle machine.
#   nohup bash docs/results/serving/run_serve.sh > docs/results/serving/run_serve.log 2>&1 &
#   STAGES="g7 g8" nohup bash docs/results/serving/run_serve.sh > docs/results/serving/run_serve_g7.log 2>&1 &
# Current runs are written to docs/results/serving/, superseded ones to docs/results/archive/.
# Stages run in the order below, each when its name is in $STAGES (default: g1 g2 g3 g4).
set -u
cd "$(dirname "$0")/../../.."
ENT=.venv/bin/entmtp
OUT=docs/results/serving
ARCHIVE=docs/results/archive
STAGES=${STAGES:-"g1 g4 g2 g3"}
# The model's own dtype (bf16). vLLM on CPU refuses to start unless --gpu-memory-utilization (a
# fraction of the machine's memory) is free; its default 0.92 failed here once other processes held
# ~2 GB, so every server gets 0.5 (a start-up check only: the KV cache is VLLM_CPU_KVCACHE_SPACE).
MEM=--gpu-memory-utilization=0.5
COMMON="--compare --dataset mt_bench --split test -n 16 --max-tokens 128 --no-progress"
# All 46 test prompts: a concurrency-8 level of 16 prompts lasts ~12 s, too short to compare.
ALL="--compare --dataset mt_bench --split test -n 46 --max-tokens 128 --no-progress"

# stage NAME WHAT ARGS...: `entmtp bench serve ARGS`, logged, when NAME is in $STAGES.
stage() {
  local name=$1 what=$2
  shift 2
  [[ " $STAGES " == *" $name "* ]] || return 0
  echo "($name) $what: $(date)"
  $ENT bench serve "$@"
  echo "($name) exit $?: $(date)"
}

# (g1) greedy, concurrency 1 and 8: no speculation / vLLM ngram / EntMTP (default bank and fallback).
stage g1 "greedy c=1,8" $COMMON --server-args=$MEM --concurrency 1,8 --out $ARCHIVE/g1_serve_compare_greedy_bf16
# (g2) the same servers with vLLM's async scheduling off for all (vLLM turns it off for every
#      proposer that is not EAGLE/MTP/draft-model, ngram included): what async scheduling is worth.
stage g2 "greedy c=8, async scheduling off everywhere" $COMMON --concurrency 8 --methods vllm,entmtp \
  --server-args="$MEM --no-async-scheduling" --out $ARCHIVE/g2_serve_c8_no_async_bf16
# (g3) T=0.7 at concurrency 1 (EntMTP: lossless acceptance, its default for sampled requests).
stage g3 "T=0.7 c=1" $COMMON --server-args=$MEM --concurrency 1 --temperature 0.7 --out $ARCHIVE/g3_serve_compare_t07_bf16
# (g4) greedy c=1 with a static hybrid tree (lookup:4+chain:1, the best tree of run d5) instead of
#      the default switching bank.
stage g4 "greedy c=1, static hybrid bank" $COMMON --server-args=$MEM --concurrency 1 --methods vllm,ngram,entmtp \
  --bank lookup:4+chain:1 --out $OUT/g4_serve_compare_hybrid_tree_bf16
stage g5 "greedy c=8 again after dropping the root softmax on steps without drafts" \
  $COMMON --server-args=$MEM --concurrency 8 --methods vllm,entmtp --out $ARCHIVE/g5_serve_c8_bf16
stage g6 "greedy c=1 again after dropping the heads' chain for the policy" \
  $COMMON --server-args=$MEM --concurrency 1 --out $ARCHIVE/g6_serve_compare_c1_bf16
# (g7) the vLLM plugin's own default bank (smollm2-135m-vllm-cpu.json) after the per-step savings.
stage g7 "greedy c=1,8, 46 prompts" $ALL --server-args=$MEM --concurrency 1,8 --out $ARCHIVE/g7_serve_compare_46_bf16
# (g8) concurrency 8, 46 prompts, vLLM's async scheduling off for both servers.
stage g8 "greedy c=8, 46 prompts, async scheduling off everywhere" $ALL --concurrency 8 --methods vllm,entmtp \
  --server-args="$MEM --no-async-scheduling" --out $OUT/g8_serve_c8_no_async_46_bf16
# (g9) g7's concurrency 1 again (same code): how much the EntMTP / ngram ratio moves between runs.
stage g9 "greedy c=1, 46 prompts, again" $ALL --server-args=$MEM --concurrency 1 --out $ARCHIVE/g9_serve_compare_46_c1_bf16
# (g10) T=0.7 at concurrency 1 on the 46 prompts with the plugin's new default bank (EntMTP: lossless).
stage g10 "T=0.7 c=1, 46 prompts" $ALL --server-args=$MEM --concurrency 1 --temperature 0.7 \
  --out $ARCHIVE/g10_serve_compare_46_t07_bf16
# (g11) concurrency 8 and 16, 46 prompts, with the new default batch fallback: above 4 requests
#       only 2-token lookup chains for matches >= 2, at most 8 tokens per step (was: no drafts).
stage g11 "greedy c=8,16, 46 prompts, lookup fallback under load" $ALL --server-args=$MEM --concurrency 8,16 \
  --out $ARCHIVE/g11_serve_compare_46_c8_c16_bf16
# (g12) the same levels with the previous rule (no drafts above 4 requests), for comparison.
stage g12 "greedy c=8,16, 46 prompts, no drafts under load (the previous fallback)" $ALL --server-args=$MEM \
  --concurrency 8,16 --methods vllm,entmtp --entmtp-config '{"batch_fallback": {"max_batch": 4}}' \
  --out $OUT/g12_serve_c8_c16_no_drafts_under_load_bf16
# (g13) g11 with vLLM's single-process executor for every server (`--distributed-executor-backend
#       uni`: the worker runs inside the engine-core process, no per-step IPC between the two).
stage g13 "greedy c=8,16, 46 prompts, uniproc executor everywhere" $ALL \
  --server-args="$MEM --distributed-executor-backend uni" --concurrency 8,16 \
  --out $ARCHIVE/g13_serve_compare_46_c8_c16_uni_bf16
# (g14) concurrency 1, 46 prompts, uniproc executor for every server.
stage g14 "greedy c=1, 46 prompts, uniproc executor everywhere" $ALL \
  --server-args="$MEM --distributed-executor-backend uni" --concurrency 1 \
  --out $ARCHIVE/g14_serve_compare_46_c1_uni_bf16
# (g15) this session's final defaults, nothing extra: `bench serve --compare` now passes
#       --distributed-executor-backend uni to every server, EntMTP's fallback drafts lookup chains.
stage g15 "greedy c=1,8, 46 prompts, final defaults" $ALL --server-args=$MEM --concurrency 1,8 \
  --out $ARCHIVE/g15_serve_compare_46_defaults_bf16
# (g16) g15's concurrency 1 again (same code): the spread of the ratios between runs.
stage g16 "greedy c=1, 46 prompts, final defaults, again" $ALL --server-args=$MEM --concurrency 1 \
  --out $ARCHIVE/g16_serve_compare_46_c1_defaults_bf16
# (g17) g16 with the servers in the reverse order (EntMTP first): does the last server's slot matter?
stage g17 "greedy c=1, 46 prompts, final defaults, EntMTP first" $ALL --server-args=$MEM --concurrency 1 \
  --methods entmtp,ngram,vllm --out $ARCHIVE/g17_serve_compare_46_c1_reversed_bf16
# (g18) session 13's defaults (draft_vocab_size 4096, one-pass lookup), three rounds with the order
#       rotated (--rounds 3), concurrency 1, 8 and 16: medians and the spread in one run.
stage g18 "greedy c=1,8,16, 46 prompts, 3 rotated rounds" $ALL --server-args=$MEM --concurrency 1,8,16 \
  --rounds 3 --out $OUT/g18_serve_compare_46_rounds3_bf16
# (g19) T=0.7 at concurrency 1 with session 13's defaults (EntMTP: lossless acceptance), 2 rounds.
stage g19 "T=0.7 c=1, 46 prompts, 2 rotated rounds" $ALL --server-args=$MEM --concurrency 1 --temperature 0.7 \
  --rounds 2 --out $OUT/g19_serve_compare_46_t07_rounds2_bf16
# (g20) g18's concurrency 1 again, 3 rounds: how far the medians move between whole runs.
stage g20 "greedy c=1, 46 prompts, 3 rotated rounds, again" $ALL --server-args=$MEM --concurrency 1 \
  --rounds 3 --out $OUT/g20_serve_compare_46_c1_rounds3_bf16
echo "all done: $(date)"
