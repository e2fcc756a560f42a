"""The kernel configurations this package ships, in one place.

The dispatchers (`tree_attention.py`, `compaction.py`) take their launch constants from the
functions here, and `compile_check.py` compiles exactly the configurations listed by
`shipped_configs()` (built from `attention_variants()` and the launch functions below) for sm_90,
so the test that compiles "everything we ship" and the code that launches cannot drift apart.

Supported: head dims `SUPPORTED_HEAD_DIMS` (64, 80, 96, 128, 256; the kernels pad 80 and 96 to
128 inside, masking the extra lanes), fp16 and bf16 on GPUs, logits soft-capping on or off.

Tile sizes are fixed on purpose: a decode step is memory-bound, so one 64-row query tile serves
every tree size (on Hopper a tensor-core MMA has at least 64 rows anyway), and fewer
configurations mean fewer compiled variants and a short compile test. Head dim 256 streams KV in
chunks of 32 positions with 8 warps, so that the [64, 256] fp32 accumulator takes 64 registers per
thread instead of 128 and the K/V chunks stay small in shared memory.

Specialization: Triton compiles one binary per distinct "specialization key" of a kernel's
integer arguments (an integer equal to 1 becomes a compile-time constant; others are marked
divisible by 16 or not). Arguments whose value changes from one serving step to the next are
listed in the `*_NOT_SPECIALIZED` tuples and passed to `@triton.jit(do_not_specialize=...)`, so one
launch per variant at start-up (`warm_up_launches`) compiles everything a serving loop will use.
Arguments fixed for a model (head counts, block size, cache strides) stay specialized: their key
never changes once the model is loaded, and the divisibility hints let the compiler vectorise.
"""

from dataclasses import dataclass, field

import torch

# Element types of the attention kernel. Compiled (GPU): the serving types fp16 and bf16, the only
# variants shipped (an fp32 variant would be test-only and compiles several times slower).
# Interpreter (CPU tests): fp32 and fp16; bf16 is silently wrong there.
GPU_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)
INTERPRETER_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16)
# Head sizes of `paged_tree_attention` (the compaction kernel copies whole slot rows and takes any).
SUPPORTED_HEAD_DIMS: tuple[int, ...] = (64, 80, 96, 128, 256)

# Rows of one attention tile: (query token, query head of the KV group) pairs.
BLOCK_M = 64
# KV positions per inner-loop step (head dims up to 128; 256 uses BLOCK_N_D256).
BLOCK_N = 64
BLOCK_N_D256 = 32
# Most KV splits one launch may use (split-KV, "flash-decoding").
MAX_SPLITS = 16
# (token, head) rows merged per program of the split-KV combine kernel (16 for head dim 256).
COMBINE_ROWS = 32
# 32-bit words per compaction copy step: 2 KiB, a whole Llama-7B slot row (8 heads × 128 × 2 B).
COMPACT_BLOCK_WORDS = 512

TRITON_DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",  # interpreter only (CPU tests): no compiled fp32 variant ships
}

# Runtime integer arguments that are not specialized, because their value changes between serving
# steps (each would otherwise compile a new binary mid-serving when it crosses 1 or a multiple
# of 16):
# - num_splits: 1..MAX_SPLITS, chosen per step from the batch size and context lengths.
# - stride_ls: the split log-sum-exp buffer's split stride, T · num_q_heads (T: tokens this step).
# - stride_bt: the block table's row stride; a table sliced to the blocks in use changes width.
# - stride_mask: words per tree-mask row, ceil(largest tree / 32): 1 or more by tree size.
# - num_rows (combine): T · num_q_heads.
# Token-dependent strides that stay specialized: the split partial-output strides (T · Hq · D and
# Hq · D) are multiples of the head dim, so always divisible by 16 and never 1: the same key every
# step.
ATTENTION_NOT_SPECIALIZED: tuple[str, ...] = ("num_splits", "stride_ls", "stride_bt", "stride_mask")
COMBINE_NOT_SPECIALIZED: tuple[str, ...] = ("num_rows", "num_splits", "stride_ls")
COMPACT_NOT_SPECIALIZED: tuple[str, ...] = ("stride_bt",)


def check_head_dim(head_dim: int) -> None:
    """Raise ValueError naming the supported head dims unless `head_dim` is one of them."""
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim {head_dim} is not supported by the tree-attention kernel; "
                         f"supported head dims: {', '.join(map(str, SUPPORTED_HEAD_DIMS))}")


def padded_head_dim(head_dim: int) -> int:
    """The power of two the kernels compute with (`tl.arange`, `tl.dot` need one): 96 → 128."""
    check_head_dim(head_dim)
    return 1 << (head_dim - 1).bit_length()


@dataclass(frozen=True)
class LaunchConfig:
    """Compile-time constants and launch options of one kernel variant."""

    constexprs: dict[str, object] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 2


def attention_launch(head_dim: int, split: bool, softcap: bool = False) -> LaunchConfig:
    """Constants of the tree-attention kernel for one head size, split mode and soft-cap mode."""
    block_d = padded_head_dim(head_dim)
    wide = block_d > 128
    return LaunchConfig(
        constexprs={
            "HEAD_DIM": head_dim,
            "BLOCK_D": block_d,
            "BLOCK_M": BLOCK_M,
            "BLOCK_N": BLOCK_N_D256 if wide else BLOCK_N,
            "SPLIT": split,
            "SOFTCAP": softcap,
        },
        num_warps=8 if wide else 4,
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
        "qk_scale": "fp32",
        "softcap_log2": "fp32",
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


# Arguments divisible by 16 in every serving launch (pointers from torch's allocator, strides that
# are multiples of the head dim); `compile_check` compiles with these hints, as Triton's runtime
# specialization gives them to the launches.
ATTENTION_DIVISIBLE_BY_16: tuple[str, ...] = (
    "q_ptr", "k_cache_ptr", "v_cache_ptr", "out_ptr", "lse_ptr", "block_tables_ptr",
    "query_start_loc_ptr", "prefix_lens_ptr", "tree_mask_ptr",
    "stride_qt", "stride_qh", "stride_kb", "stride_ks", "stride_kh", "stride_vb", "stride_vs",
    "stride_vh", "stride_os", "stride_ot", "stride_oh",
)


def combine_launch(head_dim: int) -> LaunchConfig:
    """Constants of the split-KV combine kernel."""
    block_d = padded_head_dim(head_dim)
    return LaunchConfig(
        constexprs={"HEAD_DIM": head_dim, "BLOCK_D": block_d,
                    "ROWS": COMBINE_ROWS if block_d <= 128 else COMBINE_ROWS // 2},
        num_warps=4, num_stages=1,
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


COMBINE_DIVISIBLE_BY_16: tuple[str, ...] = (
    "part_ptr", "lse_ptr", "out_ptr", "stride_ps", "stride_ot", "stride_oh",
)


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


COMPACT_DIVISIBLE_BY_16: tuple[str, ...] = (
    "cache_ptrs_ptr", "accepted_ptr", "accepted_start_loc_ptr", "prefix_lens_ptr",
    "block_tables_ptr",
)


# Variant names, shared by `compile_check.shipped_configs()` and `warm_up_launches()`.
def attention_variant_name(dtype: torch.dtype, head_dim: int, softcap: bool, split: bool) -> str:
    return (f"tree_attention[{TRITON_DTYPE_NAMES[dtype]},d{head_dim},"
            f"{'softcap' if softcap else 'nosoftcap'},{'split' if split else 'nosplit'}]")


def combine_variant_name(dtype: torch.dtype, head_dim: int) -> str:
    return f"combine_splits[{TRITON_DTYPE_NAMES[dtype]},d{head_dim}]"


COMPACT_VARIANT_NAME = "compact_kv[words]"


def attention_variants() -> list[tuple[torch.dtype, int, bool, bool]]:
    """Every (dtype, head_dim, softcap, split) the attention dispatcher can launch compiled."""
    return [(dtype, head_dim, softcap, split)
            for dtype in GPU_DTYPES for head_dim in SUPPORTED_HEAD_DIMS
            for softcap in (False, True) for split in (False, True)]


@dataclass(frozen=True)
class WarmUpLaunch:
    """One call that compiles kernel variants ahead of serving.

    `op` is "paged_tree_attention" or "compact_kv"; `kwargs` are the keyword arguments to pass it
    (with tiny inputs of the model's dtype, head dim, head counts and block size, so that the
    model-fixed arguments get the specialization they have when serving); `compiles` names the
    variants (as in `compile_check.shipped_configs()`) that the call compiles.
    """

    op: str
    kwargs: dict[str, object]
    compiles: tuple[str, ...]


def warm_up_launches(dtype: torch.dtype, head_dim: int,
                     softcap: float | None = 0.0) -> list[WarmUpLaunch]:
    """The launches that compile every kernel a serving loop of one model can use.

    Two `paged_tree_attention` calls (num_splits=1, and num_splits=2, which also compiles the
    combine kernel; any other split count reuses that binary) and one `compact_kv` call.
    `softcap`: the model's logits soft-cap (0 or None: off), passed through.
    """
    if dtype not in GPU_DTYPES + INTERPRETER_DTYPES:
        raise ValueError(f"warm_up_launches: the kernels run {GPU_DTYPES} compiled and "
                         f"{INTERPRETER_DTYPES} under the interpreter, got {dtype}")
    check_head_dim(head_dim)
    capped = bool(softcap)
    cap = float(softcap or 0.0)
    return [
        WarmUpLaunch("paged_tree_attention", {"num_splits": 1, "softcap": cap},
                     (attention_variant_name(dtype, head_dim, capped, False),)),
        WarmUpLaunch("paged_tree_attention", {"num_splits": 2, "softcap": cap},
                     (attention_variant_name(dtype, head_dim, capped, True),
                      combine_variant_name(dtype, head_dim))),
        WarmUpLaunch("compact_kv", {}, (COMPACT_VARIANT_NAME,)),
    ]
