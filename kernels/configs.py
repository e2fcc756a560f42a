"""The kernel configurations this package ships, in one place.

The dispatchers (`tree_attention.py`, `compaction.py`) take their launch constants from the
functions here, and `compile_check.py` compiles exactly the configurations listed by
`shipped_configs()` for sm_90, so the test that compiles "everything we ship" and the code that
launches cannot drift apart.

Tile sizes are fixed on purpose: a decode step is memory-bound, so one 64×64 tile shape serves
every tree size (on Hopper a tensor-core MMA has at least 64 rows anyway), and fewer
configurations mean fewer compiled variants and a short compile test.
"""

from dataclasses import dataclass, field

import torch

# Element types of the attention kernel. Compiled (GPU): the serving types fp16 and bf16, the only
# variants shipped (an fp32 variant would be test-only and compiles several times slower).
# Interpreter (CPU tests): fp32 and fp16; bf16 is silently wrong there.
GPU_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)
INTERPRETER_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16)
SUPPORTED_HEAD_DIMS: tuple[int, ...] = (64, 128)

# Rows of one attention tile: (query token, query head of the KV group) pairs.
BLOCK_M = 64
# KV positions per inner-loop step.
BLOCK_N = 64
# Most KV splits one launch may use (split-KV, "flash-decoding").
MAX_SPLITS = 16
# (token, head) rows merged per program of the split-KV combine kernel.
COMBINE_ROWS = 32
# 32-bit words per compaction copy step: 2 KiB, a whole Llama-7B slot row (8 heads × 128 × 2 B).
COMPACT_BLOCK_WORDS = 512

TRITON_DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
}


@dataclass(frozen=True)
class LaunchConfig:
    """Compile-time constants and launch options of one kernel variant."""

    constexprs: dict[str, object] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 2


def attention_launch(head_dim: int, split: bool) -> LaunchConfig:
    """Constants of the tree-attention kernel for one head size and split mode."""
    return LaunchConfig(
        constexprs={
            "HEAD_DIM": head_dim,
            "BLOCK_M": BLOCK_M,
            "BLOCK_N": BLOCK_N,
            "SPLIT": split,
        },
        num_warps=4,
        num_stages=2,
    )


def attention_signature(dtype: torch.dtype, split: bool) -> dict[str, str]:
    """Triton argument types of the tree-attention kernel (runtime arguments, in order).

    With a split, `out_ptr` / `lse_ptr` are the fp32 partial buffers; without, `out_ptr` is the
    output and the dispatcher passes it again as the (unused) `lse_ptr`.
    """
    t = TRITON_DTYPE_NAMES[dtype]
    return {
        "q_ptr": f"*{t}",
        "k_cache_ptr": f"*{t}",
        "v_cache_ptr": f"*{t}",
        "out_ptr": "*fp32" if split else f"*{t}",
        "lse_ptr": "*fp32" if split else f"*{t}",
        "block_tables_ptr": "*i32",
        "query_start_loc_ptr": "*i32",
        "prefix_lens_ptr": "*i32",
        "tree_mask_ptr": "*i32",
        "scale_log2": "fp32",
        "num_kv_heads": "i32",
        "group_size": "i32",
        "num_splits": "i32",
        "block_size": "i32",
        "stride_qt": "i32",
        "stride_qh": "i32",
        "stride_kb": "i32",
        "stride_ks": "i32",
        "stride_kh": "i32",
        "stride_vb": "i32",
        "stride_vs": "i32",
        "stride_vh": "i32",
        "stride_os": "i32",
        "stride_ot": "i32",
        "stride_oh": "i32",
        "stride_ls": "i32",
        "stride_lt": "i32",
        "stride_bt": "i32",
        "stride_mask": "i32",
    }


def combine_launch(head_dim: int) -> LaunchConfig:
    """Constants of the split-KV combine kernel."""
    return LaunchConfig(
        constexprs={"HEAD_DIM": head_dim, "ROWS": COMBINE_ROWS}, num_warps=4, num_stages=1
    )


def combine_signature(dtype: torch.dtype) -> dict[str, str]:
    """Triton argument types of the combine kernel (runtime arguments, in order)."""
    return {
        "part_ptr": "*fp32",
        "lse_ptr": "*fp32",
        "out_ptr": f"*{TRITON_DTYPE_NAMES[dtype]}",
        "num_rows": "i32",
        "num_q_heads": "i32",
        "num_splits": "i32",
        "stride_ps": "i32",
        "stride_ls": "i32",
        "stride_ot": "i32",
        "stride_oh": "i32",
    }


def compact_launch() -> LaunchConfig:
    """Constants of the compaction kernel: one variant serves every dtype (it copies 32-bit words).

    4 warps × 32 threads × 4 words = COMPACT_BLOCK_WORDS: every word of a tile belongs to exactly
    one thread (no replicated lanes), which the race-freedom argument in `compaction.py` relies on.
    """
    return LaunchConfig(constexprs={"BLOCK_WORDS": COMPACT_BLOCK_WORDS}, num_warps=4, num_stages=1)


def compact_signature() -> dict[str, str]:
    """Triton argument types of the compaction kernel (runtime arguments, in order)."""
    return {
        "cache_ptrs_ptr": "*i64",
        "accepted_ptr": "*i32",
        "accepted_start_loc_ptr": "*i32",
        "prefix_lens_ptr": "*i32",
        "block_tables_ptr": "*i32",
        "stride_bt": "i32",
        "block_size": "i32",
        "stride_block_words": "i32",
        "stride_slot_words": "i32",
        "row_words": "i32",
    }
