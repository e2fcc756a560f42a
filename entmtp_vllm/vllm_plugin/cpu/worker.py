"""`EntMTPCPUWorker`: vLLM's CPU worker, building the EntMTP CPU model runner.

`CPUWorker.init_device()` constructs `CPUModelRunner` by the name it imported into
`vllm.v1.worker.cpu_worker` (vLLM 0.32, `v1/worker/cpu_worker.py:177`); rebinding that name to
`EntMTPCPUModelRunner` around the call builds the runner (and the drafter in it) exactly once.

The plugin selects this worker on CPU when `--worker-cls` is auto (`install.py`); by hand:
`--worker-cls entmtp_vllm.vllm_plugin.cpu.worker.EntMTPCPUWorker`.

This module imports vLLM's CPU worker, which replaces torch's CUDA stream, event and
accelerator functions for the whole process (`vllm/v1/worker/cpu/shm.py`): only a CPU
process may import it.
"""

from __future__ import annotations

import vllm.v1.worker.cpu_worker as cpu_worker
from vllm.logger import init_logger
from vllm.v1.worker.cpu_worker import CPUWorker

from entmtp_vllm.cpu_attention import rows
from entmtp_vllm.vllm_plugin.cpu.model_runner import EntMTPCPUModelRunner
from entmtp_vllm.vllm_plugin.worker_base import EntMTPWorkerMixin, placement

logger = init_logger("vllm.entmtp.worker")
"""Under `vllm`: vLLM configures only that logger (its handler, format, VLLM_LOGGING_LEVEL)."""


class EntMTPCPUWorker(EntMTPWorkerMixin, CPUWorker):
    """CPU worker whose model runner verifies draft trees."""

    runner_cls: type = EntMTPCPUModelRunner
    """The runner `init_device` builds (a subclass of vLLM's `CPUModelRunner`)."""

    def init_device(self) -> None:
        stock = cpu_worker.CPUModelRunner
        cpu_worker.CPUModelRunner = self.runner_cls
        try:
            super().init_device()
        finally:
            cpu_worker.CPUModelRunner = stock
        logger.info(placement(self))
        rows_attention = rows.build_at_start()  # compiled now, not in a served step
        if rows_attention:
            logger.info(rows_attention)
