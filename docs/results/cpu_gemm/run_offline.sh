#!/usr/bin/env bash
# The reference engine with torch's matrix multiply (MKL) and with EntMTP's packed kernel: AR,
# heads-only trees (chains of 2 and 4 heads, the published 63-node tree) and the shipped banks
# (the MT-bench task bank, the default lookup + heads bank), greedy, float32, one thread,
# 10 MT-bench test prompts x 128 tokens, every method's tokens checked against AR (--check-equal).
# Run from the repository root with nothing else on the cores.
set -euo pipefail
out=docs/results/cpu_gemm
TREES=../shared/data/trees/medusa_hydra_trees.json
banks=entmtp_vllm/assets/banks
for gemm in torch packed; do
  .venv/bin/entmtp bench offline --dataset mt_bench --split test -n 10 --max-tokens 128 --cpu-gemm "$gemm" \
    --methods "ar,tree:chain:2,tree:chain:4,tree:$TREES#mc_sim_7b_63,bank:$banks/smollm2-135m-mt_bench.json,bank:$banks/smollm2-135m-lookup-switch.json" \
    --check-equal --no-progress --out "$out/offline_$gemm"
done
