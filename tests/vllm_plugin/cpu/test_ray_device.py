"""vLLM's Ray executor on CPU (`cpu/ray_device.py`): the CPU platform's Ray device, Ray's setup hook in
the engine's runtime env. The cluster check and the worker's placement line run against a real
local Ray in `tests/deploy/test_ray_cpu_cluster.py`; the real run (a Ray cluster, the EntMTP
worker inside vLLM's worker actor) is `tests/deploy/test_ray_executor_e2e.py`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.cpu import ray_device as ray_cpu
from entmtp_vllm.vllm_plugin.cpu.ray_device import (
    NOSET_ENV_VARS,
    RAY_DEVICE_KEY,
    SETUP_HOOK,
    name_ray_device,
    prepare_ray_executor,
    with_setup_hook,
)


class _Platform:
    ray_device_key = ""
    ray_noset_device_env_vars: list[str] = []


def test_a_cpu_platform_gets_ray_gpu_slots_and_leaves_cuda_visible_devices_alone():
    platform = type("Cpu", (_Platform,), {})
    name_ray_device(platform)
    assert platform.ray_device_key == RAY_DEVICE_KEY == "GPU"
    assert platform.ray_noset_device_env_vars == ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]
    assert _Platform.ray_device_key == "" and _Platform.ray_noset_device_env_vars == []


def test_a_platform_that_names_its_ray_device_keeps_it():
    platform = type("Other", (_Platform,), {"ray_device_key": "TPU", "ray_noset_device_env_vars": ["X"]})
    name_ray_device(platform)
    assert platform.ray_device_key == "TPU" and platform.ray_noset_device_env_vars == ["X"]


def test_the_setup_hook_joins_the_runtime_env():
    assert with_setup_hook(None) == {"worker_process_setup_hook": SETUP_HOOK}
    env = {"env_vars": {"A": "1"}, "worker_process_setup_hook": SETUP_HOOK}
    assert with_setup_hook(env) == env and env["env_vars"] == {"A": "1"}


def test_another_setup_hook_is_refused_in_one_line():
    with pytest.raises(EntMTPError, match="worker_process_setup_hook") as info:
        with_setup_hook({"worker_process_setup_hook": "mine.setup"})
    assert "\n" not in str(info.value) and "mine.setup" in str(info.value)


def test_the_hook_names_a_module_function():
    import importlib

    module, _, function = SETUP_HOOK.rpartition(".")
    assert callable(getattr(importlib.import_module(module), function))


def _vllm_config(backend: str, runtime_env=None) -> SimpleNamespace:
    return SimpleNamespace(parallel_config=SimpleNamespace(distributed_executor_backend=backend,
                                                           ray_runtime_env=runtime_env))


@pytest.mark.parametrize("backend", ["mp", "uni", None])
def test_other_executors_keep_their_runtime_env(backend):
    config = _vllm_config(backend)
    prepare_ray_executor(config)
    assert config.parallel_config.ray_runtime_env is None


def test_the_ray_executor_gets_the_hook_in_a_ray_runtime_env(monkeypatch):
    pytest.importorskip("ray")
    from ray.runtime_env import RuntimeEnv

    checked = []
    monkeypatch.setattr(ray_cpu, "check_ray_cluster", checked.append)
    config = _vllm_config("ray", {"env_vars": {"A": "1"}})
    config.parallel_config.world_size = 1
    prepare_ray_executor(config)
    assert checked == [1]
    env = config.parallel_config.ray_runtime_env
    assert isinstance(env, RuntimeEnv)
    assert env["worker_process_setup_hook"] == SETUP_HOOK and env["env_vars"] == {"A": "1"}


@pytest.mark.vllm
def test_the_plugin_names_the_cpu_platforms_ray_device():
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("not the CPU platform")
    from entmtp_vllm.vllm_plugin import register
    from entmtp_vllm.vllm_plugin.cpu.ray_device import setup_ray_worker

    register()
    setup_ray_worker()
    assert current_platform.ray_device_key == "GPU"
    assert list(current_platform.ray_noset_device_env_vars) == list(NOSET_ENV_VARS)
