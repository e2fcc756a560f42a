"""Benchmark of the tree-attention and compaction kernels on one GPU (exits on CPU).

    python -m entmtp_kernels.bench [--quick] [--out results.json] [--md results.md]

Llama-7B-like shapes: 32 query heads, 8 or 32 KV heads, head_dim 128, cache block size 16, bf16;
contexts 512/2k/8k, trees of 8/32/64 nodes (a different random tree per request), batches 1/8/32;
plus head dims 96 (padded to 128 lanes in the kernel) and 256 with 8 KV heads on a smaller grid.
`--quick`: head_dim 128 at contexts 2k/8k, batches 1/32, trees 8/64 (8 configurations), and 96 and
256 at context 8k, batches 1/32, 64-node trees (4 more). Every request of a configuration has the
same context length. Timings are medians of CUDA-event
timings, each repetition after a 1 GiB write that evicts L2 (in decoding, a layer's K/V is never
still cached from the previous step). Columns:

- ours: `paged_tree_attention` straight on the paged cache (launch hints given, as vLLM would).
- gather: copying each request's K/V out of the paged cache into dense [B, L, Hkv, D] tensors.
- sdpa: torch SDPA with an explicit dense bool mask [B, 1, n, L] on the gathered K/V
  (`enable_gqa` when Hkv < Hq); sdpa+g adds the gather, the real cost of that route.
- xformers: `xformers.ops.tree_attention` on pre-gathered dense K/V (gather not included; xformers
  takes one tree for the whole batch), or n/a when xformers is missing or fails.
- read: one torch reduction over the gathered K/V (reads the same bytes once).
- bound: K/V bytes / the device copy bandwidth (a large `Tensor.copy_`, read + write bytes / time).
- GB/s, %copy: K/V bytes / ours, and that as a share of the copy bandwidth.

Before timing, the kernel is checked in fp16 and bf16 against the fp32 reference (exit 1 if off).
Compaction: 32 requests × 30 layers (60 K/V caches), against a torch loop over the caches.
"""

import argparse
import datetime
import importlib.metadata
import itertools
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
import triton

from . import configs
from ._dispatch import INTERPRETER
from .compaction import compact_kv
from .selfcheck import check_attention
from .synthetic import PagedBatch, ancestor_mask, make_paged_batch, random_tree_parents
from .tree_attention import _choose_splits, paged_tree_attention

NUM_Q_HEADS = 32
HEAD_DIM = 128  # the main sweep's head dim, and the compaction benchmark's
BLOCK_SIZE = 16
DTYPE = torch.bfloat16
DEVICE = "cuda"


def _xformers_version() -> str | None:
    try:
        return importlib.metadata.version("xformers")
    except importlib.metadata.PackageNotFoundError:
        return None


XFORMERS_VERSION = _xformers_version()


@dataclass(frozen=True)
class Sweep:
    head_dims: tuple[int, ...]
    kv_heads: tuple[int, ...]
    contexts: tuple[int, ...]
    batches: tuple[int, ...]
    trees: tuple[int, ...]


FULL = (
    Sweep(head_dims=(HEAD_DIM,), kv_heads=(8, 32), contexts=(512, 2048, 8192), batches=(1, 8, 32),
          trees=(8, 32, 64)),
    Sweep(head_dims=(96, 256), kv_heads=(8,), contexts=(2048, 8192), batches=(1, 8, 32),
          trees=(8, 64)),
)
QUICK = (
    Sweep(head_dims=(HEAD_DIM,), kv_heads=(8,), contexts=(2048, 8192), batches=(1, 32),
          trees=(8, 64)),
    Sweep(head_dims=(96, 256), kv_heads=(8,), contexts=(8192,), batches=(1, 32), trees=(64,)),
)


@dataclass
class Row:
    head_dim: int
    kv_heads: int
    context: int
    batch: int
    tree: int
    splits: int
    ours_us: float
    gather_us: float
    sdpa_us: float | None
    sdpa_total_us: float | None
    xformers_us: float | None
    read_us: float
    bound_us: float
    kv_bytes: int
    ours_gbps: float
    pct_copy_bw: float


class CudaTimer:
    """Median CUDA-event time of a callable, each repetition after an L2-evicting write."""

    def __init__(self, repeats: int, warmup: int) -> None:
        self.repeats = repeats
        self.warmup = warmup
        self.flush = torch.empty(1 << 30, dtype=torch.uint8, device=DEVICE)

    def __call__(self, fn: Callable[[], object]) -> float:
        """Microseconds."""
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.repeats)]
        for start, end in zip(starts, ends):
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return 1000 * statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def copy_bandwidth_gbps(timer: CudaTimer) -> float:
    """Device memory bandwidth seen by a 2 GiB `copy_` (bytes read + written per second)."""
    src = torch.empty(1 << 31, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    seconds = timer(lambda: dst.copy_(src)) * 1e-6
    return 2 * src.numel() / seconds / 1e9


def gather_dense(batch: PagedBatch, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of positions 0..length-1 of every request, dense [B, length, Hkv, D]."""
    pos = torch.arange(length, device=batch.q.device)
    blocks = batch.block_tables[:, pos // BLOCK_SIZE].long()
    slots = pos % BLOCK_SIZE
    return batch.key_cache[blocks, slots], batch.value_cache[blocks, slots]


def xformers_runner(batch: PagedBatch, k: torch.Tensor, v: torch.Tensor, context: int,
                    tree: int) -> Callable[[], torch.Tensor]:
    """A call of xformers' tree attention on dense K/V with request 0's tree for every request."""
    from xformers.ops.fmha.attn_bias import BlockDiagonalPaddedKeysMask
    from xformers.ops.tree_attention import tree_attention

    b, _, kv_heads, d = k.shape
    group = NUM_Q_HEADS // kv_heads
    q = batch.q.view(b, tree, kv_heads, group, d)

    def grouped(t: torch.Tensor) -> torch.Tensor:  # [B, M, Hkv, D] → [B, M, Hkv, G, D]
        return t.contiguous().unsqueeze(3).expand(-1, -1, -1, group, -1)

    prefix_k, prefix_v = grouped(k[:, :context]), grouped(v[:, :context])
    spec_k, spec_v = grouped(k[:, context:]), grouped(v[:, context:])
    spec_bias = torch.zeros(tree, tree, device=k.device).masked_fill(
        ~batch.bool_masks[0], float("-inf")).to(k.dtype)
    prefix_bias = BlockDiagonalPaddedKeysMask.from_seqlens(
        q_seqlen=[tree] * b, kv_padding=context, kv_seqlen=[context] * b)
    return lambda: tree_attention(q, spec_k, spec_v, prefix_k, prefix_v, spec_bias, prefix_bias)


def bench_attention(timer: CudaTimer, head_dim: int, kv_heads: int, context: int,
                    batch_size: int, tree: int, copy_gbps: float, notes: list[str]) -> Row:
    gen = torch.Generator().manual_seed(context + tree + batch_size)
    masks = [ancestor_mask(random_tree_parents(tree, gen)) for _ in range(batch_size)]
    batch = make_paged_batch([context] * batch_size, masks, NUM_Q_HEADS, kv_heads, head_dim,
                             BLOCK_SIZE, DTYPE, DEVICE, seed=tree, poison_unused=False)
    length = context + tree
    args = batch.attention_args()
    ours_out = paged_tree_attention(*args, max_query_len=tree, max_seq_len=length)
    ours_us = timer(lambda: paged_tree_attention(*args, max_query_len=tree, max_seq_len=length))
    gather_us = timer(lambda: gather_dense(batch, length))
    k, v = gather_dense(batch, length)
    read_us = timer(lambda: (k.sum(dtype=torch.float32), v.sum(dtype=torch.float32)))

    q = batch.q.view(batch_size, tree, NUM_Q_HEADS, head_dim).transpose(1, 2)
    ones = torch.ones(tree, context, dtype=torch.bool, device=DEVICE)
    dense_mask = torch.stack([torch.cat([ones, m], 1) for m in batch.bool_masks])[:, None]
    kt, vt = k.transpose(1, 2), v.transpose(1, 2)

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, kt, vt, attn_mask=dense_mask, scale=batch.scale,
                                              enable_gqa=kv_heads != NUM_Q_HEADS)
    try:
        sdpa_us = timer(sdpa)
    except (RuntimeError, torch.OutOfMemoryError) as error:
        sdpa_us = None
        notes.append(f"sdpa D={head_dim} Hkv={kv_heads} ctx={context} B={batch_size} n={tree}: "
                     f"{error}")

    group = NUM_Q_HEADS // kv_heads
    xformers_us = None
    if XFORMERS_VERSION is not None:
        try:
            run = xformers_runner(batch, k, v, context, tree)
            # Request 0's rows: the only request whose tree xformers was given.
            error = (run()[0].float() - ours_out[:tree].view(tree, kv_heads, group, head_dim)
                     .float()).abs().max().item()
            if error > 0.1:
                raise RuntimeError(f"xformers differs from ours by {error:.3f}")
            xformers_us = timer(run)
        except Exception as error:  # any xformers failure only blanks its column
            notes.append(f"xformers D={head_dim} Hkv={kv_heads} ctx={context} B={batch_size} "
                         f"n={tree}: {type(error).__name__}: {str(error)[:200]}")

    kv_bytes = 2 * k.numel() * k.element_size()
    programs = batch_size * kv_heads * triton.cdiv(tree, configs.BLOCK_M // group)
    ours_gbps = kv_bytes / (ours_us * 1e-6) / 1e9
    return Row(
        head_dim=head_dim, kv_heads=kv_heads, context=context, batch=batch_size, tree=tree,
        splits=_choose_splits(batch.q.device, programs, length),
        ours_us=ours_us, gather_us=gather_us, sdpa_us=sdpa_us,
        sdpa_total_us=None if sdpa_us is None else sdpa_us + gather_us,
        xformers_us=xformers_us, read_us=read_us,
        bound_us=kv_bytes / (copy_gbps * 1e9) * 1e6, kv_bytes=kv_bytes,
        ours_gbps=ours_gbps, pct_copy_bw=100 * ours_gbps / copy_gbps,
    )


def bench_compaction(timer: CudaTimer, batch_size: int = 32, layers: int = 30, kv_heads: int = 8,
                     context: int = 2048, tree: int = 64) -> dict:
    """One compaction step of `batch_size` requests over `layers` × (K, V) caches."""
    gen = torch.Generator().manual_seed(0)
    blocks_per_req = triton.cdiv(context + tree, BLOCK_SIZE)
    block_tables = torch.randperm(batch_size * blocks_per_req, generator=gen).view(
        batch_size, blocks_per_req).to(torch.int32).to(DEVICE)
    caches = [torch.empty(batch_size * blocks_per_req, BLOCK_SIZE, kv_heads, HEAD_DIM,
                          dtype=DTYPE, device=DEVICE) for _ in range(2 * layers)]
    accepted = []
    for _ in range(batch_size):
        parents = random_tree_parents(tree, gen)
        node, path = int(torch.randint(0, tree, (1,), generator=gen)), []
        while node >= 0:
            path.append(node)
            node = parents[node]
        accepted.append(path[::-1])
    indices = torch.tensor([a for p in accepted for a in p], dtype=torch.int32, device=DEVICE)
    starts = torch.tensor([0] + [len(p) for p in accepted]).cumsum(0).to(torch.int32).to(DEVICE)
    prefix_lens = torch.full((batch_size,), context, dtype=torch.int32, device=DEVICE)
    args = (indices, starts, prefix_lens, block_tables)
    ours_us = timer(lambda: compact_kv(caches, *args))

    # Baseline: per cache, gather the source rows then scatter them (2 kernels per cache).
    table = block_tables.cpu().long()
    src, dst = [], []
    for b, path in enumerate(accepted):
        for i, node in enumerate(path):
            if node != i:
                for pos, out in ((context + node, src), (context + i, dst)):
                    out.append(int(table[b, pos // BLOCK_SIZE]) * BLOCK_SIZE + pos % BLOCK_SIZE)
    src_t, dst_t = torch.tensor(src, device=DEVICE), torch.tensor(dst, device=DEVICE)

    def torch_loop() -> None:
        for cache in caches:
            flat = cache.view(-1, kv_heads, HEAD_DIM)
            flat[dst_t] = flat[src_t]
    torch_us = timer(torch_loop)
    moved = 2 * len(src) * kv_heads * HEAD_DIM * caches[0].element_size() * len(caches)
    return {"batch": batch_size, "layers": layers, "caches": len(caches), "kv_heads": kv_heads,
            "rows_moved_per_cache": len(src), "ours_us": ours_us, "torch_loop_us": torch_us,
            "bytes_read_written": moved}


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


COLUMNS = ["D", "Hkv", "ctx", "B", "n", "splits", "ours µs", "gather µs", "sdpa µs",
           "sdpa+g µs",
           "xformers µs", "read µs", "bound µs", "GB/s", "%copy", "sdpa+g/ours"]


def _cells(row: Row) -> list[str]:
    ratio = None if row.sdpa_total_us is None else row.sdpa_total_us / row.ours_us
    return [str(row.head_dim), str(row.kv_heads), str(row.context), str(row.batch),
            str(row.tree), str(row.splits),
            _fmt(row.ours_us), _fmt(row.gather_us), _fmt(row.sdpa_us), _fmt(row.sdpa_total_us),
            _fmt(row.xformers_us), _fmt(row.read_us), _fmt(row.bound_us), _fmt(row.ours_gbps, 0),
            _fmt(row.pct_copy_bw, 0), _fmt(ratio, 2)]


def markdown(meta: dict, rows: list[Row], compaction: dict, notes: list[str]) -> str:
    lines = [f"# Tree attention benchmark — {meta['device']}, {meta['date']}", "",
             f"torch {meta['torch']}, triton {meta['triton']}, xformers {meta['xformers']}, "
             f"{meta['dtype']}, "
             f"{NUM_Q_HEADS} query heads, head_dim D, block size {BLOCK_SIZE}; "
             f"copy bandwidth {meta['copy_bandwidth_gbps']:.0f} GB/s. Median µs; see "
             "`python -m entmtp_kernels.bench --help` for the columns.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    lines += ["", f"Compaction ({compaction['batch']} requests × {compaction['layers']} layers = "
              f"{compaction['caches']} caches, {compaction['rows_moved_per_cache']} rows moved per "
              f"cache): ours {compaction['ours_us']:.1f} µs, torch loop "
              f"{compaction['torch_loop_us']:.1f} µs."]
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 12-configuration subset")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--md", type=Path, help="write a Markdown table here")
    parser.add_argument("--repeats", type=int, default=25)
    options = parser.parse_args(argv)
    if INTERPRETER or not torch.cuda.is_available():
        print("entmtp_kernels.bench needs a CUDA GPU and TRITON_INTERPRET unset; on CPU run "
              "`pytest tests/kernels` instead", file=sys.stderr)
        return 2

    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}", flush=True)
    checks = check_attention(device, (torch.float16, torch.bfloat16))
    for check in checks:
        print(check.line(), flush=True)
    if not all(c.ok for c in checks):
        print("bench: the kernel disagrees with the fp32 reference; not timing it", file=sys.stderr)
        return 1

    timer = CudaTimer(options.repeats, warmup=3)
    meta = {"device": torch.cuda.get_device_name(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__, "triton": triton.__version__, "dtype": str(DTYPE),
            "xformers": XFORMERS_VERSION or "not installed",
            "copy_bandwidth_gbps": copy_bandwidth_gbps(timer)}
    print(f"copy bandwidth: {meta['copy_bandwidth_gbps']:.0f} GB/s", flush=True)
    print("  ".join(f"{c:>11}" for c in COLUMNS), flush=True)
    rows, notes = [], []
    for sweep in QUICK if options.quick else FULL:
        for head_dim, kv_heads, context, batch_size, tree in itertools.product(
                sweep.head_dims, sweep.kv_heads, sweep.contexts, sweep.batches, sweep.trees):
            row = bench_attention(timer, head_dim, kv_heads, context, batch_size, tree,
                                  meta["copy_bandwidth_gbps"], notes)
            rows.append(row)
            print("  ".join(f"{c:>11}" for c in _cells(row)), flush=True)
            torch.cuda.empty_cache()
    compaction = bench_compaction(timer)
    print(f"compaction: {json.dumps(compaction)}")
    for note in notes:
        print(f"note: {note}")

    result = {"meta": meta, "checks": [asdict(c) | {"ok": c.ok} for c in checks],
              "attention": [asdict(r) for r in rows], "compaction": compaction, "notes": notes}
    if options.out:
        options.out.write_text(json.dumps(result, indent=1))
    if options.md:
        options.md.write_text(markdown(meta, rows, compaction, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
