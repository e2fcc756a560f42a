"""`EntMTPCPUWorker`: vLLM's CPU worker, building the EntMTP model runner.

`CPUWorker.init_device()` constructs `CPUModelRunner` by the name it imported into
`vllm.v1.worker.cpu_worker` (vLLM 0.32.0, `v1/worker/cpu_worker.py:177`). Rebinding that name to
`EntMTPCPUModelRunner` around the call builds the runner (and the drafter in it) exactly once.

The plugin selects this worker automatically for EntMTP (see `install.py`); to choose it by
hand: `--worker-cls entmtp_vllm.vllm_plugin.worker.EntMTPCPUWorker`.
"""

from __future__ import annotations

import vllm.v1.worker.cpu_worker as cpu_worker
from vllm.v1.worker.cpu_worker import CPUWorker

from entmtp_vllm.vllm_plugin.model_runner import EntMTPCPUModelRunner

WORKER_PATH = "entmtp_vllm.vllm_plugin.worker.EntMTPCPUWorker"


class EntMTPCPUWorker(CPUWorker):
    """CPU worker whose model runner verifies draft trees."""

    def init_device(self) -> None:
        stock = cpu_worker.CPUModelRunner
        cpu_worker.CPUModelRunner = EntMTPCPUModelRunner
        try:
            super().init_device()
        finally:
            cpu_worker.CPUModelRunner = stock

    def entmtp_stats(self) -> dict | None:
        """The proposer's counters (`llm.collective_rpc("entmtp_stats")`), None without EntMTP."""
        runner = getattr(self, "model_runner", None)
        return runner.entmtp_stats() if isinstance(runner, EntMTPCPUModelRunner) else None
