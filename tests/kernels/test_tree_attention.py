"""Paged tree attention: kernel vs torch reference, and the reference vs an independent dense SDPA.

Runs the kernel under the Triton interpreter (fp32, fp16) on CPU, or compiled (fp16, bf16) on CUDA
when a GPU is present (see conftest.py). Every batch comes from `make_paged_batch`: shuffled
non-contiguous blocks and NaN in every slot no request owns, so reading a wrong slot shows.
Covered: every supported head dim (64, 80, 96, 128, 256; 80 and 96 padded inside the kernel) with
and without logits soft-capping, GQA groups, the split-KV path, and a cache whose KV heads lie
more than 2^31 elements apart (64-bit offsets).
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from entmtp_kernels import (
    SUPPORTED_HEAD_DIMS,
    pack_tree_mask,
    paged_tree_attention,
    paged_tree_attention_ref,
)
from entmtp_kernels._dispatch import INTERPRETER
from entmtp_kernels.synthetic import (
    TOLERANCE,
    ancestor_mask,
    chain_parents,
    make_paged_batch,
    random_tree_parents,
)
from entmtp_kernels.tree_attention import unpack_tree_mask

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TREES_FILE = SHARED_DATA / "trees" / "medusa_hydra_trees.json"


def medusa_63_mask() -> torch.Tensor:
    """Ancestor mask of mc_sim_7b_63 (64 nodes with the root), straight from its paths."""
    if not TREES_FILE.exists():
        pytest.skip(f"{TREES_FILE} is absent (the shared data folder is not next to the repo)")
    paths = json.loads(TREES_FILE.read_text())["trees"]["mc_sim_7b_63"]
    nodes = [()] + sorted((tuple(p) for p in paths), key=lambda p: (len(p), p))
    n = len(nodes)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i, node in enumerate(nodes):
        for j, other in enumerate(nodes):
            mask[i, j] = node[:len(other)] == other  # j is i or an ancestor of i
    return mask


def random_mask(n: int, seed: int) -> torch.Tensor:
    return ancestor_mask(random_tree_parents(n, torch.Generator().manual_seed(seed)))


@dataclass
class Case:
    """One batch shape; `trees` are thunks so the medusa file is read only when a case runs."""

    name: str
    prefix_lens: list[int]
    trees: list[Callable[[], torch.Tensor]]
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int = 16
    num_splits: int | None = None
    softcap: float = 0.0


CASES = [
    # Ragged batch, different trees per request (random, chain, single node), prefix 0,
    # prefixes on and off block boundaries, GQA 4.
    Case("ragged_gqa4", [37, 100, 0, 16],
         [lambda: random_mask(5, 1), lambda: random_mask(40, 2), lambda: ancestor_mask(
             chain_parents(9)), lambda: ancestor_mask([-1])], 8, 2, 64),
    # SmolLM2 head layout: 9 query / 3 KV heads (GQA 3, not a power of two), head_dim 64.
    Case("smollm2_gqa3", [5, 64], [lambda: random_mask(20, 3), lambda: ancestor_mask(
        chain_parents(4))], 9, 3, 64),
    # Plain multi-head, head_dim 128, block size 32, a tree wider than one mask word.
    Case("mha_d128", [70, 1], [lambda: random_mask(33, 4), lambda: ancestor_mask([-1])],
         4, 4, 128, block_size=32),
    # The 63-node published tree next to a random one; prefix not a block multiple.
    Case("mc_sim_7b_63", [50, 3], [medusa_63_mask, lambda: random_mask(12, 5)], 8, 2, 64),
    # 100 nodes (4 mask words): no 64-node limit.
    Case("tree_100", [20], [lambda: random_mask(100, 6)], 2, 1, 64),
    # Split-KV path: 3 splits, some of them empty for the short request.
    Case("split3", [150, 0, 9], [lambda: random_mask(17, 7), lambda: random_mask(6, 8),
                                 lambda: ancestor_mask(chain_parents(3))], 8, 2, 128,
         num_splits=3),
    # Padded head dim (80 → 128 lanes) with GQA 2 on the split path, a tree of 2 mask words.
    Case("d80_gqa2_split3", [90, 0], [lambda: random_mask(40, 13), lambda: random_mask(5, 14)],
         4, 2, 80, num_splits=3),
    # Phi-3-mini's head size (96, multi-head), padded head dim without splits.
    Case("d96_mha", [33, 64], [lambda: random_mask(9, 15), lambda: ancestor_mask([-1])],
         6, 6, 96),
    # Gemma-2-2B's head layout (8 query / 4 KV heads of 256) with soft-capping (Gemma 2 caps at
    # 50; 1.5 makes the cap bite on these N(0, 1) scores), split in 2.
    Case("gemma2_d256_softcap", [70, 3], [lambda: random_mask(12, 16), lambda: ancestor_mask(
        chain_parents(4))], 8, 4, 256, num_splits=2, softcap=1.5),
]


@pytest.mark.triton
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kernel_matches_reference(case: Case, dtype: torch.dtype, device: torch.device) -> None:
    batch = make_paged_batch(case.prefix_lens, [t() for t in case.trees], case.num_q_heads,
                             case.num_kv_heads, case.head_dim, case.block_size, dtype, device)
    expected = paged_tree_attention_ref(*batch.upcast(), softcap=case.softcap)
    got = paged_tree_attention(*batch.attention_args(), num_splits=case.num_splits,
                               softcap=case.softcap)
    assert got.dtype == dtype and got.shape == batch.q.shape
    assert not got.isnan().any(), "NaN: the kernel read an unowned slot or a padded row"
    error = (got.float() - expected).abs().max().item()
    assert error <= TOLERANCE[dtype], f"max error {error:.2e} > {TOLERANCE[dtype]:.0e}"


@pytest.mark.triton
@pytest.mark.parametrize("softcap", [0.0, 2.0], ids=["nocap", "softcap"])
@pytest.mark.parametrize("head_dim", SUPPORTED_HEAD_DIMS, ids=lambda d: f"d{d}")
def test_head_dims_and_softcap(head_dim: int, softcap: float, dtype: torch.dtype,
                               device: torch.device) -> None:
    """Every supported head dim × soft-cap on/off, GQA 2, without and with 2 KV splits.

    Request 0 spans 107 positions: its first 64-position chunk lies wholly in the prefix (the
    unmasked loop), and with 2 splits each split gets one 64-position range.
    """
    batch = make_paged_batch([100, 0], [random_mask(7, head_dim), ancestor_mask(chain_parents(3))],
                             4, 2, head_dim, 16, dtype, device, seed=head_dim)
    expected = paged_tree_attention_ref(*batch.upcast(), softcap=softcap)
    for splits in (1, 2):
        got = paged_tree_attention(*batch.attention_args(), softcap=softcap, num_splits=splits,
                                   max_query_len=7)
        assert not got.isnan().any(), f"NaN with {splits} splits"
        error = (got.float() - expected).abs().max().item()
        assert error <= TOLERANCE[dtype], (f"{splits} splits: max error {error:.2e} > "
                                           f"{TOLERANCE[dtype]:.0e}")


@pytest.mark.parametrize("head_dim", [72, 512, 32])
def test_unsupported_head_dim_is_refused(head_dim: int, device: torch.device) -> None:
    batch = make_paged_batch([4], [random_mask(3, 17)], 2, 1, head_dim, 16, torch.float16, device)
    with pytest.raises(ValueError, match=f"head_dim {head_dim} .*64, 80, 96, 128, 256"):
        paged_tree_attention(*batch.attention_args())
    paged_tree_attention_ref(*batch.attention_args())  # the reference takes any head dim


@pytest.mark.parametrize("softcap", [-1.0, float("nan"), float("inf")])
def test_bad_softcap_is_refused(softcap: float, device: torch.device) -> None:
    batch = make_paged_batch([4], [random_mask(3, 18)], 2, 1, 64, 16, torch.float16, device)
    for fn in (paged_tree_attention, paged_tree_attention_ref):
        with pytest.raises(ValueError, match="softcap"):
            fn(*batch.attention_args(), softcap=softcap)


@pytest.mark.triton
def test_kernel_with_kv_heads_past_2_31_elements(device: torch.device) -> None:
    """A head-outermost cache (vLLM's HND-like layout) whose KV head 2 lies 2^32 - 2^21 elements
    after head 0.

    The head stride (2^31 - 2^20) fits in int32, so Triton passes it as i32 and only a 64-bit
    kv_head × stride product reaches head 2: in 32 bits it wraps to 2^21 elements *before* head
    0, into a NaN-filled guard region, so a 32-bit offset shows as NaN rather than a crash. The
    8 GiB fp16 buffer comes from torch.empty and only the guard and the slots the batch owns are
    written (on CPU, Linux commits only the touched pages).
    """
    dtype = torch.float16
    batch = make_paged_batch([70, 5], [random_mask(6, 19), ancestor_mask(chain_parents(3))],
                             6, 3, 64, 16, dtype, device, seed=4)
    num_blocks, block_size, kv_heads, head_dim = batch.key_cache.shape
    per_head = num_blocks * block_size * head_dim  # one head of K (or V) of the whole cache
    head_stride = 2**31 - 2**20
    guard = 2**21  # head 0 starts here; int32 wrap-around of head 2's offset lands at 0
    assert 2 * per_head <= head_stride and (guard + (kv_heads - 1) * head_stride) % 2**32 == 0
    numel = guard + (kv_heads - 1) * head_stride + 2 * per_head  # K head h, then V head h
    if device.type == "cuda" and torch.cuda.mem_get_info(device)[0] < numel * 2 + (1 << 30):
        pytest.skip("needs 9 GiB of free GPU memory for the > 2^32-element cache")
    try:
        storage = torch.empty(numel, dtype=dtype, device=device)
    except (RuntimeError, MemoryError) as error:
        pytest.skip(f"cannot reserve a {numel * 2 / 2**30:.1f} GiB buffer: {error}")
    storage[:guard] = float("nan")
    shape = (num_blocks, block_size, kv_heads, head_dim)
    strides = (block_size * head_dim, head_dim, head_stride, 1)
    key_cache = storage.as_strided(shape, strides, guard)
    value_cache = storage.as_strided(shape, strides, guard + per_head)
    key_cache.copy_(batch.key_cache)  # touches only the 3 × 2 head ranges
    value_cache.copy_(batch.value_cache)
    args = list(batch.attention_args())
    args[1], args[2] = key_cache, value_cache

    expected = paged_tree_attention_ref(*batch.upcast())
    for splits in (1, 2):
        got = paged_tree_attention(*args, num_splits=splits)
        assert not got.isnan().any(), "NaN: a KV head was read from the wrong place"
        error = (got.float() - expected).abs().max().item()
        assert error <= TOLERANCE[dtype], f"{splits} splits: max error {error:.2e}"
    del storage, key_cache, value_cache, args


@pytest.mark.triton
@pytest.mark.skipif(INTERPRETER, reason="the interpreter compiles nothing")
def test_no_compile_after_warm_up(dtype: torch.dtype, device: torch.device) -> None:
    """After `warm_up_launches` on a tiny batch, steps with other token counts, tree sizes (mask
    widths), split counts, block-table widths and request counts reuse the compiled binaries."""
    from entmtp_kernels import compact_kv, warm_up_launches
    from entmtp_kernels.compaction import _compact_kv_kernel
    from entmtp_kernels.tree_attention import _combine_splits_kernel, _tree_attention_kernel

    kernels = (_tree_attention_kernel, _combine_splits_kernel, _compact_kv_kernel)

    def compiled() -> list[int]:
        return [sum(len(caches[0]) for caches in k.device_caches.values()) for k in kernels]

    heads, kv_heads, head_dim, block_size = 8, 2, 96, 16

    def compaction_args(batch, paths: list[list[int]]) -> tuple:
        starts = torch.tensor([0] + [len(p) for p in paths]).cumsum(0).to(torch.int32)
        indices = torch.tensor([a for p in paths for a in p], dtype=torch.int32)
        return ([batch.key_cache, batch.value_cache], indices.to(device), starts.to(device),
                batch.prefix_lens, batch.block_tables)

    tiny = make_paged_batch([0], [ancestor_mask([-1, 0])], heads, kv_heads, head_dim, block_size,
                            dtype, device, poison_unused=False)
    for launch in warm_up_launches(dtype, head_dim):
        if launch.op == "paged_tree_attention":
            paged_tree_attention(*tiny.attention_args(), **launch.kwargs)
        else:
            compact_kv(*compaction_args(tiny, [[0]]), **launch.kwargs)
    torch.cuda.synchronize()
    after_warm_up = compiled()

    steps = [
        ([300, 17, 0], [random_mask(40, 20), ancestor_mask([-1]), random_mask(7, 21)], None),
        ([1000], [ancestor_mask([-1])], 16),
        ([5, 64, 129, 2], [random_mask(n, 22 + n) for n in (3, 33, 64, 9)], 3),
        ([31], [random_mask(12, 30)], 1),
    ]
    for prefix_lens, masks, splits in steps:
        batch = make_paged_batch(prefix_lens, masks, heads, kv_heads, head_dim, block_size, dtype,
                                 device, poison_unused=False)
        args = list(batch.attention_args())
        widened = torch.zeros(len(prefix_lens), batch.block_tables.shape[1] + 3,
                              dtype=torch.int32, device=device)
        widened[:, :batch.block_tables.shape[1]] = batch.block_tables
        args[3] = widened[:, :batch.block_tables.shape[1] + len(prefix_lens) % 3]
        paged_tree_attention(*args, num_splits=splits)
        compact_kv(*compaction_args(batch, [[0] + ([2] if m.shape[0] > 2 else []) for m in masks]))
    torch.cuda.synchronize()
    assert compiled() == after_warm_up, "a serving-like step compiled a new binary"


def test_batches_use_shuffled_blocks(device: torch.device) -> None:
    """The paged layout under test is not secretly contiguous."""
    case = CASES[0]
    batch = make_paged_batch(case.prefix_lens, [t() for t in case.trees], case.num_q_heads,
                             case.num_kv_heads, case.head_dim, case.block_size, torch.float16,
                             device)
    blocks = batch.block_tables[1, :8].tolist()  # the 100 + 40 positions of request 1
    assert blocks != sorted(blocks) and len(set(blocks)) == len(blocks)


@pytest.mark.triton
def test_kernel_automatic_splits_and_hints(dtype: torch.dtype, device: torch.device) -> None:
    """Launch hints given (as vLLM would) and splits chosen by the dispatcher (several on a GPU)."""
    prefix_lens, sizes = [1200, 7], [8, 64]  # on an H100/H200: 4 splits
    masks = [random_mask(sizes[0], 9), random_mask(sizes[1], 10)]
    batch = make_paged_batch(prefix_lens, masks, 8, 2, 64, 16, dtype, device, seed=3)
    expected = paged_tree_attention_ref(*batch.upcast())
    got = paged_tree_attention(*batch.attention_args(), max_query_len=max(sizes),
                               max_seq_len=max(p + n for p, n in zip(prefix_lens, sizes)))
    assert (got.float() - expected).abs().max().item() <= TOLERANCE[dtype]


@pytest.mark.triton
def test_kernel_writes_into_out(device: torch.device) -> None:
    dtype = torch.float16
    batch = make_paged_batch([10], [random_mask(6, 11)], 4, 2, 64, 16, dtype, device)
    out = torch.full_like(batch.q, float("nan"))
    result = paged_tree_attention(*batch.attention_args(), out)
    assert result is out and not out.isnan().any()


@pytest.mark.skipif(not INTERPRETER, reason="only the interpreter refuses bf16")
def test_interpreter_refuses_bf16(device: torch.device) -> None:
    batch = make_paged_batch([4], [random_mask(3, 12)], 2, 1, 64, 16, torch.bfloat16, device)
    with pytest.raises(RuntimeError, match="bfloat16"):
        paged_tree_attention(*batch.attention_args())


def _dense_requests(batch, case: Case, device: torch.device):
    """Per request of a `keep_dense` batch: q [Hq, n, D], k and v [Hq, L, D] (KV heads repeated
    for their query heads) and the visibility mask [n, L] (prefix all visible, then the tree)."""
    group = case.num_q_heads // case.num_kv_heads
    starts = batch.query_start_loc.tolist()
    for b, prefix in enumerate(case.prefix_lens):
        q = batch.q[starts[b]:starts[b + 1]].transpose(0, 1)
        k = batch.dense_k[b].repeat_interleave(group, dim=1).transpose(0, 1)
        v = batch.dense_v[b].repeat_interleave(group, dim=1).transpose(0, 1)
        mask = torch.cat([torch.ones(q.shape[1], prefix, dtype=torch.bool, device=device),
                          batch.bool_masks[b]], dim=1)
        yield q, k, v, mask


@pytest.mark.parametrize("case", [CASES[1], CASES[3]], ids=lambda c: c.name)
def test_reference_matches_dense_sdpa(case: Case, device: torch.device) -> None:
    """The reference's gather + unpacking vs SDPA on the dense K/V the batch was built from."""
    batch = make_paged_batch(case.prefix_lens, [t() for t in case.trees], case.num_q_heads,
                             case.num_kv_heads, case.head_dim, case.block_size, torch.float32,
                             device, keep_dense=True)
    got = paged_tree_attention_ref(*batch.attention_args())
    starts = batch.query_start_loc.tolist()
    for b, (q, k, v, mask) in enumerate(_dense_requests(batch, case, device)):
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=batch.scale)
        torch.testing.assert_close(got[starts[b]:starts[b + 1]], want.transpose(0, 1),
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("softcap", [0.0, 1.5], ids=["nocap", "softcap"])
def test_reference_softcap_matches_dense(softcap: float, device: torch.device) -> None:
    """The reference's soft-capping vs the formula on dense K/V: cap·tanh(scale · q·k / cap)."""
    case = CASES[1]
    batch = make_paged_batch(case.prefix_lens, [t() for t in case.trees], case.num_q_heads,
                             case.num_kv_heads, case.head_dim, case.block_size, torch.float32,
                             device, keep_dense=True)
    got = paged_tree_attention_ref(*batch.attention_args(), softcap=softcap)
    starts = batch.query_start_loc.tolist()
    for b, (q, k, v, mask) in enumerate(_dense_requests(batch, case, device)):
        scores = q @ k.transpose(1, 2) * batch.scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        want = scores.masked_fill(~mask, -math.inf).softmax(-1) @ v
        torch.testing.assert_close(got[starts[b]:starts[b + 1]], want.transpose(0, 1),
                                   atol=1e-5, rtol=1e-5)
    if softcap:  # the cap changes the result on these scores
        plain = paged_tree_attention_ref(*batch.attention_args())
        assert (plain - got).abs().max().item() > 1e-2


def test_pack_tree_mask_bits() -> None:
    gen = torch.Generator().manual_seed(0)
    masks = [torch.rand(n, n, generator=gen) < 0.5 for n in (1, 31, 32, 33, 64, 100)]
    packed = pack_tree_mask(masks)
    assert packed.dtype == torch.int32 and packed.shape == (sum(m.shape[0] for m in masks), 4)
    row = 0
    for mask in masks:
        n = mask.shape[0]
        assert torch.equal(unpack_tree_mask(packed[row:row + n], n), mask)
        for i, j in ((0, 0), (n - 1, n - 1), (n // 2, min(31, n - 1))):
            word = int(packed[row + i, j // 32])
            assert bool((word >> (j % 32)) & 1) == bool(mask[i, j])
        row += n
    assert pack_tree_mask([torch.ones(5, 5, dtype=torch.bool)]).shape == (5, 1)
