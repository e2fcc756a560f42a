"""Paged tree attention: kernel vs torch reference, and the reference vs an independent dense SDPA.

Runs the kernel under the Triton interpreter (fp32, fp16) on CPU, or compiled (fp16, bf16) on CUDA
when a GPU is present (see conftest.py). Every batch comes from `make_paged_batch`: shuffled
non-contiguous blocks and NaN in every slot no request owns, so reading a wrong slot shows.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from entmtp_kernels import pack_tree_mask, paged_tree_attention, paged_tree_attention_ref
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
]


@pytest.mark.triton
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kernel_matches_reference(case: Case, dtype: torch.dtype, device: torch.device) -> None:
    batch = make_paged_batch(case.prefix_lens, [t() for t in case.trees], case.num_q_heads,
                             case.num_kv_heads, case.head_dim, case.block_size, dtype, device)
    expected = paged_tree_attention_ref(*batch.upcast())
    got = paged_tree_attention(*batch.attention_args(), num_splits=case.num_splits)
    assert got.dtype == dtype and got.shape == batch.q.shape
    assert not got.isnan().any(), "NaN: the kernel read an unowned slot or a padded row"
    error = (got.float() - expected).abs().max().item()
    assert error <= TOLERANCE[dtype], f"max error {error:.2e} > {TOLERANCE[dtype]:.0e}"


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


@pytest.mark.parametrize("case", [CASES[1], CASES[3]], ids=lambda c: c.name)
def test_reference_matches_dense_sdpa(case: Case, device: torch.device) -> None:
    """The reference's gather + unpacking vs SDPA on the dense K/V the batch was built from."""
    batch = make_paged_batch(case.prefix_lens, [t() for t in case.trees], case.num_q_heads,
                             case.num_kv_heads, case.head_dim, case.block_size, torch.float32,
                             device, keep_dense=True)
    got = paged_tree_attention_ref(*batch.attention_args())
    group = case.num_q_heads // case.num_kv_heads
    starts = batch.query_start_loc.tolist()
    for b, prefix in enumerate(case.prefix_lens):
        q = batch.q[starts[b]:starts[b + 1]].transpose(0, 1)  # [Hq, n, D]
        k = batch.dense_k[b].repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, L, D]
        v = batch.dense_v[b].repeat_interleave(group, dim=1).transpose(0, 1)
        n = q.shape[1]
        mask = torch.cat([torch.ones(n, prefix, dtype=torch.bool, device=device),
                          batch.bool_masks[b]], dim=1)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=batch.scale)
        torch.testing.assert_close(got[starts[b]:starts[b + 1]], want.transpose(0, 1),
                                   atol=1e-5, rtol=1e-5)


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
