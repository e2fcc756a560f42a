"""What a verified draft row costs in vLLM's CPU attention op (`cpu_attention_with_kv_cache`).

16 requests with L tokens of context each, q query rows per request (q = 1: a plain decode row;
q = 2..5: a root and 1..4 chain draft rows, as a speculative step verifies them), SmolLM2-135M's
shapes (9 query heads, 3 KV heads, head size 64), bf16, vLLM's CPU block size (128) and the ISA
vLLM picks on this CPU (`vec` without AMX). Per call (one layer) it times:

- together: the q rows of a request in one request of the op (what vLLM does for a speculative step)
- split:    every row as its own one-row request over the same blocks (seq_len = its position + 1)

each `--repeats` times, alternating, and prints the medians and the extra ms a draft row adds over
the 30 layers of a step, against q = 1 (`per draft row, step`), next to what a root row costs
(q = 1's call / requests x 30).

    OMP_NUM_THREADS=2 .venv/bin/python docs/results/serving/epyc_attention_rows/attn_rows.py [--isa vec]
"""

import argparse
import statistics
import time

import torch
from vllm import _custom_ops as ops

HEADS, KV_HEADS, HEAD_DIM, BLOCK, LAYERS = 9, 3, 64, 128, 30


def timed(call, reps: int) -> float:
    for _ in range(3):
        call()
    start = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - start) / reps * 1e3


def attention_call(requests: int, context: int, rows: int, split: bool, isa: str):
    dtype = torch.bfloat16
    per_request = (context + rows + BLOCK - 1) // BLOCK
    blocks = requests * per_request
    cache = torch.randn(blocks, KV_HEADS, BLOCK, 2 * HEAD_DIM, dtype=dtype)
    key_cache, value_cache = cache.view(blocks, KV_HEADS, BLOCK * 2, HEAD_DIM).chunk(2, dim=2)
    table = torch.arange(blocks, dtype=torch.int32).view(requests, per_request)
    if split:  # row i of a request: a one-row request over its first context + i + 1 tokens
        table = table.repeat_interleave(rows, dim=0)
        seq_lens = (context + 1 + torch.arange(rows, dtype=torch.int32)).repeat(requests)
        starts = torch.arange(0, requests * rows + 1, dtype=torch.int32)
    else:
        seq_lens = torch.full((requests,), context + rows, dtype=torch.int32)
        starts = torch.arange(0, requests * rows + 1, rows, dtype=torch.int32)
    query = torch.randn(requests * rows, HEADS, HEAD_DIM, dtype=dtype)
    output = torch.empty_like(query)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(seq_lens), num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
        seq_lens=seq_lens, dtype=dtype, query_start_loc=starts, causal=True,
        sliding_window_size=-1, isa=isa, enable_kv_split=False,
    )

    def call() -> None:
        ops.cpu_attention_with_kv_cache(
            query=query, key_cache=key_cache, value_cache=value_cache, output=output,
            query_start_loc=starts, seq_lens=seq_lens, scale=HEAD_DIM**-0.5, causal=True,
            alibi_slopes=None, sliding_window=-1, block_table=table, softcap=0.0,
            scheduler_metadata=metadata, s_aux=None,
        )

    return call


def median_ms(calls: dict, repeats: int, reps: int) -> dict:
    """Each call timed `repeats` times, the calls alternating; the median per call."""
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(timed(call, reps))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--isa", default="vec", help="the op's ISA (vLLM picks vec on AVX512 without AMX)")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--contexts", default="256,512,1024,2048")
    parser.add_argument("--rows", default="1,2,3,5", help="query rows per request; the first is the baseline")
    parser.add_argument("--reps", type=int, default=40, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per variant (median)")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = [int(r) for r in args.rows.split(",")]
    if rows[0] != 1:
        parser.error("--rows must start with 1 (the plain decode row the others are compared with)")
    print(f"torch threads {torch.get_num_threads()}, isa {args.isa}, {args.requests} requests, "
          f"median of {args.repeats} timings of {args.reps} calls, ms per call (one layer)")
    print("context rows  together   split | root row, step | per draft row, step: together   split")
    for context in (int(c) for c in args.contexts.split(",")):
        base = None
        for q in rows:
            calls = {"together": attention_call(args.requests, context, q, False, args.isa)}
            if q > 1:
                calls["split"] = attention_call(args.requests, context, q, True, args.isa)
            ms = median_ms(calls, args.repeats, args.reps)
            if base is None:
                base = ms["together"]
                print(f"{context:7d} {q:4d} {base:9.3f} {'':>7s} | {base / args.requests * LAYERS:14.3f} |")
                continue
            extra = args.requests * (q - 1)
            print(f"{context:7d} {q:4d} {ms['together']:9.3f} {ms['split']:7.3f} | {'':14s} | "
                  f"{'':20s}{(ms['together'] - base) / extra * LAYERS:9.3f} {(ms['split'] - base) / extra * LAYERS:7.3f}")


if __name__ == "__main__":
    main()
