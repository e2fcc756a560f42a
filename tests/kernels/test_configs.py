"""The shipped configurations: one list of head dims, launch constants that match the kernels'
arguments, and warm-up launches that cover every compiled variant (no GPU needed)."""

import pytest
import torch

from entmtp_kernels import SUPPORTED_HEAD_DIMS, configs, warm_up_launches
from entmtp_kernels.compile_check import check_arguments, shipped_configs


def test_supported_head_dims_and_padding() -> None:
    assert SUPPORTED_HEAD_DIMS == (64, 80, 96, 128, 256)
    assert [configs.padded_head_dim(d) for d in SUPPORTED_HEAD_DIMS] == [64, 128, 128, 128, 256]
    for head_dim in (72, 512, 32):
        with pytest.raises(ValueError, match="supported head dims: 64, 80, 96, 128, 256"):
            configs.attention_launch(head_dim, split=False)
        with pytest.raises(ValueError, match="supported head dims"):
            configs.combine_launch(head_dim)


def test_launch_constants() -> None:
    """Every variant tiles with powers of two and the same BLOCK_M (the dispatcher's grid)."""
    for dtype, head_dim, softcap, split in configs.attention_variants():
        launch = configs.attention_launch(head_dim, split, softcap)
        c = launch.constexprs
        assert c["HEAD_DIM"] == head_dim and c["BLOCK_D"] >= head_dim
        assert c["BLOCK_M"] == configs.BLOCK_M and c["SPLIT"] == split and c["SOFTCAP"] == softcap
        for name in ("BLOCK_D", "BLOCK_M", "BLOCK_N"):
            assert c[name] >= 16 and c[name] & (c[name] - 1) == 0, (name, c[name])
    assert configs.attention_launch(256, True).num_warps == 8
    assert configs.attention_launch(256, True).constexprs["BLOCK_N"] == configs.BLOCK_N_D256


def test_configs_match_kernel_arguments() -> None:
    """Signature + constexprs = each kernel's argument list; hints name specialized arguments.

    (The `do_not_specialize` lists are compared in compiled mode, by compile_sm90.)"""
    configs_ = shipped_configs()
    assert len({c.name for c in configs_}) == len(configs_)
    for config in configs_:
        check_arguments(config)


def test_shipped_configs_enumerate_every_variant() -> None:
    names = {c.name for c in shipped_configs()}
    expected = len(configs.GPU_DTYPES) * len(SUPPORTED_HEAD_DIMS) * (2 * 2 + 1) + 1
    assert len(names) == expected
    assert "tree_attention[bf16,d96,softcap,split]" in names
    assert "combine_splits[fp16,d256]" in names and configs.COMPACT_VARIANT_NAME in names


def test_warm_up_launches_cover_the_shipped_variants() -> None:
    """The warm-up launches of all (dtype, head dim, soft-cap) compile exactly what ships."""
    covered = set()
    for dtype in configs.GPU_DTYPES:
        for head_dim in SUPPORTED_HEAD_DIMS:
            for softcap in (0.0, None, 30.0):
                launches = warm_up_launches(dtype, head_dim, softcap)
                assert [launch.op for launch in launches] == [
                    "paged_tree_attention", "paged_tree_attention", "compact_kv"]
                assert [launch.kwargs.get("num_splits") for launch in launches] == [1, 2, None]
                assert all(launch.kwargs.get("softcap", softcap or 0.0) == (softcap or 0.0)
                           for launch in launches)
                for launch in launches:
                    covered.update(launch.compiles)
    assert covered == {c.name for c in shipped_configs()}
    with pytest.raises(ValueError, match="supported head dims"):
        warm_up_launches(torch.float16, 72)
    with pytest.raises(ValueError, match="under the interpreter, got torch.float64"):
        warm_up_launches(torch.float64, 64)
    # fp32 runs under the interpreter (CPU tests): its launches name no compiled variant
    assert not {name for launch in warm_up_launches(torch.float32, 64) for name in launch.compiles
                if "fp32" not in name} - {configs.COMPACT_VARIANT_NAME}


def test_unspecialized_arguments_are_runtime_integers() -> None:
    for names, signature in (
        (configs.ATTENTION_NOT_SPECIALIZED, configs.attention_signature(torch.float16, True)),
        (configs.COMBINE_NOT_SPECIALIZED, configs.combine_signature(torch.float16)),
        (configs.COMPACT_NOT_SPECIALIZED, configs.compact_signature()),
    ):
        assert names and all(signature[name] == "i32" for name in names)
