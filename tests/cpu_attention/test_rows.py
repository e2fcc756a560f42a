"""EntMTP's CPU rows attention against a float32 torch reference and against vLLM's CPU op, on
vLLM's `vec` cache layout: causal rows (chains, prefill chunks), tree masks, partial blocks,
shuffled block tables, requests whose rows are not next to each other in the step."""

from __future__ import annotations

import pytest
import torch

from entmtp_vllm.cpu_attention import rows

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 9, 3, 64, 128
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _available(dtype: torch.dtype) -> None:
    reason = rows.unsupported(dtype, HEAD_DIM, BLOCK) or rows.load_library()[1]
    if reason:
        pytest.skip(reason)


def _cache(num_blocks: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(num_blocks, KV_HEADS, BLOCK, 2 * HEAD_DIM).to(dtype)


def _reference(cache, row_start, row_count, seq_lens, block_table, query, visible) -> torch.Tensor:
    """float32: row i of a request sees its context and the new rows its mask allows."""
    out = torch.zeros(query.shape)
    group = HEADS // KV_HEADS
    for r in range(len(row_start)):
        first, count, length = int(row_start[r]), int(row_count[r]), int(seq_lens[r])
        heads = cache[block_table[r].long()].reshape(-1, KV_HEADS, 2 * BLOCK * HEAD_DIM)
        keys = heads[:, :, : HEAD_DIM * BLOCK].reshape(-1, KV_HEADS, HEAD_DIM, BLOCK).permute(1, 0, 3, 2)
        values = heads[:, :, HEAD_DIM * BLOCK :].reshape(-1, KV_HEADS, BLOCK, HEAD_DIM).permute(1, 0, 2, 3)
        keys = keys.reshape(KV_HEADS, -1, HEAD_DIM)[:, :length].float()
        values = values.reshape(KV_HEADS, -1, HEAD_DIM)[:, :length].float()
        context = length - count
        for i in range(count):
            new = torch.arange(count)
            seen_new = (new <= i) if visible is None else ((int(visible[first + i]) >> new) & 1).bool()
            seen = torch.cat([torch.ones(context, dtype=torch.bool), seen_new])
            for head in range(HEADS):
                scores = keys[head // group] @ (query[first + i, head].float() * HEAD_DIM**-0.5)
                out[first + i, head] = scores.masked_fill(~seen, float("-inf")).softmax(0) @ values[head // group]
    return out


def _requests(contexts: list[int], counts: list[int], gaps: list[int], dtype: torch.dtype):
    """Requests with these contexts and row counts, `gaps[r]` unrelated rows before request r's
    rows (rows the kernel must leave alone), blocks in shuffled order."""
    per = [-(-(c + n) // BLOCK) for c, n in zip(contexts, counts)]
    table = torch.zeros(len(contexts), max(per), dtype=torch.int32)
    order = torch.randperm(sum(per), dtype=torch.int32)
    at = 0
    for r, n in enumerate(per):
        table[r, :n] = order[at : at + n]
        at += n
    starts, row = [], 0
    for gap, count in zip(gaps, counts):
        starts.append(row + gap)
        row += gap + count
    query = torch.randn(row, HEADS, HEAD_DIM).to(dtype)
    return (
        _cache(sum(per), dtype),
        torch.tensor(starts, dtype=torch.int64),
        torch.tensor(counts, dtype=torch.int32),
        torch.tensor([c + n for c, n in zip(contexts, counts)], dtype=torch.int32),
        table,
        query,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_rows_match_the_reference(dtype):
    _available(dtype)
    torch.manual_seed(0)
    # a decode row, chains of 3 and 5 rows, a prefill chunk of 40, a block boundary inside the rows
    cache, start, count, seq, table, query = _requests([5, 300, 126, 1000, 0], [1, 3, 5, 2, 40], [0, 2, 0, 1, 3], dtype)
    out = torch.full_like(query, 7.0)
    rows.rows_attention(query, cache, out, start, count, seq, table, None, HEAD_DIM**-0.5)
    ref = _reference(cache, start, count, seq, table, query, None)
    taken = torch.cat([torch.arange(int(s), int(s) + int(n)) for s, n in zip(start, count)])
    assert (out[taken].float() - ref[taken]).abs().max() < TOLERANCE[dtype]
    untouched = torch.ones(len(query), dtype=torch.bool)
    untouched[taken] = False
    assert (out[untouched] == 7.0).all()  # rows of other requests are not written


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tree_masks_match_the_reference(dtype):
    _available(dtype)
    torch.manual_seed(1)
    parents = [-1, 0, 0, 1, 2, 2, 3]  # root; two children; their children
    masks = []
    for node in range(len(parents)):
        bits, walk = 0, node
        while walk >= 0:
            bits, walk = bits | (1 << walk), parents[walk]
        masks.append(bits)
    cache, start, count, seq, table, query = _requests([200, 127], [7, 7], [0, 0], dtype)
    visible = torch.tensor(masks * 2, dtype=torch.int64)
    out = torch.empty_like(query)
    rows.rows_attention(query, cache, out, start, count, seq, table, visible, HEAD_DIM**-0.5)
    assert (out.float() - _reference(cache, start, count, seq, table, query, visible)).abs().max() < TOLERANCE[dtype]
    causal = torch.empty_like(query)
    rows.rows_attention(query, cache, causal, start, count, seq, table, None, HEAD_DIM**-0.5)
    assert not torch.equal(out, causal)  # the masks changed what the rows see


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_agrees_with_vllms_cpu_op(dtype):
    _available(dtype)
    from vllm import _custom_ops as ops

    torch.manual_seed(2)
    contexts, counts = [300, 64, 900, 10], [3, 1, 2, 5]
    cache, start, count, seq, table, query = _requests(contexts, counts, [0, 0, 0, 0], dtype)
    ours = torch.empty_like(query)
    rows.rows_attention(query, cache, ours, start, count, seq, table, None, HEAD_DIM**-0.5)
    key_cache, value_cache = cache.view(cache.shape[0], KV_HEADS, BLOCK * 2, HEAD_DIM).chunk(2, dim=2)
    starts = torch.tensor([0, *torch.cumsum(count, 0).tolist()], dtype=torch.int32)
    theirs = torch.empty_like(query)
    meta = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(seq), num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, seq_lens=seq, dtype=dtype,
        query_start_loc=starts, causal=True, sliding_window_size=-1, isa="vec", enable_kv_split=False,
    )
    ops.cpu_attention_with_kv_cache(
        query=query, key_cache=key_cache, value_cache=value_cache, output=theirs, query_start_loc=starts,
        seq_lens=seq, scale=HEAD_DIM**-0.5, causal=True, alibi_slopes=None, sliding_window=-1,
        block_table=table, softcap=0.0, scheduler_metadata=meta, s_aux=None,
    )
    assert (ours.float() - theirs.float()).abs().max() < TOLERANCE[dtype]


def test_query_rows_may_be_strided_like_vllms_qkv_view():
    _available(torch.float32)
    torch.manual_seed(3)
    cache, start, count, seq, table, query = _requests([50, 300], [3, 2], [0, 0], torch.float32)
    fused = torch.randn(len(query), (HEADS + 2 * KV_HEADS) * HEAD_DIM)
    fused[:, : HEADS * HEAD_DIM] = query.reshape(len(query), -1)
    strided = fused[:, : HEADS * HEAD_DIM].view(len(query), HEADS, HEAD_DIM)
    assert not strided.is_contiguous()
    a, b = torch.empty_like(query), torch.empty_like(query)
    rows.rows_attention(query, cache, a, start, count, seq, table, None, HEAD_DIM**-0.5)
    rows.rows_attention(strided, cache, b, start, count, seq, table, None, HEAD_DIM**-0.5)
    assert torch.equal(a, b)


def test_bad_arguments_are_refused_before_the_kernel_runs():
    _available(torch.float32)
    cache, start, count, seq, table, query = _requests([10], [2], [0], torch.float32)
    with pytest.raises(ValueError, match="row_count"):
        rows.rows_attention(query, cache, torch.empty_like(query), start, count.long(), seq, table, None, 0.125)
    with pytest.raises(ValueError, match="share dtype"):
        rows.rows_attention(query.double(), cache, torch.empty_like(query), start, count, seq, table, None, 0.125)


def test_loading_the_kernel_leaves_the_processs_floating_point_alone():
    """A library built with -ffast-math turns on flush-to-zero in the loading process (hypothesis
    then refuses to run, and every float op of the engine changes); this one must not."""
    _available(torch.float32)
    import sys

    assert sys.float_info.min / 2 > 0.0  # a subnormal survives
    assert torch.tensor(1e-40, dtype=torch.float32).item() != 0.0


def test_unsupported_says_why():
    assert "float32 and bf16 only" in rows.unsupported(torch.float16, HEAD_DIM, BLOCK)
    reason = rows.unsupported(torch.float32, HEAD_DIM, 48)
    assert reason is not None and ("block size" in reason or "lacks" in reason)


def test_a_worker_builds_the_kernel_at_start_when_asked_and_says_what_it_takes(monkeypatch):
    from entmtp_vllm.config import CPU_ROWS_ATTENTION

    monkeypatch.setenv(CPU_ROWS_ATTENTION.env, "off")
    assert rows.build_at_start() is None
    monkeypatch.setenv(CPU_ROWS_ATTENTION.env, "on")
    if rows.load_library()[0] is not None:
        assert f"at least {CPU_ROWS_ATTENTION.min_context} tokens" in rows.build_at_start()
        monkeypatch.setenv(CPU_ROWS_ATTENTION.env, "all")
        assert "every drafting request" in rows.build_at_start()
    monkeypatch.setattr(rows, "load_library", lambda: (None, "no C++ compiler found"))
    line = rows.build_at_start()
    assert "cannot run here" in line and "no C++ compiler found" in line and CPU_ROWS_ATTENTION.env in line
