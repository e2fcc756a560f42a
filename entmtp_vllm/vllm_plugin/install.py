"""What the general plugin changes in vLLM, in every process, before any engine is built.

1. Attention backends (`register_backend`, vLLM 0.32.0 `v1/attention/backends/registry.py:340`):
   `CPU_ATTN` resolves to `TreeCPUAttentionBackend`, `FLASH_ATTN` and `TRITON_ATTN` to the EntMTP
   CUDA backends (`gpu_attention.py`). Without a `TreeStep` on a step's metadata each behaves
   exactly like the stock backend, so engines without EntMTP are unaffected.
2. `EngineArgs.create_speculative_config` is wrapped so that the form users type,
   `--speculative-config '{"method": "entmtp", ...}'` (or `--spec-method entmtp`), maps onto
   vLLM's `custom_class` route (`"model": "entmtp_vllm.EntMTP"`) before vLLM validates the method
   (a closed `Literal`); a missing `num_speculative_tokens` becomes the largest tree's drafts.
3. The current platform's `check_and_update_config` (run while `VllmConfig` is built, in the
   process that parses the arguments) is wrapped, on every platform: when the speculative model
   is EntMTP it validates `additional_config["entmtp"]`, refuses what the tree path cannot serve
   (`support.py`), and, if `--worker-cls` was left at auto, selects the platform's EntMTP worker.
   Any `EntMTPError` there makes vLLM refuse to start, before any model is loaded.
4. On CPU, vLLM's Ray executor (`--distributed-executor-backend ray`, which vLLM 0.32.0 refuses
   there): the CPU platform gets a Ray device (Ray's logical `GPU` resource, which the cluster
   declares) in every process, and an engine with that executor gets Ray's setup hook that does
   the same in its worker actors (`ray_cpu.py`).
5. vLLM's multiprocess executor answers `take_draft_token_ids` from the drafts EntMTP's runner
   attached to the step's output, instead of a round trip to the worker (`draft_handoff.py`);
   `cpu_gemm/vllm_gemm.py` wraps vLLM's CPU linear dispatch (`ENTMTP_CPU_GEMM=packed`).
"""

from __future__ import annotations

from typing import Any

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.config import PROPOSER_CLASS, config_from_vllm, heads_folder, parse_config, resolve
from entmtp_vllm.vllm_plugin.ray_cpu import name_ray_device, prepare_ray_executor

CPU_ATTENTION_BACKEND = "entmtp_vllm.vllm_plugin.attention.TreeCPUAttentionBackend"
FLASH_ATTENTION_BACKEND = "entmtp_vllm.vllm_plugin.gpu_attention.TreeFlashAttentionBackend"
TRITON_ATTENTION_BACKEND = "entmtp_vllm.vllm_plugin.gpu_attention.TreeTritonAttentionBackend"
WORKERS = {
    "cpu": ("entmtp_vllm.vllm_plugin.worker.EntMTPCPUWorker", ("vllm.v1.worker.cpu_worker.CPUWorker",)),
    "cuda": ("entmtp_vllm.vllm_plugin.worker.EntMTPGPUWorker", ("vllm.v1.worker.gpu_worker.Worker",)),
}
"""Platform: (the EntMTP worker, the stock workers it replaces when --worker-cls is auto)."""
CPU_WORKER = WORKERS["cpu"][0]
PROPOSER_NAMES = (PROPOSER_CLASS, "entmtp_vllm.vllm_plugin.proposer.EntMTPProposer")
METHOD = "entmtp"
"""The `method` users write in `--speculative-config`."""

_MARK = "_entmtp_wrapped"


def entmtp_requested(vllm_config: Any) -> bool:
    """Whether this engine drafts with EntMTP."""
    spec = getattr(vllm_config, "speculative_config", None)
    return spec is not None and spec.method == "custom_class" and spec.model in PROPOSER_NAMES


def platform_name(platform: Any) -> str:
    """`cpu`, `cuda`, or the platform's own device type."""
    if platform.is_cpu():
        return "cpu"
    if platform.is_cuda():
        return "cuda"
    return str(getattr(platform, "device_type", None) or type(platform).__name__)


def prepare_config(vllm_config: Any, platform: str = "cpu") -> None:
    """Validate the EntMTP settings, refuse what cannot be served, pick the platform's worker
    (no-op for other engines)."""
    if not entmtp_requested(vllm_config):
        return
    from entmtp_vllm.vllm_plugin.support import check_supported

    settings = config_from_vllm(vllm_config)
    resolve(settings, vllm_config.speculative_config.num_speculative_tokens)
    heads_folder(settings)
    check_supported(vllm_config, platform)
    worker, stock = WORKERS[platform]
    parallel = vllm_config.parallel_config
    if parallel.worker_cls == "auto" or parallel.worker_cls in stock:
        parallel.worker_cls = worker


def map_method(speculative: dict[str, Any] | None, additional: Any) -> dict[str, Any] | None:
    """`{"method": "entmtp", ...}` as vLLM's `custom_class` form; other configs unchanged."""
    if not isinstance(speculative, dict) or speculative.get("method") != METHOD:
        return speculative
    mapped = {key: value for key, value in speculative.items() if key != "method"}
    model = mapped.get("model")
    if model is not None and model not in PROPOSER_NAMES:
        raise EntMTPError(
            f"--speculative-config: with \"method\": \"entmtp\" leave \"model\" out (got {model!r}); EntMTP's heads "
            "and trees go in --additional-config '{\"entmtp\": {\"heads\": ..., \"bank\": ...}}'"
        )
    mapped["model"] = PROPOSER_CLASS
    if mapped.get("num_speculative_tokens", mapped.get("num-speculative-tokens")) is None:
        raw = additional.get("entmtp") if isinstance(additional, dict) else None
        mapped["num_speculative_tokens"] = resolve(parse_config(raw)).bank.max_nodes - 1
    return mapped


def wrap_engine_args() -> None:
    """Map `method: entmtp` before vLLM builds its `SpeculativeConfig` (once per process)."""
    from vllm.engine.arg_utils import EngineArgs

    stock = EngineArgs.create_speculative_config
    if getattr(stock, _MARK, False):
        return

    def create_speculative_config(self, *args, **kwargs):
        if self.spec_method == METHOD:  # --spec-method entmtp
            self.speculative_config = {**(self.speculative_config or {}), "method": METHOD}
            self.spec_method = None
        self.speculative_config = map_method(self.speculative_config, self.additional_config)
        return stock(self, *args, **kwargs)

    setattr(create_speculative_config, _MARK, True)
    EngineArgs.create_speculative_config = create_speculative_config


def register_attention_backends() -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CPU_ATTN, CPU_ATTENTION_BACKEND)
    register_backend(AttentionBackendEnum.FLASH_ATTN, FLASH_ATTENTION_BACKEND)
    register_backend(AttentionBackendEnum.TRITON_ATTN, TRITON_ATTENTION_BACKEND)


def wrap_platform() -> None:
    """Run `prepare_config` after the current platform's own config checks (once per process);
    on CPU, also `prepare_ray_executor` and the platform's Ray device."""
    from vllm.platforms import current_platform

    platform_cls = current_platform if isinstance(current_platform, type) else type(current_platform)
    stock = platform_cls.check_and_update_config
    if getattr(stock, _MARK, False):
        return
    name = platform_name(current_platform)
    if name == "cpu":
        name_ray_device(platform_cls)

    def check_and_update_config(cls, vllm_config) -> None:
        stock(vllm_config)
        if name == "cpu":
            prepare_ray_executor(vllm_config)
        prepare_config(vllm_config, name)

    setattr(check_and_update_config, _MARK, True)
    platform_cls.check_and_update_config = classmethod(check_and_update_config)
