"""The general plugin's hooks: the `method: entmtp` form, start-up refusals (before any model
loads), the worker of each platform, the backends it registers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from entmtp_vllm.config import CPU_ROWS_ATTENTION
from entmtp_vllm.errors import EntMTPError

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

from entmtp_vllm.vllm_plugin.install import WORKERS, map_method, prepare_config  # noqa: E402
from entmtp_vllm.vllm_plugin.support import unsupported  # noqa: E402


def test_method_entmtp_maps_onto_the_custom_class_route():
    mapped = map_method({"method": "entmtp", "num_speculative_tokens": 6}, None)
    assert mapped == {"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 6}
    # no budget given: the largest tree's drafts (the shipped bank: 5; full:2,1,1: 6)
    assert map_method({"method": "entmtp"}, {})["num_speculative_tokens"] == 5
    assert map_method({"method": "entmtp"}, {"entmtp": {"bank": "full:2,1,1"}})["num_speculative_tokens"] == 6
    other = {"method": "ngram", "num_speculative_tokens": 4}
    assert map_method(other, None) is other and map_method(None, None) is None
    with pytest.raises(EntMTPError, match="leave \"model\" out"):
        map_method({"method": "entmtp", "model": "org/draft"}, None)


@pytest.mark.slow
@pytest.mark.parametrize("form", ["config", "flag"])
def test_method_entmtp_builds_an_entmtp_engine_config(model_path, heads_folder, form):
    from vllm.engine.arg_utils import EngineArgs

    extra = {"speculative_config": {"method": "entmtp"}} if form == "config" else {"spec_method": "entmtp"}
    args = EngineArgs(model=model_path, enforce_eager=True, additional_config={"entmtp": {"heads": heads_folder}},
                      **extra)
    config = args.create_engine_config()
    assert config.speculative_config.method == "custom_class"
    assert config.speculative_config.model == "entmtp_vllm.EntMTP"
    assert config.speculative_config.num_speculative_tokens == 5  # the shipped bank's largest tree
    assert config.parallel_config.worker_cls == WORKERS["cpu"][0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"kv_cache_dtype": "fp8"}, ["quantized KV cache", "--kv-cache-dtype auto"]),
        ({"hf_overrides": {"sliding_window": 64}}, ["sliding-window attention (sliding_window=64)"]),
    ],
)
def test_vllm_refuses_what_the_tree_path_cannot_serve_before_loading(model_path, heads_folder, overrides, words):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=model_path, enforce_eager=True, speculative_config={"method": "entmtp"},
                      additional_config={"entmtp": {"heads": heads_folder}}, **overrides)
    with pytest.raises(EntMTPError) as info:
        args.create_engine_config()
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


def _config(**model_overrides):
    model = dict(
        hf_text_config=SimpleNamespace(model_type="llama"), hf_config=SimpleNamespace(model_type="llama"),
        get_sliding_window=lambda: None, uses_alibi=False, use_mla=False, is_hybrid=False,
        has_inner_state=False, is_attention_free=False, uses_mrope=False,
    )
    parallel = dict(tensor_parallel_size=1, pipeline_parallel_size=1)
    for key in list(model_overrides):
        if key in parallel:
            parallel[key] = model_overrides.pop(key)
    cache_dtype = model_overrides.pop("cache_dtype", "auto")
    model.update(model_overrides)
    return SimpleNamespace(
        model_config=SimpleNamespace(**model), cache_config=SimpleNamespace(cache_dtype=cache_dtype),
        parallel_config=SimpleNamespace(**parallel),
    )


@pytest.mark.parametrize(
    "overrides, platform, word",
    [
        ({"uses_alibi": True}, "cuda", "ALiBi"),
        ({"hf_text_config": SimpleNamespace(model_type="gpt_oss")}, "cuda", "attention sinks"),
        ({"use_mla": True}, "cuda", "MLA"),
        ({"hf_text_config": SimpleNamespace(model_type="gemma3", layer_types=["sliding_attention", "full_attention"])},
         "cuda", "several KV-cache groups"),
        ({"is_hybrid": True}, "cuda", "state-space"),
        ({"uses_mrope": True}, "cpu", "M-RoPE"),
        ({"tensor_parallel_size": 2}, "cuda", "--tensor-parallel-size 1"),
        ({"pipeline_parallel_size": 2}, "cuda", "pipeline parallelism"),
        ({"cache_dtype": "fp8_e4m3"}, "cpu", "--kv-cache-dtype auto"),
        ({}, "rocm", "the rocm platform"),
    ],
)
def test_each_refusal_names_the_setting(overrides, platform, word):
    problems = unsupported(_config(**overrides), platform)
    assert len(problems) == 1 and word in problems[0]
    assert unsupported(_config(), "cuda") == [] and unsupported(_config(), "cpu") == []


def test_an_unknown_rows_attention_setting_is_refused_at_start_up(monkeypatch):
    monkeypatch.setenv(CPU_ROWS_ATTENTION.env, "yes")
    problems = unsupported(_config(), "cpu")
    assert len(problems) == 1 and CPU_ROWS_ATTENTION.env in problems[0] and "on, all, off" in problems[0]
    assert unsupported(_config(), "cuda") == []  # the CPU kernel's setting means nothing there
    for value in ("on", "ALL", " off ", ""):
        monkeypatch.setenv(CPU_ROWS_ATTENTION.env, value)
        assert unsupported(_config(), "cpu") == []


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_prepare_config_picks_the_platforms_worker(platform, heads_folder):
    config = _config()
    config.speculative_config = SimpleNamespace(method="custom_class", model="entmtp_vllm.EntMTP",
                                                num_speculative_tokens=5)
    config.additional_config = {"entmtp": {"heads": heads_folder}}
    config.parallel_config.worker_cls = "auto"
    prepare_config(config, platform)
    assert config.parallel_config.worker_cls == WORKERS[platform][0]
    config.parallel_config.worker_cls = "my.Worker"  # the user's own worker is kept
    prepare_config(config, platform)
    assert config.parallel_config.worker_cls == "my.Worker"


def test_the_backends_the_plugin_registers_resolve():
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from entmtp_vllm.vllm_plugin import register

    register()
    for name in ("CPU_ATTN", "FLASH_ATTN", "TRITON_ATTN"):
        backend = getattr(AttentionBackendEnum, name).get_class()
        assert backend.__module__.startswith("entmtp_vllm.vllm_plugin"), (name, backend)
