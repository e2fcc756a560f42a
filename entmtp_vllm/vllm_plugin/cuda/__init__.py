"""EntMTP on vLLM's CUDA platform: what only a CUDA process imports.

- `worker.py`        `EntMTPGPUWorker` (vLLM's GPU `Worker`), which warms the kernels up at start
- `model_runner.py`  `EntMTPGPUModelRunner`: the tree step over vLLM's `GPUModelRunner`, compaction
                     in one `compact_kv` launch, no FULL CUDA graph for a step with tree rows
- `attention.py`     `FLASH_ATTN` / `TRITON_ATTN` with per-request tree masks (`paged_tree_attention`)
- `kernels.py`       the kernels' call sites on vLLM's CUDA cache layout
- `warmup.py`        every kernel variant the model launches, compiled when the worker starts

Nothing here imports a vLLM CPU module (vLLM's CPU worker replaces torch's CUDA stream, event and
memory functions for the whole process). This `__init__` imports nothing of vLLM: `install.py`
calls its hooks only on the CUDA platform (and the tests call `problems` on CPU).
"""

from __future__ import annotations

from typing import Any

WORKER = "entmtp_vllm.vllm_plugin.cuda.worker.EntMTPGPUWorker"
"""The worker the plugin selects when `--worker-cls` is auto."""
STOCK_WORKERS = ("vllm.v1.worker.gpu_worker.Worker",)
"""The stock workers it replaces when one is named explicitly."""
ATTENTION_BACKENDS = {
    "FLASH_ATTN": "entmtp_vllm.vllm_plugin.cuda.attention.TreeFlashAttentionBackend",
    "TRITON_ATTN": "entmtp_vllm.vllm_plugin.cuda.attention.TreeTritonAttentionBackend",
}
"""vLLM's backend name: the EntMTP backend registered under it."""
DEFAULT_BACKEND = "FLASH_ATTN"
"""The backend an EntMTP engine gets when `--attention-backend` is left out (vLLM's own choice
may be one without tree rows, e.g. FLASHINFER on Blackwell)."""


def install(platform_cls: type) -> None:
    """In every process, when the plugin registers: the tree backends under `FLASH_ATTN` and
    `TRITON_ATTN` (without a tree step on a layer's metadata they behave as the stock ones)."""
    from entmtp_vllm.vllm_plugin.backends import register_attention_backends

    register_attention_backends(ATTENTION_BACKENDS)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _backend_name(backend: Any) -> str | None:
    return None if backend is None else str(getattr(backend, "name", backend))


def problems(vllm_config: Any) -> list[str]:
    """What an EntMTP engine on CUDA cannot serve, beyond `support.py`'s common checks: a model
    dtype or head size the kernels are not built for, more query heads per KV head than a
    kernel tile holds, an attention backend without tree rows."""
    from entmtp_kernels import configs

    found = []
    model = vllm_config.model_config
    if model is not None:
        if model.dtype not in configs.GPU_DTYPES:
            dtype, built = _dtype_name(model.dtype), " and ".join(map(_dtype_name, configs.GPU_DTYPES))
            found.append(f"{dtype} weights (--dtype {dtype}: EntMTP's GPU kernels are built for {built}): "
                         "use --dtype bfloat16 or float16")
        head_size = model.get_head_size()
        if head_size not in configs.SUPPORTED_HEAD_DIMS:
            sizes = ", ".join(map(str, configs.SUPPORTED_HEAD_DIMS))
            found.append(f"head size {head_size} (the tree kernels take {sizes}): serve a model with one of those")
        text = model.hf_text_config
        heads, kv_heads = getattr(text, "num_attention_heads", None), model.get_total_num_kv_heads()
        if heads and kv_heads and heads // kv_heads > configs.BLOCK_M:
            found.append(f"{heads // kv_heads} query heads per KV head (the tree kernel's tile holds "
                         f"{configs.BLOCK_M}): serve a model with at most {configs.BLOCK_M}")
    attention = getattr(vllm_config, "attention_config", None)
    chosen = [_backend_name(getattr(attention, "backend", None))]
    chosen += [_backend_name(value) for value in (getattr(attention, "backend_per_kind", None) or {}).values()]
    for name in dict.fromkeys(chosen):
        if name is not None and name not in ATTENTION_BACKENDS:
            found.append(f"the {name} attention backend (--attention-backend {name}: EntMTP's tree rows run on "
                         f"{' and '.join(ATTENTION_BACKENDS)}): use --attention-backend {DEFAULT_BACKEND} "
                         "or leave it out")
    return found


def configure(vllm_config: Any) -> None:
    """An accepted EntMTP engine on CUDA: `DEFAULT_BACKEND` unless the user chose a backend."""
    attention = getattr(vllm_config, "attention_config", None)
    if attention is not None and attention.backend is None:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        attention.backend = AttentionBackendEnum[DEFAULT_BACKEND]
