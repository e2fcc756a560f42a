"""What the CPU and the CUDA EntMTP workers share, free of any platform's vLLM module.

- `EntMTPWorkerMixin.entmtp_stats`: the proposer's counters over `collective_rpc`;
- `placement(worker)`: the line each worker logs when its device is set up: the process, and
  the Ray actor when there is one (`EntMTP worker EntMTPCPUWorker in Ray actor vllm_Worker_...
  (pid N)`). It never imports Ray: a process that has not imported it is no Ray actor.
"""

from __future__ import annotations

import os
import sys

from entmtp_vllm.vllm_plugin.tree_runner import TreeRunnerMixin


def ray_actor() -> str | None:
    """The name (else the id) of the Ray actor this process runs; None outside a Ray actor."""
    ray = sys.modules.get("ray")  # a process that never imported Ray is no Ray actor
    if ray is None or not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    actor_id = context.get_actor_id()
    return None if actor_id is None else (context.get_actor_name() or actor_id)


def placement(worker: object) -> str:
    """`EntMTP worker <class> in Ray actor <name> (pid N)`, or `... in process N` outside Ray."""
    actor = ray_actor()
    where = f"in Ray actor {actor} (pid {os.getpid()})" if actor else f"in process {os.getpid()}"
    return f"EntMTP worker {type(worker).__name__} {where}"


class EntMTPWorkerMixin:
    """Mixed in before a vLLM worker class."""

    def entmtp_stats(self) -> dict | None:
        """The proposer's counters (`llm.collective_rpc("entmtp_stats")`), None without EntMTP."""
        runner = getattr(self, "model_runner", None)
        return runner.entmtp_stats() if isinstance(runner, TreeRunnerMixin) else None
