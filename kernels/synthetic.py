"""Synthetic batches for the kernels' tests, GPU self-check and benchmark: trees, paged caches.

A batch is built the way vLLM lays it out: each request's K/V is drawn densely for positions
0 .. prefix + n - 1, then scattered into a shared paged cache through a block table whose blocks
are shuffled (non-contiguous, in random order). Slots no request owns can be poisoned with NaN, so
a kernel that reads past a request's length or through a wrong block shows up as NaN.
"""

from dataclasses import dataclass

import torch

from .tree_attention import pack_tree_mask

# Max |kernel - fp32 reference| accepted per input dtype (outputs are averages of N(0, 1) values).
TOLERANCE: dict[torch.dtype, float] = {
    torch.float32: 2e-4,
    torch.float16: 5e-3,
    torch.bfloat16: 3e-2,
}


def random_tree_parents(num_nodes: int, generator: torch.Generator) -> list[int]:
    """Parent of each node of a random tree in node order (parent index < child index; root -1)."""
    parents = [-1]
    for i in range(1, num_nodes):
        parents.append(int(torch.randint(0, i, (1,), generator=generator)))
    return parents


def chain_parents(num_nodes: int) -> list[int]:
    """Parents of a chain root → 1 → 2 → …."""
    return [i - 1 for i in range(num_nodes)]


def ancestor_mask(parents: list[int]) -> torch.Tensor:
    """bool [n, n]: `[i, j]` true when j is i or an ancestor of i."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    return mask


@dataclass
class PagedBatch:
    """One attention call's inputs, plus what built them (for independent checks)."""

    q: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_tables: torch.Tensor
    query_start_loc: torch.Tensor
    prefix_lens: torch.Tensor
    tree_mask: torch.Tensor
    scale: float
    bool_masks: list[torch.Tensor]
    # Per request, K and V [prefix + n, Hkv, D] before paging; empty unless keep_dense.
    dense_k: list[torch.Tensor]
    dense_v: list[torch.Tensor]

    def attention_args(self) -> tuple:
        """Positional arguments of `paged_tree_attention` / `paged_tree_attention_ref`."""
        return (self.q, self.key_cache, self.value_cache, self.block_tables,
                self.query_start_loc, self.prefix_lens, self.tree_mask, self.scale)

    def upcast(self) -> tuple:
        """`attention_args()` with q and the caches in fp32, for the exact reference."""
        args = list(self.attention_args())
        args[0], args[1], args[2] = self.q.float(), self.key_cache.float(), self.value_cache.float()
        return tuple(args)


def make_paged_batch(
    prefix_lens: list[int],
    tree_masks: list[torch.Tensor],
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str,
    seed: int = 0,
    poison_unused: bool = True,
    keep_dense: bool = False,
) -> PagedBatch:
    """A batch of len(prefix_lens) requests; request b's tree has `tree_masks[b]` (bool [n, n])."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    cpu_gen = torch.Generator().manual_seed(seed)
    lengths = [p + m.shape[0] for p, m in zip(prefix_lens, tree_masks)]
    blocks_per_req = [-(-length // block_size) for length in lengths]
    num_blocks = sum(blocks_per_req) + 3  # a few blocks nobody owns
    order = torch.randperm(num_blocks, generator=cpu_gen).tolist()
    block_tables = torch.zeros(len(lengths), max(max(blocks_per_req), 1), dtype=torch.int32)
    fill = float("nan") if poison_unused else 0.0
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.full(shape, fill, dtype=dtype, device=device)
    value_cache = torch.full(shape, fill, dtype=dtype, device=device)
    dense_k, dense_v = [], []
    for b, length in enumerate(lengths):
        own = torch.tensor(order[:blocks_per_req[b]], dtype=torch.int32)
        order = order[blocks_per_req[b]:]
        block_tables[b, :len(own)] = own
        k = torch.randn(length, num_kv_heads, head_dim, generator=gen, device=device).to(dtype)
        v = torch.randn(length, num_kv_heads, head_dim, generator=gen, device=device).to(dtype)
        pos = torch.arange(length)
        blocks = own[pos // block_size].long().to(device)
        key_cache[blocks, (pos % block_size).to(device)] = k
        value_cache[blocks, (pos % block_size).to(device)] = v
        if keep_dense:
            dense_k.append(k)
            dense_v.append(v)
    sizes = torch.tensor([0] + [m.shape[0] for m in tree_masks], dtype=torch.int32)
    total = int(sizes.sum())
    q = torch.randn(total, num_q_heads, head_dim, generator=gen, device=device).to(dtype)
    return PagedBatch(
        q=q,
        key_cache=key_cache,
        value_cache=value_cache,
        block_tables=block_tables.to(device),
        query_start_loc=sizes.cumsum(0).to(torch.int32).to(device),
        prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32, device=device),
        tree_mask=pack_tree_mask([m.to(device) for m in tree_masks]),
        scale=head_dim ** -0.5,
        bool_masks=[m.to(device) for m in tree_masks],
        dense_k=dense_k,
        dense_v=dense_v,
    )
