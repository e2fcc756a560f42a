"""GPU correctness check without pytest: kernels vs the fp32 torch references on CUDA.

`python -m entmtp_kernels.selfcheck` runs it (exit 1 on any mismatch); `kernels/gpu_check.sh` falls
back to it where pytest cannot be installed, and the benchmark runs `check_attention` before
timing. The pytest files in tests/kernels cover more cases; this is the short version: head dims
128, 64, a padded 96 and 256 with logits soft-capping, each with automatic and 4 KV splits.
"""

import sys
from dataclasses import dataclass

import torch

from .compaction import compact_kv, compact_kv_ref
from .synthetic import (
    TOLERANCE,
    ancestor_mask,
    chain_parents,
    make_paged_batch,
    random_tree_parents,
)
from .tree_attention import paged_tree_attention, paged_tree_attention_ref


@dataclass(frozen=True)
class AttentionCase:
    name: str
    prefix_lens: list[int]
    tree_sizes: list[int]  # 0 stands for a chain of 8 nodes
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    softcap: float = 0.0


CASES = [
    AttentionCase("llama7b_gqa4", [300, 17, 0], [64, 0, 33], 32, 8, 128),
    AttentionCase("llama7b_mha", [1000, 5], [8, 64], 32, 32, 128),
    AttentionCase("smollm2_gqa3", [40, 129], [20, 1], 9, 3, 64),
    AttentionCase("phi3_d96_mha", [500, 3], [32, 0], 32, 32, 96),
    # Gemma-2-2B's heads; a cap of 1.5 bites on these N(0, 1) scores (Gemma 2 uses 50).
    AttentionCase("gemma2_d256_gqa2_softcap", [700, 40], [16, 40], 8, 4, 256, softcap=1.5),
]


@dataclass(frozen=True)
class CheckResult:
    name: str
    max_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_error <= self.tolerance  # NaN fails too

    def line(self) -> str:
        return (f"{'ok  ' if self.ok else 'FAIL'} {self.name:<56} max|err| {self.max_error:.3e} "
                f"(tolerance {self.tolerance:.0e})")


def _tree_masks(sizes: list[int], seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [ancestor_mask(random_tree_parents(n, gen) if n else chain_parents(8)) for n in sizes]


def check_attention(device: torch.device, dtypes: tuple[torch.dtype, ...]) -> list[CheckResult]:
    """Every case × dtype × (automatic splits, 4 splits) against the fp32 reference."""
    results = []
    for i, case in enumerate(CASES):
        masks = _tree_masks(case.tree_sizes, seed=i)
        for dtype in dtypes:
            batch = make_paged_batch(case.prefix_lens, masks, case.num_q_heads, case.num_kv_heads,
                                     case.head_dim, 16, dtype, device, seed=i)
            expected = paged_tree_attention_ref(*batch.upcast(), softcap=case.softcap)
            for splits in (None, 4):
                got = paged_tree_attention(*batch.attention_args(), num_splits=splits,
                                           softcap=case.softcap)
                error = (got.float() - expected).abs().max().item()
                results.append(CheckResult(
                    f"attention {case.name} {str(dtype)[6:]} splits={splits or 'auto'}",
                    error if not got.isnan().any() else float("nan"), TOLERANCE[dtype]))
    return results


def check_compaction(device: torch.device) -> CheckResult:
    """Random accepted paths in 4 caches; mismatching or stray-written slots count as error 1."""
    gen = torch.Generator().manual_seed(0)
    prefix_lens = [13, 0, 40, 100]
    parents = [random_tree_parents(n, gen) for n in (10, 20, 64, 6)]
    accepted = []
    for tree in parents:
        node, path = len(tree) - 1, []
        while node >= 0:
            path.append(node)
            node = tree[node]
        accepted.append(path[::-1])
    batch = make_paged_batch(prefix_lens, [ancestor_mask(p) for p in parents], 8, 8, 128, 16,
                             torch.bfloat16, device, poison_unused=False)
    caches = [batch.key_cache, batch.value_cache, batch.key_cache + 1, batch.value_cache + 1]
    expected = [c.clone() for c in caches]
    indices = torch.tensor([a for p in accepted for a in p], dtype=torch.int32, device=device)
    starts = torch.tensor([0] + [len(p) for p in accepted]).cumsum(0).to(torch.int32).to(device)
    args = (indices, starts, batch.prefix_lens, batch.block_tables)
    compact_kv_ref(expected, *args)
    compact_kv(caches, *args)
    same = all(torch.equal(a, b) for a, b in zip(caches, expected))
    return CheckResult("compact_kv 4 caches bf16 (exact)", 0.0 if same else 1.0, 0.0)


def main() -> int:
    if not torch.cuda.is_available():
        print("selfcheck: no CUDA device; the CPU tests are `pytest tests/kernels`")
        return 2
    device = torch.device("cuda")
    results = check_attention(device, (torch.float16, torch.bfloat16))
    results.append(check_compaction(device))
    for result in results:
        print(result.line())
    failed = [r for r in results if not r.ok]
    print(f"selfcheck: {len(results) - len(failed)}/{len(results)} passed on "
          f"{torch.cuda.get_device_name()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
