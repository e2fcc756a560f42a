"""The general plugin's hooks: the forms users type (`method: entmtp`, `--spec-method entmtp`,
`--spec-model entmtp`), start-up refusals (before any model loads), the worker of each platform,
the backends it registers. The forms through vLLM's own `vllm serve` parser are in
`test_serve_forms.py`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from entmtp_vllm.config import CPU_ROWS_ATTENTION
from entmtp_vllm.errors import EntMTPError

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

from entmtp_vllm.vllm_plugin.install import fold_spec_flags, map_method, prepare_config  # noqa: E402
from entmtp_vllm.vllm_plugin.platforms import platform_package  # noqa: E402
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
    # the short model name, as --spec-model entmtp writes it, is the same form
    assert map_method({"model": "entmtp", "num-speculative-tokens": 4}, None) == {
        "model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 4}
    with pytest.raises(EntMTPError, match="\"method\" is 'ngram'"):
        map_method({"model": "entmtp", "method": "ngram"}, None)


def _engine_args(**fields):
    base = dict(spec_method=None, spec_model=None, spec_tokens=None, speculative_config=None)
    return SimpleNamespace(**{**base, **fields})


def test_short_flags_fold_into_the_speculative_config():
    args = _engine_args(spec_method="entmtp", spec_tokens=4)
    fold_spec_flags(args)
    assert args.speculative_config == {"method": "entmtp", "num_speculative_tokens": 4}
    assert (args.spec_method, args.spec_tokens) == (None, None)
    args = _engine_args(spec_model="entmtp", speculative_config={"num_speculative_tokens": 3})
    fold_spec_flags(args)
    assert args.speculative_config == {"num_speculative_tokens": 3, "model": "entmtp"}
    args = _engine_args(speculative_config={"method": "entmtp"}, spec_tokens=2)
    fold_spec_flags(args)
    assert map_method(args.speculative_config, None)["num_speculative_tokens"] == 2
    with pytest.raises(EntMTPError, match="--spec-tokens and --speculative-config\\['num_speculative_tokens'\\]"):
        fold_spec_flags(_engine_args(spec_method="entmtp", spec_tokens=2, speculative_config={"num_speculative_tokens": 3}))
    other = _engine_args(spec_method="ngram", spec_tokens=4)
    fold_spec_flags(other)  # not EntMTP: left to vLLM
    assert other.spec_method == "ngram" and other.speculative_config is None


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


def _config(**overrides):
    """A stand-in for vLLM's config with the fields the checks read (a plain bf16 Llama)."""
    model = dict(
        hf_text_config=SimpleNamespace(model_type="llama", num_attention_heads=32), hf_config=SimpleNamespace(model_type="llama"),
        get_sliding_window=lambda: None, uses_alibi=False, use_mla=False, is_hybrid=False,
        has_inner_state=False, is_attention_free=False, uses_mrope=False, dtype=torch.bfloat16,
    )
    parallel = dict(tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1)
    cache = dict(cache_dtype="auto", kv_sharing_fast_prefill=False)
    attention = SimpleNamespace(backend=overrides.pop("backend", None), backend_per_kind={})
    v2 = overrides.pop("use_v2_model_runner", False)
    sizes = {key: overrides.pop(key) for key in ("head_size", "kv_heads") if key in overrides}
    for key in list(overrides):
        for group in (parallel, cache):
            if key in group:
                group[key] = overrides.pop(key)
    model.update(overrides)
    model["get_head_size"] = lambda: sizes.get("head_size", 128)
    model["get_total_num_kv_heads"] = lambda: sizes.get("kv_heads", 8)
    return SimpleNamespace(
        model_config=SimpleNamespace(**model), cache_config=SimpleNamespace(**cache),
        parallel_config=SimpleNamespace(**parallel), attention_config=attention, use_v2_model_runner=v2,
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
        ({"data_parallel_size": 2}, "cuda", "--data-parallel-size 1"),
        ({"data_parallel_size": 2}, "cpu", "--data-parallel-size 1"),
        ({"kv_sharing_fast_prefill": True}, "cuda", "--kv-sharing-fast-prefill"),
        ({"use_v2_model_runner": True}, "cuda", "VLLM_USE_V2_MODEL_RUNNER=0"),
        ({"use_v2_model_runner": True}, "cpu", "VLLM_USE_V2_MODEL_RUNNER=0"),
        ({"dtype": torch.float32}, "cuda", "float32 weights (--dtype float32"),
        ({"head_size": 72}, "cuda", "head size 72 (the tree kernels take 64, 80, 96, 128, 256)"),
        ({"hf_text_config": SimpleNamespace(model_type="llama", num_attention_heads=128), "kv_heads": 1}, "cuda",
         "128 query heads per KV head"),
        ({"backend": "FLASHINFER"}, "cuda", "--attention-backend FLASH_ATTN or leave it out"),
        ({}, "rocm", "the rocm platform"),
    ],
)
def test_each_refusal_names_the_setting(overrides, platform, word):
    problems = unsupported(_config(**overrides), platform)
    assert len(problems) == 1 and word in problems[0], problems
    assert unsupported(_config(), "cuda") == [] and unsupported(_config(), "cpu") == []


@pytest.mark.parametrize("overrides", [{"dtype": torch.float32}, {"head_size": 72}, {"backend": "FLASHINFER"}])
def test_what_only_the_gpu_kernels_cannot_serve_is_served_on_cpu(overrides):
    assert unsupported(_config(**overrides), "cpu") == []


def test_an_accepted_cuda_engine_gets_flash_attn_unless_it_chose_a_tree_backend(heads_folder):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    for chosen, expected in ((None, "FLASH_ATTN"), ("TRITON_ATTN", "TRITON_ATTN")):
        config = _config(backend=None if chosen is None else AttentionBackendEnum[chosen])
        config.speculative_config = SimpleNamespace(method="custom_class", model="entmtp_vllm.EntMTP",
                                                    num_speculative_tokens=5)
        config.additional_config = {"entmtp": {"heads": heads_folder}}
        config.parallel_config.worker_cls = "auto"
        prepare_config(config, "cuda")
        assert config.attention_config.backend == AttentionBackendEnum[expected]
    other = _config()  # an engine without EntMTP is left alone
    other.speculative_config = None
    prepare_config(other, "cuda")
    assert other.attention_config.backend is None


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
    assert config.parallel_config.worker_cls == platform_package(platform).WORKER
    assert config.parallel_config.worker_cls.startswith(f"entmtp_vllm.vllm_plugin.{platform}.worker.")
    config.parallel_config.worker_cls = "my.Worker"  # the user's own worker is kept
    prepare_config(config, platform)
    assert config.parallel_config.worker_cls == "my.Worker"


def test_on_cpu_the_plugin_registers_the_cpu_backend_only():
    """Each platform registers its own backends (the CUDA ones, in a CUDA process:
    `cuda/test_cuda_imports.py`)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from entmtp_vllm.vllm_plugin import register

    register()
    assert AttentionBackendEnum.CPU_ATTN.get_class().__module__ == "entmtp_vllm.vllm_plugin.cpu.attention"
    for name in ("FLASH_ATTN", "TRITON_ATTN"):
        assert not AttentionBackendEnum[name].get_path().startswith("entmtp_vllm"), name


def _spec(method: str, model: str | None = None):
    """What `SamplingParams._validate_spec_decode` reads of a `SpeculativeConfig`."""
    return type("Spec", (), {"method": method, "model": model})()


@pytest.mark.parametrize("fields", [{"min_p": 0.1}, {"logit_bias": {5: 2.0}}], ids=["min_p", "logit_bias"])
def test_min_p_and_logit_bias_are_let_through_for_entmtp_engines_only(fields):
    """With the plugin registered, vLLM's own check still refuses min_p and logit_bias for its
    speculative methods (ngram here) and lets them through for EntMTP's; the request keeps both
    fields. Fails if vLLM moves the refusal out of `_validate_spec_decode` (the compat manifest
    pins the expression too)."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams

    from entmtp_vllm.vllm_plugin import register
    from entmtp_vllm.vllm_plugin.config import PROPOSER_CLASS

    register()
    params = SamplingParams(temperature=1.0, **fields)
    with pytest.raises(VLLMValidationError, match="not yet supported with speculative decoding"):
        params._validate_spec_decode(_spec("ngram"))
    params._validate_spec_decode(_spec("custom_class", PROPOSER_CLASS))
    params._validate_spec_decode(None)
    assert (params.min_p, params.logit_bias) == (fields.get("min_p", 0.0), fields.get("logit_bias"))
    with pytest.raises(VLLMValidationError, match="not yet supported with speculative decoding"):
        params._validate_spec_decode(_spec("custom_class", "somebody_else.Proposer"))
