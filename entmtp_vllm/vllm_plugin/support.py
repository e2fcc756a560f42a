"""What the tree path cannot serve, refused while vLLM builds its config (before any model loads).

`check_supported(vllm_config, platform)` raises one `EntMTPError` line naming every setting the
tree path cannot handle and the fix for each: the checks every platform shares (here) and the
platform package's own (`cpu.problems`, `cuda.problems`: on CUDA the kernels' dtypes, head sizes
and attention backends). It runs in the process that parses the arguments
(`install.prepare_config`), so `vllm serve` exits at start-up instead of failing at the first tree
step while serving.
"""

from __future__ import annotations

from typing import Any

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.platforms import PLATFORM_PACKAGES, platform_package

SINK_MODEL_TYPES = ("gpt_oss",)
"""Model types whose attention has learned sinks (vLLM passes `sinks` to the impl)."""


def _model_problems(model: Any) -> list[str]:
    problems = []
    text = model.hf_text_config
    window = model.get_sliding_window()
    if window:
        problems.append(f"sliding-window attention (sliding_window={window}): serve a model without it")
    if model.uses_alibi:
        problems.append("ALiBi position biases: serve a RoPE model")
    if getattr(text, "model_type", None) in SINK_MODEL_TYPES or getattr(model.hf_config, "model_type", None) in SINK_MODEL_TYPES:
        problems.append("attention sinks: serve a model without them")
    if model.use_mla:
        problems.append("multi-head latent attention (MLA): serve a model with standard attention")
    layer_types = getattr(text, "layer_types", None)
    if layer_types and len(set(layer_types)) > 1:
        kinds = ", ".join(sorted(set(map(str, layer_types))))
        problems.append(f"several KV-cache groups (layer types {kinds}): serve a model with one attention type")
    elif model.is_hybrid or model.has_inner_state or model.is_attention_free:
        problems.append("state-space or attention-free layers (several KV-cache groups): serve a plain decoder")
    if model.uses_mrope:
        problems.append("M-RoPE positions (tree positions would need mrope_positions): serve a text model with RoPE")
    return problems


def unsupported(vllm_config: Any, platform: str) -> list[str]:
    """Each setting of `vllm_config` the tree path cannot serve, with its fix."""
    problems = []
    package = platform_package(platform)
    if package is None:
        problems.append(f"the {platform} platform (EntMTP runs on {' and '.join(PLATFORM_PACKAGES)})")
    if vllm_config.model_config is not None:
        problems += _model_problems(vllm_config.model_config)
    cache_dtype = str(vllm_config.cache_config.cache_dtype)
    if cache_dtype.startswith("fp8") or cache_dtype.startswith("int"):
        problems.append(f"a quantized KV cache (--kv-cache-dtype {cache_dtype}): use --kv-cache-dtype auto")
    parallel = vllm_config.parallel_config
    if parallel.tensor_parallel_size > 1:
        problems.append(
            f"tensor parallelism (--tensor-parallel-size {parallel.tensor_parallel_size}: the tree path does not "
            "shard its heads and compaction yet): use --tensor-parallel-size 1"
        )
    if parallel.pipeline_parallel_size > 1:
        problems.append(f"pipeline parallelism (--pipeline-parallel-size {parallel.pipeline_parallel_size}): use 1")
    if getattr(parallel, "data_parallel_size", 1) > 1:
        problems.append(
            f"data parallelism (--data-parallel-size {parallel.data_parallel_size}: each rank would plan and pad "
            "its own tree steps): use --data-parallel-size 1, one server per GPU"
        )
    if getattr(vllm_config.cache_config, "kv_sharing_fast_prefill", False):
        problems.append("--kv-sharing-fast-prefill (it skips layers' rows that tree verification reads): leave it out")
    if _uses_v2_model_runner(vllm_config):
        problems.append("vLLM's V2 model runner (EntMTP extends the V1 runner): set VLLM_USE_V2_MODEL_RUNNER=0 "
                        "and leave out options that need V2 (watermarking, HiSparse)")
    if package is not None:
        problems += package.problems(vllm_config)
    return problems


def _uses_v2_model_runner(vllm_config: Any) -> bool:
    try:
        return bool(getattr(vllm_config, "use_v2_model_runner", False))
    except ValueError:  # vLLM's own refusal of an inconsistent V2 setting: vLLM reports it
        return False


def check_supported(vllm_config: Any, platform: str) -> None:
    """One-line `EntMTPError` listing what `unsupported` found (nothing: returns)."""
    problems = unsupported(vllm_config, platform)
    if problems:
        raise EntMTPError("EntMTP cannot serve this engine: " + "; ".join(problems))
