"""KV compaction: kernel vs torch reference over all layers' caches, untouched slots unchanged.

The kernel copies raw 32-bit words, so bf16 runs under the interpreter too (no bf16 arithmetic).
"""

import pytest
import torch

from entmtp_kernels import compact_kv, compact_kv_ref
from entmtp_kernels.synthetic import ancestor_mask, make_paged_batch, random_tree_parents


def path_to(parents: list[int], node: int) -> list[int]:
    """Node indices from the root to `node` (increasing, since parents precede children)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def layer_caches(num_layers: int, key: torch.Tensor, value: torch.Tensor) -> list[torch.Tensor]:
    """vLLM-style caches: per layer one [2, blocks, block_size, Hkv, D] tensor, K and V as views."""
    caches = []
    for layer in range(num_layers):
        kv = torch.stack([key, value]) + layer  # distinct contents per layer
        caches.extend(kv.unbind(0))
    return caches


@pytest.mark.triton
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("heads,head_dim", [(3, 64), (8, 128)], ids=["smollm2", "llama7b"])
def test_kernel_matches_reference(cache_dtype: torch.dtype, heads: int, head_dim: int,
                                  device: torch.device) -> None:
    gen = torch.Generator().manual_seed(heads)
    prefix_lens = [13, 0, 40, 16, 5, 7]
    trees = [random_tree_parents(n, gen) for n in (10, 20, 30)]
    trees += [[-1], [-1, 0, 1, 2, 3, 4], [-1, 0]]
    accepted = [
        path_to(trees[0], 9), path_to(trees[1], 19), path_to(trees[2], 29),
        [0],  # only the root: nothing moves
        [0, 2, 3, 4],  # 2→1, 3→2, 4→3: each copy writes the slot the previous one read
        [],  # a request with no accepted list
    ]
    batch = make_paged_batch(prefix_lens, [ancestor_mask(t) for t in trees], heads, heads,
                             head_dim, 16, cache_dtype, device, poison_unused=False)
    caches = layer_caches(3, batch.key_cache, batch.value_cache)
    before = [c.clone() for c in caches]
    expected = [c.clone() for c in caches]
    indices = torch.tensor([a for path in accepted for a in path], dtype=torch.int32,
                           device=device)
    lengths = torch.tensor([0] + [len(p) for p in accepted])
    starts = lengths.cumsum(0).to(torch.int32).to(device)
    args = (indices, starts, batch.prefix_lens, batch.block_tables)

    compact_kv_ref(expected, *args)
    compact_kv(caches, *args)

    block_size = caches[0].shape[1]

    def slot(b: int, pos: int) -> tuple[int, int]:
        return int(batch.block_tables[b, pos // block_size]), pos % block_size

    written = torch.zeros(caches[0].shape[:2], dtype=torch.bool, device=device)
    for b, path in enumerate(accepted):
        for i, node in enumerate(path):
            # Position prefix + i now holds what position prefix + node held before.
            for want, old in zip(expected, before):
                assert torch.equal(want[slot(b, prefix_lens[b] + i)],
                                   old[slot(b, prefix_lens[b] + node)])
            if node != i:
                written[slot(b, prefix_lens[b] + i)] = True
    assert written.any()
    for got, want, old in zip(caches, expected, before):
        assert torch.equal(got, want)
        assert torch.equal(got[~written], old[~written]), "a slot outside the copies changed"
