"""vLLM's Ray executor (`--distributed-executor-backend ray`) on CPU.

vLLM 0.32.0 refuses it on CPU because `CpuPlatform.ray_device_key` is empty
(`platforms/interface.py:149`: "empty string means the device does not support ray"), checked in
`initialize_ray_cluster` (`v1/executor/ray_utils.py:572`). A custom Ray resource cannot stand in:
each worker actor reports its devices as `get_accelerator_ids()[ray_device_key]`
(`v1/executor/ray_executor_v2.py:152`, `ray_executor.py` `get_node_and_physical_gpu_ids`), and Ray
lists there only its accelerator resources (GPU, TPU, ...); "CPU" itself is refused as a custom
resource of an actor (`ray_executor_v2.py:282`: `resources={device_key: n}`).

So on CPU the plugin names Ray's logical `GPU` resource as the CPU platform's Ray device: each
vLLM worker actor takes one `GPU` slot, which the Ray cluster must declare
(`ray start --head --num-gpus 1`, or `ray.init(num_gpus=1)`; Ray resources are logical, nothing
uses a GPU). Ray is told not to set `CUDA_VISIBLE_DEVICES` in those actors
(`ray_noset_device_env_vars`, read by `ray_executor_v2.py:264`).

The platform attributes must hold in the engine process and in every worker actor, before vLLM
calls the actor's `get_node_and_physical_gpu_ids` (which happens before vLLM loads its plugins in
the actor). The engine process runs `register()` first (`v1/engine/core.py:127`); the actors get
`setup_ray_worker` as Ray's `worker_process_setup_hook`, put into the engine's
`parallel_config.ray_runtime_env`, which vLLM gives to `ray.init` and to each worker actor
(`ray_utils.py:570`, `ray_executor_v2.py:261`).

Before the engine starts, `check_ray_cluster` connects to the Ray cluster vLLM will use and refuses
(one-line `EntMTPError`) when there is none (a `host:port` address is first probed over TCP, so a
dead one fails in seconds, not after `ray.init`'s minutes of retries) or it declares fewer `GPU`
slots than workers: vLLM would otherwise start a Ray instance of its own with no `GPU` slot and
wait for its placement group (`PG_WAIT_TIMEOUT` = 1800 s, `ray_utils.py:29`).

"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from entmtp_vllm.errors import EntMTPError

RAY_DEVICE_KEY = "GPU"
"""Ray's resource each vLLM worker actor takes on CPU (logical: the cluster declares it)."""
NOSET_ENV_VARS = ("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",)
"""Ray leaves CUDA_VISIBLE_DEVICES alone in those actors."""
SETUP_HOOK = "entmtp_vllm.vllm_plugin.cpu.ray_device.setup_ray_worker"
"""Ray's `worker_process_setup_hook` for vLLM's worker actors on CPU."""
HOOK_FIELD = "worker_process_setup_hook"
RAY_BACKEND = "ray"


def name_ray_device(platform_cls: Any) -> None:
    """Give a CPU platform class a Ray device (only vLLM's Ray executor reads these)."""
    if not platform_cls.ray_device_key:
        platform_cls.ray_device_key = RAY_DEVICE_KEY
    if not platform_cls.ray_noset_device_env_vars:
        platform_cls.ray_noset_device_env_vars = list(NOSET_ENV_VARS)


def setup_ray_worker() -> None:
    """Ray's `worker_process_setup_hook`: name the CPU platform's Ray device in the actor."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        name_ray_device(type(current_platform))


def with_setup_hook(runtime_env: Any) -> dict[str, Any]:
    """`runtime_env` (None, a dict or Ray's `RuntimeEnv`) with `SETUP_HOOK`; refuses another hook."""
    merged = dict(runtime_env or {})
    existing = merged.get(HOOK_FIELD)
    if existing is not None and existing != SETUP_HOOK:
        raise EntMTPError(
            f"vLLM's Ray executor on CPU needs Ray's {HOOK_FIELD} {SETUP_HOOK!r}, but the Ray runtime env "
            f"already sets {existing!r}; leave it out of the runtime env"
        )
    merged[HOOK_FIELD] = SETUP_HOOK
    return merged


def uses_ray_executor(parallel_config: Any) -> bool:
    return getattr(parallel_config, "distributed_executor_backend", None) == RAY_BACKEND


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


GCS_PROBE_TIMEOUT_S = 5.0
"""How long `check_ray_cluster` waits for a TCP connection to a `host:port` cluster address."""


def _unreachable(address: str) -> str | None:
    """Why a `host:port` Ray address takes no TCP connection (None: it does, or the address is of
    another form). `ray.init` would otherwise retry a dead GCS address for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or "://" in address or not port.isdigit():
        return None  # "auto", "local", "ray://...": ray.init resolves those itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=GCS_PROBE_TIMEOUT_S):
            return None
    except OSError as error:
        return f"{type(error).__name__}: {error.strerror or error}"


def _cluster_slots(ray: Any) -> float:
    return float(ray.cluster_resources().get(RAY_DEVICE_KEY, 0))


def check_ray_cluster(workers: int) -> None:
    """Refuse when the Ray cluster vLLM will use (this process's, else `RAY_ADDRESS`'s, else the
    one running on this machine) is missing or declares fewer `GPU` slots than `workers`."""
    import ray

    if ray.is_initialized():
        slots = _cluster_slots(ray)
    else:
        address = os.environ.get("RAY_ADDRESS") or "auto"
        why = _unreachable(address)
        if why is None:
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError) as error:
                why = _first_line(error)
        if why is not None:
            raise EntMTPError(
                f"vLLM's Ray executor on CPU needs a running Ray cluster with {RAY_DEVICE_KEY} slots "
                f"(`ray start --head --num-gpus {workers}`); none reachable at {address}: {why}"
            )
        try:
            slots = _cluster_slots(ray)
        finally:
            ray.shutdown()
    if slots < workers:
        raise EntMTPError(
            f"vLLM's Ray executor on CPU takes one Ray {RAY_DEVICE_KEY} slot per worker ({workers}), the cluster "
            f"declares {slots:g}: start it with `ray start --head --num-gpus {workers}` (logical, no GPU is used)"
        )


def prepare_ray_executor(vllm_config: Any) -> None:
    """On CPU with `--distributed-executor-backend ray`: check the cluster, then put the setup
    hook into the engine's Ray runtime env (no-op for other executors)."""
    parallel = vllm_config.parallel_config
    if not uses_ray_executor(parallel):
        return
    from ray.runtime_env import RuntimeEnv

    check_ray_cluster(parallel.world_size)
    parallel.ray_runtime_env = RuntimeEnv(**with_setup_hook(parallel.ray_runtime_env))
