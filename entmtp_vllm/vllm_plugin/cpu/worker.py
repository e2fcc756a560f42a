"""The EntMTP workers: vLLM's CPU and GPU workers, building the EntMTP model runners.

- `EntMTPCPUWorker`: `CPUWorker.init_device()` constructs `CPUModelRunner` by the name it
  imported into `vllm.v1.worker.cpu_worker` (vLLM 0.32.0, `v1/worker/cpu_worker.py:177`);
  rebinding that name to `EntMTPCPUModelRunner` around the call builds the runner (and the
  drafter in it) exactly once.
- `EntMTPGPUWorker`: vLLM's GPU `Worker` builds its runner in `_make_model_runner()`
  ("subclasses override this", `v1/worker/gpu_worker.py:563`); EntMTP needs the V1 runner, which
  vLLM selects for `custom_class` drafters.

The plugin selects the worker of the platform it runs on (see `install.py`); by hand:
`--worker-cls entmtp_vllm.vllm_plugin.worker.EntMTPCPUWorker` (or `EntMTPGPUWorker`).

Both log, when their device is set up, the process they run in and, under vLLM's Ray executor,
the Ray actor (`EntMTP worker EntMTPCPUWorker in Ray actor vllm_Worker_... (pid N)`).
"""

from __future__ import annotations

import vllm.v1.worker.cpu_worker as cpu_worker
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.logger import init_logger
from vllm.v1.worker.gpu_worker import Worker

from entmtp_vllm.cpu_attention import rows
from entmtp_vllm.vllm_plugin.ray_cpu import placement
from entmtp_vllm.vllm_plugin.model_runner import EntMTPCPUModelRunner, EntMTPGPUModelRunner
from entmtp_vllm.vllm_plugin.tree_runner import TreeRunnerMixin

WORKER_PATH = "entmtp_vllm.vllm_plugin.worker.EntMTPCPUWorker"
GPU_WORKER_PATH = "entmtp_vllm.vllm_plugin.worker.EntMTPGPUWorker"

logger = init_logger("vllm.entmtp.worker")
"""Under `vllm`: vLLM configures only that logger (its handler, format, VLLM_LOGGING_LEVEL)."""


class _StatsMixin:
    def entmtp_stats(self) -> dict | None:
        """The proposer's counters (`llm.collective_rpc("entmtp_stats")`), None without EntMTP."""
        runner = getattr(self, "model_runner", None)
        return runner.entmtp_stats() if isinstance(runner, TreeRunnerMixin) else None


class EntMTPCPUWorker(_StatsMixin, CPUWorker):
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


class EntMTPGPUWorker(_StatsMixin, Worker):
    """GPU worker whose model runner verifies draft trees (not yet run on a GPU with vLLM)."""

    def init_device(self) -> None:
        super().init_device()
        logger.info(placement(self))

    def _make_model_runner(self) -> EntMTPGPUModelRunner:
        return EntMTPGPUModelRunner(self.vllm_config, self.device)
