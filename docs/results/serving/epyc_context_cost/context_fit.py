"""How much of a served step's time does the context its rows attend to explain? One in-process
EntMTP engine (`entmtp_vllm.bench.in_process`: bf16, eager, `max_num_seqs` = SEQS, the
environment's threads) generates PROMPTS prompts of DATASET/test (greedy, 128 tokens); every
decode-only step's shape (requests, rows, branching-tree rows, thousands of context tokens over
its rows: `StepPlan.context`) and its seconds without drafting (what the step-cost model learns)
are recorded, and least squares over the steps after the first fifth fits

    seconds = fixed + per_request·requests + per_token·rows + per_tree_token·tree rows [+ per_context·context]

with and without the context term. Prints both fits (ms, RMSE, R²), the engine's tok/s and the
step-cost model the engine itself learnt online.

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_context_cost/context_fit.py DATASET PROMPTS SEQS

It needs the code of 5ff2396 (reverted in fa55df2; `context_cost.patch`) first on PYTHONPATH:
only there does a step's shape carry its context (`run.sh` runs it so).
"""

from __future__ import annotations

import sys

import numpy as np

from entmtp_vllm.bench.in_process import chat_prompts, in_process_engine, timed_generate
from entmtp_vllm.vllm_plugin.proposer import EntMTPProposer

_steps: list[tuple[float, ...]] = []
_record = EntMTPProposer.record_step_time


def _reading_record(self, seconds, shape):
    if shape is not None:
        _steps.append((*shape, seconds - self._drafting_seconds))
    return _record(self, seconds, shape)


def _fit(x: np.ndarray, y: np.ndarray, names: list[str]) -> str:
    theta, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ theta
    fitted = "  ".join(f"{name} {value:.3f}" for name, value in zip(names, theta))
    return f"{fitted}  | RMSE {np.sqrt((residual ** 2).mean()):.2f} ms, R² {1 - residual.var() / y.var():.3f}"


def main() -> None:
    args = sys.argv[1:]
    if len(args) != 3 or not all(a.isdigit() and int(a) > 0 for a in args[1:]):
        sys.exit(f"usage: context_fit.py DATASET PROMPTS SEQS, got {args}")
    dataset, n, seqs = args[0], int(args[1]), int(args[2])
    EntMTPProposer.record_step_time = _reading_record
    llm = in_process_engine(seqs, "entmtp")
    run = timed_generate(llm, chat_prompts(llm, dataset, "test", n))
    if any(len(step) != 5 for step in _steps):  # requests, rows, tree rows, context, seconds
        sys.exit("context_fit.py: this code's step shape has no context: run it with 5ff2396 first on PYTHONPATH")
    steps = np.array(_steps)[len(_steps) // 5:]
    if len(steps) < 20:
        sys.exit(f"context_fit.py: only {len(steps)} decode-only steps recorded, too few to fit")
    requests, rows, tree, context, y = steps[:, 0], steps[:, 1], steps[:, 2], steps[:, 3], 1e3 * steps[:, 4]
    print(f"{dataset}/test, {n} prompts, {seqs} at a time: {run.tok_s:.1f} tok/s; {len(steps)} decode-only steps after "
          f"the first fifth: {requests.mean():.1f} requests, {(rows - requests).mean():.1f} draft rows, "
          f"{1e3 * context.sum() / rows.sum():.0f} context tokens a row on average (max {1e3 * (context / rows).max():.0f})")
    ones = np.ones_like(y)
    names = ["fixed", "per_request", "per_token", "per_tree_token"]
    print("without context: " + _fit(np.c_[ones, requests, rows, tree], y, names))
    print("with context:    " + _fit(np.c_[ones, requests, rows, tree, context], y, names + ["per_context"]))
    learnt = run.entmtp_after["step_cost"]
    print("learnt online (ms): " + ", ".join(f"{k.removesuffix('_ms')} {v:.3f}" for k, v in learnt.items() if k.endswith("_ms")))


if __name__ == "__main__":
    main()
