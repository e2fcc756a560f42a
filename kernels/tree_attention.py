"""Paged tree attention (forward): every request's draft tree against its paged KV cache.

Cache layout (vLLM's GPU flash-attention layout; vLLM allocates one `[2, num_blocks, block_size,
num_kv_heads, head_dim]` tensor per layer, and `kv_cache[0]` / `kv_cache[1]` are the two below):

    key_cache, value_cache : [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables           : int32 [B, max_blocks_per_seq]

The K/V of logical position p of request b, KV head h, is
`key_cache[block_tables[b, p // block_size], p % block_size, h, :]`. Only the last dimension must be
contiguous; the other strides are read from the tensors (K and V may differ).

Batch layout:

    q               : [T, num_q_heads, head_dim], T = query_start_loc[B]
    query_start_loc : int32 [B + 1]; rows query_start_loc[b] : query_start_loc[b+1] of q are the
                      n_b nodes of request b's tree in node order (node 0 = the root)
    prefix_lens     : int32 [B]; request b has prefix_lens[b] context tokens at positions
                      0 .. prefix_lens[b]-1, and node i's K/V is already in the cache at
                      position prefix_lens[b] + i (index-based slots), so request b spans
                      prefix_lens[b] + n_b positions
    tree_mask       : int32 [T, W]; bit j % 32 of word j // 32 of row query_start_loc[b] + i says
                      node j of request b is visible to node i (self and ancestors). Build it with
                      `pack_tree_mask` (`tree_mask.py`). Any tree with at most 32·W nodes works.
                      A row must see at least its own node.

Every prefix position is visible to every node; inside the tree only the bits decide, so requests
with different trees share one launch. Grouped-query attention: num_q_heads = G · num_kv_heads,
query head h reads KV head h // G.

Supported by the kernel: head_dim 64, 80, 96, 128 or 256 (`configs.SUPPORTED_HEAD_DIMS`; 80 and 96
are padded to 128 inside the kernel, the extra lanes loaded as 0 and never stored), fp16/bf16 on
CUDA (fp32/fp16 under the interpreter), and logits soft-capping as vLLM's attention backends apply
it (`logits_soft_cap`): scores = softcap · tanh(scale · q·k / softcap) before the mask and the
softmax; `softcap` 0 or None means none, and compiles a variant without the extra arithmetic. The
reference takes any head dim. All index × stride offsets are 64-bit, so caches, outputs and split
buffers may exceed 2^31 elements (e.g. a head-outermost cache layout, whose head stride is
num_blocks · block_size · head_dim).

Kernel: one program per (request, KV head, query tile[, KV split]). A tile is BLOCK_M = 64 rows of
(tree node, query head of the KV group) pairs, so the G query heads that share a KV head read each
K/V chunk once. The program walks its KV range in chunks of BLOCK_N positions (64; 32 for head
dim 256) through the block table with an online softmax (fp32 accumulators): first the chunks that
lie wholly in the prefix, with no mask at all, then the rest with the prefix/tree/length mask.
When the grid alone would leave the GPU idle (small batches, long contexts), the KV range is split
across programs and a second kernel merges the partial results by their log-sum-exp. Launch
constants per variant: `configs.attention_launch` / `configs.combine_launch`.
"""

import functools
import math

import torch
import triton
import triton.language as tl

from . import configs
from ._dispatch import INTERPRETER, check_runnable
from .tree_mask import pack_tree_mask, unpack_tree_mask  # noqa: F401 (pack_tree_mask: re-exported)

# Smallest KV range worth a split of its own (4 chunks of BLOCK_N).
MIN_SPLIT_LEN = 256
# CUDA's limit on the third grid dimension, which holds (request, KV head).
MAX_GRID_Z = 65535
LOG2_E = math.log2(math.e)


def _check_inputs(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    prefix_lens: torch.Tensor,
    tree_mask: torch.Tensor,
) -> None:
    """Shapes and dtypes both implementations rely on; raise ValueError naming the bad argument."""
    if q.dim() != 3 or key_cache.dim() != 4 or value_cache.shape != key_cache.shape:
        raise ValueError(
            "paged_tree_attention: expected q [T, Hq, D] and key/value caches "
            f"[num_blocks, block_size, Hkv, D], got q {tuple(q.shape)}, key_cache "
            f"{tuple(key_cache.shape)}, value_cache {tuple(value_cache.shape)}"
        )
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = key_cache.shape[2]
    if key_cache.shape[3] != head_dim or num_q_heads % num_kv_heads != 0:
        raise ValueError(
            f"paged_tree_attention: q has {num_q_heads} heads of {head_dim}, the cache "
            f"{num_kv_heads} heads of {key_cache.shape[3]}; need equal head_dim and "
            "num_q_heads a multiple of num_kv_heads"
        )
    if key_cache.dtype != q.dtype or value_cache.dtype != q.dtype:
        raise ValueError(
            f"paged_tree_attention: q is {q.dtype} but the caches are {key_cache.dtype}/"
            f"{value_cache.dtype}"
        )
    batch = prefix_lens.shape[0]
    for name, t, shape in (
        ("query_start_loc", query_start_loc, (batch + 1,)),
        ("prefix_lens", prefix_lens, (batch,)),
    ):
        if t.dtype != torch.int32 or tuple(t.shape) != shape:
            raise ValueError(f"paged_tree_attention: {name} must be int32 {shape}, got "
                             f"{t.dtype} {tuple(t.shape)}")
    if (block_tables.dtype != torch.int32 or block_tables.dim() != 2
            or block_tables.shape[0] != batch):
        raise ValueError(f"paged_tree_attention: block_tables must be int32 [{batch}, max_blocks], "
                         f"got {block_tables.dtype} {tuple(block_tables.shape)}")
    if tree_mask.dtype != torch.int32 or tree_mask.dim() != 2 or tree_mask.shape[0] != q.shape[0]:
        raise ValueError(f"paged_tree_attention: tree_mask must be int32 [{q.shape[0]}, W], got "
                         f"{tree_mask.dtype} {tuple(tree_mask.shape)}")


def _check_softcap(softcap: float | None) -> float:
    """The soft-cap as a float, 0.0 meaning off (vLLM's `logits_soft_cap` is 0 or None then)."""
    cap = float(softcap or 0.0)
    if not cap >= 0.0 or cap == float("inf"):
        raise ValueError(f"paged_tree_attention: softcap must be a finite number >= 0 (0 or None: "
                         f"off), got {softcap}")
    return cap


def paged_tree_attention_ref(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    prefix_lens: torch.Tensor,
    tree_mask: torch.Tensor,
    scale: float,
    out: torch.Tensor | None = None,
    *,
    softcap: float | None = 0.0,
) -> torch.Tensor:
    """Torch reference of `paged_tree_attention` (the CPU path): a loop over requests, fp32 math.

    Gathers each request's K/V through its block table, builds the dense visibility mask (prefix
    all visible, tree part unpacked from `tree_mask`) and runs a plain softmax of
    `scale · q·k`, soft-capped to `softcap · tanh(scale · q·k / softcap)` when `softcap` is
    positive (0 or None: no capping). Any head dim. Returns `out` (allocated like `q` when None)
    holding the attention output in q's dtype.
    """
    _check_inputs(q, key_cache, value_cache, block_tables, query_start_loc, prefix_lens, tree_mask)
    cap = _check_softcap(softcap)
    result = torch.empty_like(q) if out is None else out
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_q_heads // num_kv_heads
    starts = query_start_loc.tolist()
    prefixes = prefix_lens.tolist()
    for b, prefix in enumerate(prefixes):
        lo, hi = starts[b], starts[b + 1]
        n = hi - lo
        if n == 0:
            continue
        pos = torch.arange(prefix + n, device=q.device)
        blocks = block_tables[b, pos // block_size].long()
        k = key_cache[blocks, pos % block_size].float()  # [L, Hkv, D]
        v = value_cache[blocks, pos % block_size].float()
        visible = torch.ones(n, prefix + n, dtype=torch.bool, device=q.device)
        visible[:, prefix:] = unpack_tree_mask(tree_mask[lo:hi], n)
        qb = q[lo:hi].float().view(n, num_kv_heads, group, head_dim)
        scores = torch.einsum("nhgd,lhd->hgnl", qb, k) * scale
        if cap:
            scores = cap * torch.tanh(scores / cap)
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        o = torch.einsum("hgnl,lhd->nhgd", probs, v)
        result[lo:hi] = o.reshape(n, num_q_heads, head_dim).to(q.dtype)
    return result


@triton.jit
def _online_softmax_step(s, visible, v, m_i, l_i, acc):
    """Fold one chunk of scores (log2 domain) into the running max, sum and output."""
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # A row that has seen nothing yet keeps m = -inf; subtract 0 then so exp2 gives 0, not NaN.
    m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_sub[:, None])
    alpha = tl.exp2(m_i - m_sub)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _scores(q, k, qk_scale, softcap_log2, SOFTCAP: tl.constexpr):
    """Scores of one chunk in the log2 domain, soft-capped when SOFTCAP.

    Without SOFTCAP qk_scale = scale · log2(e). With SOFTCAP qk_scale = 2 · log2(e) · scale / cap
    and softcap_log2 = cap · log2(e): cap · tanh(x / cap), x = scale · q·k, with
    tanh(y) = 1 - 2 / (e^(2y) + 1) (exact at both saturations: e^(2y) = inf gives 1, 0 gives -1).
    """
    s = tl.dot(q, tl.trans(k)) * qk_scale
    if SOFTCAP:
        s = softcap_log2 * (1.0 - 2.0 / (tl.exp2(s) + 1.0))
    return s


@triton.jit(do_not_specialize=configs.ATTENTION_NOT_SPECIALIZED)
def _tree_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, lse_ptr,
    block_tables_ptr, query_start_loc_ptr, prefix_lens_ptr, tree_mask_ptr,
    qk_scale, softcap_log2, num_kv_heads, group_size, num_splits, block_size,
    stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_os, stride_ot, stride_oh,
    stride_ls, stride_lt,
    stride_bt, stride_mask,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr, SOFTCAP: tl.constexpr,
):
    """Grid (query tiles, KV splits, B · num_kv_heads).

    Without SPLIT `out_ptr` is the output [T, Hq, D] (stride_os = 0) and `lse_ptr` is unused.
    With SPLIT `out_ptr` is the fp32 partial output [S, T, Hq, D] (normalised per split) and
    `lse_ptr` the fp32 [S, T, Hq] log2-sum-exp2 of each split's scores (-inf when it saw nothing).
    HEAD_DIM is the head size, BLOCK_D the power of two ≥ HEAD_DIM the tiles use (lanes past
    HEAD_DIM load as 0 and are not stored). Every offset that multiplies an index by a stride is
    computed in int64 (a cache with heads outermost has a head stride of blocks · block_size · D).
    """
    q_tile = tl.program_id(0)
    split = tl.program_id(1)
    b = tl.program_id(2) // num_kv_heads
    kv_head = tl.program_id(2) % num_kv_heads

    q_start = tl.load(query_start_loc_ptr + b)
    n_q = tl.load(query_start_loc_ptr + b + 1) - q_start
    queries_per_tile = BLOCK_M // group_size
    first_q = q_tile * queries_per_tile
    if first_q >= n_q:
        return
    prefix = tl.load(prefix_lens_ptr + b)
    seq_len = prefix + n_q

    # Row r of the tile is query node first_q + r // G, query head kv_head·G + r % G.
    offs_m = tl.arange(0, BLOCK_M)
    node_q = first_q + offs_m // group_size
    row_ok = (offs_m < queries_per_tile * group_size) & (node_q < n_q)
    token = (q_start + node_q).to(tl.int64)
    head = (kv_head * group_size + offs_m % group_size).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    if BLOCK_D == HEAD_DIM:
        d_ok = tl.full([BLOCK_D], 1, tl.int1)  # folds away: the unpadded variants load unmasked
    else:
        d_ok = offs_d < HEAD_DIM
    q = tl.load(q_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    if SPLIT:
        chunk = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
        kv_lo = split * chunk
        kv_hi = tl.minimum(kv_lo + chunk, seq_len)
    else:
        kv_lo = 0
        kv_hi = seq_len
    prefix_full = (prefix // BLOCK_N) * BLOCK_N  # end of the chunks lying wholly in the prefix

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    bt_row = block_tables_ptr + b.to(tl.int64) * stride_bt
    k_head = k_cache_ptr + kv_head.to(tl.int64) * stride_kh
    v_head = v_cache_ptr + kv_head.to(tl.int64) * stride_vh
    all_visible = tl.full([BLOCK_M, BLOCK_N], 1, tl.int1)

    # Prefix chunks: every position exists and is visible, no masks (but the padded lanes).
    for start in range(kv_lo, tl.minimum(kv_hi, prefix_full), BLOCK_N):
        pos = start + offs_n
        block = tl.load(bt_row + pos // block_size).to(tl.int64)
        slot = (pos % block_size).to(tl.int64)
        k = tl.load(k_head + (block * stride_kb + slot * stride_ks)[:, None] + offs_d[None, :],
                    mask=d_ok[None, :], other=0.0)
        v = tl.load(v_head + (block * stride_vb + slot * stride_vs)[:, None] + offs_d[None, :],
                    mask=d_ok[None, :], other=0.0)
        s = _scores(q, k, qk_scale, softcap_log2, SOFTCAP)
        m_i, l_i, acc = _online_softmax_step(s, all_visible, v, m_i, l_i, acc)

    # Chunks touching the tree (or the prefix's ragged end): length mask + tree bits.
    for start in range(tl.maximum(kv_lo, prefix_full), kv_hi, BLOCK_N):
        pos = start + offs_n
        pos_ok = pos < kv_hi
        block = tl.load(bt_row + pos // block_size, mask=pos_ok, other=0).to(tl.int64)
        slot = (pos % block_size).to(tl.int64)
        kv_ok = pos_ok[:, None] & d_ok[None, :]
        k = tl.load(k_head + (block * stride_kb + slot * stride_ks)[:, None] + offs_d[None, :],
                    mask=kv_ok, other=0.0)
        v = tl.load(v_head + (block * stride_vb + slot * stride_vs)[:, None] + offs_d[None, :],
                    mask=kv_ok, other=0.0)
        s = _scores(q, k, qk_scale, softcap_log2, SOFTCAP)
        node_k = pos - prefix
        in_tree = pos_ok & (node_k >= 0)
        node_k = tl.where(in_tree, node_k, 0)
        words = tl.load(tree_mask_ptr + token[:, None] * stride_mask + (node_k // 32)[None, :],
                        mask=row_ok[:, None] & in_tree[None, :], other=0)
        bit = (words >> (node_k % 32)[None, :]) & 1
        visible = ((pos < prefix) & pos_ok)[None, :] | (bit != 0)
        m_i, l_i, acc = _online_softmax_step(s, visible, v, m_i, l_i, acc)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    split64 = split.to(tl.int64)
    tl.store(out_ptr + split64 * stride_os + token[:, None] * stride_ot + head[:, None] * stride_oh
             + offs_d[None, :], o.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & d_ok[None, :])
    if SPLIT:
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(lse_ptr + split64 * stride_ls + token * stride_lt + head, lse, mask=row_ok)


@triton.jit(do_not_specialize=configs.COMBINE_NOT_SPECIALIZED)
def _combine_splits_kernel(
    part_ptr, lse_ptr, out_ptr, num_rows, num_q_heads, num_splits,
    stride_ps, stride_ls, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, ROWS: tl.constexpr,
):
    """Grid (cdiv(T·Hq, ROWS),): out[t, h] = Σ_s w_s · part[s, t, h], w_s ∝ 2^lse[s, t, h].

    `part` is fp32 [S, T, Hq, HEAD_DIM] and `lse` fp32 [S, T, Hq], both contiguous, so row
    r = t · Hq + h of a split is at offset r · HEAD_DIM (resp. r). Offsets in int64.
    """
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < num_rows
    offs_d = tl.arange(0, BLOCK_D)
    if BLOCK_D == HEAD_DIM:
        d_ok = tl.full([BLOCK_D], 1, tl.int1)
    else:
        d_ok = offs_d < HEAD_DIM
    lse_rows = lse_ptr + rows
    part_rows = part_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :]
    # Pointers advance by one split per step (64-bit adds, no index × stride product).
    m = tl.full([ROWS], float("-inf"), tl.float32)
    lse_split = lse_rows
    for s in range(num_splits):
        m = tl.maximum(m, tl.load(lse_split, mask=row_ok, other=float("-inf")))
        lse_split += stride_ls
    m_sub = tl.where(m == float("-inf"), 0.0, m)
    acc = tl.zeros([ROWS, BLOCK_D], tl.float32)
    total = tl.zeros([ROWS], tl.float32)
    for s in range(num_splits):
        w = tl.exp2(tl.load(lse_rows, mask=row_ok, other=float("-inf")) - m_sub)
        part = tl.load(part_rows, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        acc += w[:, None] * part
        total += w
        lse_rows += stride_ls
        part_rows += stride_ps
    o = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    out = (out_ptr + (rows // num_q_heads)[:, None] * stride_ot
           + (rows % num_q_heads)[:, None] * stride_oh + offs_d[None, :])
    tl.store(out, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _choose_splits(device: torch.device, programs: int, max_seq_len: int | None) -> int:
    """KV splits so that the grid covers the GPU about twice; 1 on CPU (the interpreter)."""
    if device.type != "cuda":
        return 1
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    if programs >= sms:
        return 1
    splits = min(configs.MAX_SPLITS, triton.cdiv(2 * sms, programs))
    if max_seq_len is not None:
        splits = min(splits, max(1, max_seq_len // MIN_SPLIT_LEN))
    return splits


def paged_tree_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    prefix_lens: torch.Tensor,
    tree_mask: torch.Tensor,
    scale: float,
    out: torch.Tensor | None = None,
    *,
    softcap: float | None = 0.0,
    max_query_len: int | None = None,
    max_seq_len: int | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Tree attention over a paged KV cache with the Triton kernel (layout: module docstring).

    Same data arguments, `softcap` and result as `paged_tree_attention_ref`; head dims
    `configs.SUPPORTED_HEAD_DIMS` (others raise ValueError). Keyword-only launch hints:
    - `max_query_len`: at least the largest tree (a smaller value leaves nodes uncomputed);
      computed with a device sync when None (vLLM's metadata has it).
    - `max_seq_len`: the longest prefix + tree; only caps the number of KV splits.
    - `num_splits`: force the KV split count, 1..MAX_SPLITS; when None it is chosen from the grid
      size and the SM count (always 1 on CPU).
    Runs on CUDA tensors, or on CPU tensors under TRITON_INTERPRET=1; raises RuntimeError
    otherwise (call `paged_tree_attention_ref` there).
    """
    _check_inputs(q, key_cache, value_cache, block_tables, query_start_loc, prefix_lens, tree_mask)
    cap = _check_softcap(softcap)
    check_runnable("paged_tree_attention", q.device, q.dtype == torch.bfloat16)
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = key_cache.shape[2]
    group = num_q_heads // num_kv_heads
    dtypes = configs.INTERPRETER_DTYPES if INTERPRETER else configs.GPU_DTYPES
    if q.dtype not in dtypes:
        raise ValueError(f"paged_tree_attention: supported dtypes {dtypes}, got {q.dtype}; "
                         "paged_tree_attention_ref takes any")
    try:
        configs.check_head_dim(head_dim)
    except ValueError as error:
        raise ValueError(f"paged_tree_attention: {error}; paged_tree_attention_ref takes any") \
            from None
    if group > configs.BLOCK_M:
        raise ValueError(f"paged_tree_attention: at most {configs.BLOCK_M} query heads per KV "
                         f"head, got {group}")
    if q.stride(-1) != 1 or key_cache.stride(-1) != 1 or value_cache.stride(-1) != 1:
        raise ValueError("paged_tree_attention: q and the caches need a contiguous last dim")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.stride(-1) != 1):
        raise ValueError("paged_tree_attention: out must be like q with a contiguous last dim")
    # Small index tensors: the kernel assumes unit strides along their last dim (no-ops usually).
    block_tables, query_start_loc = block_tables.contiguous(), query_start_loc.contiguous()
    prefix_lens, tree_mask = prefix_lens.contiguous(), tree_mask.contiguous()
    result = torch.empty_like(q) if out is None else out
    batch = prefix_lens.shape[0]
    if batch * num_kv_heads > MAX_GRID_Z:
        raise ValueError(f"paged_tree_attention: batch × KV heads = {batch * num_kv_heads} > "
                         f"{MAX_GRID_Z} (CUDA grid limit)")
    if num_tokens == 0:
        return result
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    if max_query_len > 32 * tree_mask.shape[1]:
        raise ValueError(f"paged_tree_attention: a tree of {max_query_len} nodes needs "
                         f"{triton.cdiv(max_query_len, 32)} mask words, tree_mask has "
                         f"{tree_mask.shape[1]}")

    q_tiles = triton.cdiv(max_query_len, configs.BLOCK_M // group)  # BLOCK_M: every variant's
    grid_bh = batch * num_kv_heads
    if num_splits is None:
        num_splits = _choose_splits(q.device, q_tiles * grid_bh, max_seq_len)
    if not 1 <= num_splits <= configs.MAX_SPLITS:
        raise ValueError(f"paged_tree_attention: num_splits must be in 1..{configs.MAX_SPLITS}")
    split = num_splits > 1
    if split:
        target = torch.empty(num_splits, num_tokens, num_q_heads, head_dim,
                             dtype=torch.float32, device=q.device)
        lse = torch.empty(num_splits, num_tokens, num_q_heads, dtype=torch.float32,
                          device=q.device)
        stride_os = target.stride(0)
    else:
        target, lse, stride_os = result, result, 0  # lse_ptr is unused without SPLIT

    launch = configs.attention_launch(head_dim, split, softcap=cap > 0.0)
    if cap:  # scores cap · tanh(x / cap), x = scale · q·k; see _scores
        qk_scale, softcap_log2 = 2.0 * LOG2_E * scale / cap, cap * LOG2_E
    else:
        qk_scale, softcap_log2 = scale * LOG2_E, 0.0
    _tree_attention_kernel[(q_tiles, num_splits, grid_bh)](
        q, key_cache, value_cache, target, lse,
        block_tables, query_start_loc, prefix_lens, tree_mask,
        qk_scale, softcap_log2, num_kv_heads, group, num_splits, key_cache.shape[1],
        q.stride(0), q.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        stride_os, target.stride(-3), target.stride(-2),
        lse.stride(0) if split else 0, lse.stride(1) if split else 0,
        block_tables.stride(0), tree_mask.stride(0),
        **launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages,
    )
    if split:
        combine = configs.combine_launch(head_dim)
        rows = num_tokens * num_q_heads
        _combine_splits_kernel[(triton.cdiv(rows, combine.constexprs["ROWS"]),)](
            target, lse, result, rows, num_q_heads, num_splits,
            target.stride(0), lse.stride(0), result.stride(0), result.stride(1),
            **combine.constexprs, num_warps=combine.num_warps, num_stages=combine.num_stages,
        )
    return result
