"""EntMTP's rows attention (`entmtp_vllm/cpu_attention`) against vLLM's CPU attention op, timed
the way a decode step meets them: 30 layers' caches (one per layer), each read once a pass, so K
and V come from memory rather than a warm cache. SmolLM2-135M's shapes (9 query heads, 3 KV
heads, head size 64), block size 128, vLLM's `vec` ISA, 16 requests of L tokens with q rows each
(causal), bf16 and float32. Prints ms per layer call (median of the repeats) and the extra ms a
draft row adds over the 30 layers of a step, against one row. (Its correctness is tested in
tests/cpu_attention/test_rows.py.)

    OMP_NUM_THREADS=2 .venv/bin/python docs/results/serving/epyc_attention_rows/kernel_vs_op.py
"""

import argparse
import statistics
import time

import torch
from vllm import _custom_ops as ops

from entmtp_vllm.cpu_attention import rows

HEADS, KV_HEADS, HEAD_DIM, BLOCK, LAYERS, REQUESTS = 9, 3, 64, 128, 30, 16


def batch(context: int, count: int, dtype: torch.dtype):
    """A layer's cache for REQUESTS requests of context + count tokens, blocks shuffled."""
    per = (context + count + BLOCK - 1) // BLOCK
    blocks = REQUESTS * per
    cache = torch.randn(blocks, KV_HEADS, BLOCK, 2 * HEAD_DIM).to(dtype)
    table = torch.randperm(blocks, dtype=torch.int32).view(REQUESTS, per)
    seq_lens = torch.full((REQUESTS,), context + count, dtype=torch.int32)
    starts = torch.arange(0, REQUESTS * count + 1, count, dtype=torch.int32)
    query = torch.randn(REQUESTS * count, HEADS, HEAD_DIM).to(dtype)
    return cache, table, seq_lens, starts, query


def vllm_op(cache, table, seq_lens, starts, query):
    key_cache, value_cache = cache.view(cache.shape[0], KV_HEADS, BLOCK * 2, HEAD_DIM).chunk(2, dim=2)
    out = torch.empty_like(query)
    meta = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=REQUESTS, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, seq_lens=seq_lens,
        dtype=query.dtype, query_start_loc=starts, causal=True, sliding_window_size=-1, isa="vec",
        enable_kv_split=False,
    )
    return lambda: ops.cpu_attention_with_kv_cache(
        query=query, key_cache=key_cache, value_cache=value_cache, output=out, query_start_loc=starts,
        seq_lens=seq_lens, scale=HEAD_DIM**-0.5, causal=True, alibi_slopes=None, sliding_window=-1,
        block_table=table, softcap=0.0, scheduler_metadata=meta, s_aux=None,
    )


def kernel(cache, table, seq_lens, starts, query):
    out = torch.empty_like(query)
    row_start, row_count = starts[:-1].to(torch.int64), (starts[1:] - starts[:-1]).to(torch.int32)
    return lambda: rows.rows_attention(query, cache, out, row_start, row_count, seq_lens, table, None, HEAD_DIM**-0.5)


def timed(call, reps: int, repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(reps):
            call()
        times.append((time.perf_counter() - start) / reps * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="256,512,1024,2048")
    parser.add_argument("--rows", default="1,2,3,5", help="rows per request; the first must be 1")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    counts = [int(q) for q in args.rows.split(",")]
    if counts[0] != 1:
        parser.error("--rows must start with 1")
    torch.manual_seed(0)
    print(f"torch threads {torch.get_num_threads()}; {REQUESTS} requests; {LAYERS} layers' caches cycled; "
          "ms per layer call: vLLM's op / EntMTP's kernel; per draft row, step: over 30 layers, against 1 row")
    for dtype in (getattr(torch, name) for name in args.dtypes.split(",")):
        reason = rows.unsupported(dtype, HEAD_DIM, BLOCK) or rows.load_library()[1]
        if reason:
            print(f"{dtype}: skipped ({reason})")
            continue
        for context in (int(c) for c in args.contexts.split(",")):
            base = {}
            for count in counts:
                layers = [batch(context, count, dtype) for _ in range(LAYERS)]
                calls = {"op": [vllm_op(*d) for d in layers], "kernel": [kernel(*d) for d in layers]}
                ms = {name: timed(lambda c=c: [f() for f in c], 4, args.repeats) / LAYERS for name, c in calls.items()}
                line = f"{str(dtype)[6:]:>8s}  L {context:5d}, {count} rows: {ms['op']:.3f} / {ms['kernel']:.3f}"
                if count == 1:
                    base = ms
                else:
                    per_row = {n: (ms[n] - base[n]) / (REQUESTS * (count - 1)) * LAYERS for n in ms}
                    line += f"   per draft row, step: {per_row['op']:.3f} / {per_row['kernel']:.3f} ms"
                print(line, flush=True)
                del layers, calls


if __name__ == "__main__":
    main()
