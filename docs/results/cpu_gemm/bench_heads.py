"""One head call of the shipped Hydra heads (SmolLM2-135M, 4 layers each, ranking the 4096-token
draft vocabulary the vLLM plugin uses by default), torch's linear layers (MKL) against EntMTP's packed kernel, for the rows a step's
batched drafting gives one head call (one per drafting request and parent node).

    .venv/bin/python docs/results/cpu_gemm/bench_heads.py   (writes heads.md and heads.json here)

One torch thread, the best of 5 rounds of 10 calls per row count. The LM head's weight is random
(its values do not change the time); the heads are the shipped ones."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from entmtp_vllm.cpu_features import cpu_flags
from entmtp_vllm.cpu_gemm.hf_model import use_packed_drafter
from entmtp_vllm.heads.checkpoint import default_heads_path, load_heads
from entmtp_vllm.heads.draft_vocab import load_draft_vocab
from entmtp_vllm.heads.drafting import TreeDrafter
from entmtp_vllm.vllm_plugin.config import EntMTPConfig

HERE = Path(__file__).parent
ROWS = (1, 2, 4, 8, 16, 32)
DEPTHS = (1, 2, 4)


def best_ms(call, rounds: int = 5, calls: int = 10) -> float:
    call()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e3


def drafter(packed: bool) -> TreeDrafter:
    folder = default_heads_path("hydra")
    heads = load_heads(folder)
    weights = torch.randn(heads.vocab_size, heads.hidden_size) * 0.02
    made = TreeDrafter(heads, weights, weights, draft_vocab=load_draft_vocab(folder, heads.vocab_size, EntMTPConfig().draft_vocab_size))
    if packed:
        use_packed_drafter(made)
    return made


def main() -> None:
    torch.set_num_threads(1)
    results = {}
    for name, packed in (("torch", False), ("packed", True)):
        d = drafter(packed)
        for depth in DEPTHS:
            for rows in ROWS:
                hidden = torch.randn(rows, d.heads.hidden_size)
                emb = torch.randn(rows, depth, d.heads.hidden_size)
                with torch.inference_mode():
                    results[f"{name}/{depth}/{rows}"] = best_ms(lambda: d.head_logits(depth, hidden, emb))
    flags = " ".join(f for f in ("avx2", "fma", "avx512f") if f in cpu_flags())
    lines = [f"One head call (shipped Hydra heads, {EntMTPConfig().draft_vocab_size}-token draft vocabulary), float32, one thread; CPU flags: {flags}.", "",
             "| head | rows | torch ms | packed ms | torch / packed |", "|---:|---:|---:|---:|---:|"]
    for depth in DEPTHS:
        for rows in ROWS:
            t, p = results[f"torch/{depth}/{rows}"], results[f"packed/{depth}/{rows}"]
            lines.append(f"| {depth} | {rows} | {t:.2f} | {p:.2f} | {t / p:.2f} |")
    (HERE / "heads.md").write_text("\n".join(lines) + "\n")
    (HERE / "heads.json").write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
