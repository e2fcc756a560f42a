"""`EntMTPGPUWorker`: vLLM's GPU worker, building the EntMTP GPU model runner.

vLLM's GPU `Worker` builds its runner in `_make_model_runner()` ("subclasses override this",
vLLM 0.32 `v1/worker/gpu_worker.py:563`); EntMTP needs the V1 runner (the start-up checks refuse
the V2 runner, `cuda/__init__.py`). After vLLM's own warm-up (`compile_or_warm_up_model`) the
worker compiles every Triton kernel variant its model will launch (`warmup.py`), so no served
request pays a compile.

The plugin selects this worker on CUDA when `--worker-cls` is auto (`install.py`); by hand:
`--worker-cls entmtp_vllm.vllm_plugin.cuda.worker.EntMTPGPUWorker`. Nothing here imports a vLLM
CPU module (vLLM's CPU worker replaces torch's CUDA stream and memory functions at import).
"""

from __future__ import annotations

from vllm.logger import init_logger
from vllm.v1.worker.gpu_worker import Worker

from entmtp_vllm.vllm_plugin.cuda.model_runner import EntMTPGPUModelRunner
from entmtp_vllm.vllm_plugin.cuda.warmup import warm_up_kernels
from entmtp_vllm.vllm_plugin.worker_base import EntMTPWorkerMixin, placement

logger = init_logger("vllm.entmtp.worker")
"""Under `vllm`: vLLM configures only that logger (its handler, format, VLLM_LOGGING_LEVEL)."""


class EntMTPGPUWorker(EntMTPWorkerMixin, Worker):
    """GPU worker whose model runner verifies draft trees."""

    def init_device(self) -> None:
        super().init_device()
        logger.info(placement(self))

    def _make_model_runner(self) -> EntMTPGPUModelRunner:
        return EntMTPGPUModelRunner(self.vllm_config, self.device)

    def compile_or_warm_up_model(self, *args, **kwargs):
        result = super().compile_or_warm_up_model(*args, **kwargs)
        logger.info(warm_up_kernels(self.model_runner))
        return result
