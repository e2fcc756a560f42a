"""vLLM's Ray executor on CPU (`ray_cpu.py`): the CPU platform's Ray device, Ray's setup hook in
the engine's runtime env, and the worker's placement line. The real run (a Ray cluster, the
EntMTP worker inside vLLM's worker actor) is `tests/deploy/test_ray_executor_e2e.py`."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin import ray_cpu
from entmtp_vllm.vllm_plugin.ray_cpu import (
    NOSET_ENV_VARS,
    RAY_DEVICE_KEY,
    SETUP_HOOK,
    check_ray_cluster,
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


class _FakeRay:
    """`ray` as `check_ray_cluster` uses it: a cluster with `gpus` GPU slots, or none."""

    def __init__(self, gpus: float | None, initialized: bool = False):
        self.gpus, self.initialized, self.calls = gpus, initialized, []

    def is_initialized(self):
        return self.initialized

    def init(self, address, **kwargs):
        self.calls.append(("init", address))
        if self.gpus is None:
            raise ConnectionError("Could not find any running Ray instance.\nPlease specify the address.")
        self.initialized = True

    def cluster_resources(self):
        return {"CPU": 2.0, **({"GPU": self.gpus} if self.gpus else {})}

    def shutdown(self):
        self.calls.append(("shutdown",))
        self.initialized = False


@pytest.mark.parametrize("address", [None, "127.0.0.1:6379"])
def test_a_cluster_with_enough_gpu_slots_passes_and_is_left_as_found(monkeypatch, address):
    fake = _FakeRay(gpus=2)
    monkeypatch.setitem(sys.modules, "ray", fake)
    if address:
        monkeypatch.setenv("RAY_ADDRESS", address)
    else:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    check_ray_cluster(2)
    assert fake.calls == [("init", address or "auto"), ("shutdown",)]
    inside = _FakeRay(gpus=1, initialized=True)  # a Ray task or actor (Ray Serve): no init, no shutdown
    monkeypatch.setitem(sys.modules, "ray", inside)
    check_ray_cluster(1)
    assert inside.calls == [] and inside.initialized


@pytest.mark.parametrize(
    "gpus, words",
    [
        (None, ["needs a running Ray cluster", "ray start --head --num-gpus 1", "Could not find any running Ray"]),
        (0, ["one Ray GPU slot per worker (1)", "declares 0", "--num-gpus 1"]),
    ],
)
def test_no_cluster_or_no_gpu_slot_is_refused_in_one_line(monkeypatch, gpus, words):
    fake = _FakeRay(gpus=gpus)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(EntMTPError) as info:
        check_ray_cluster(1)
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)
    assert not fake.initialized


@pytest.mark.vllm
def test_the_plugin_names_the_cpu_platforms_ray_device():
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("not the CPU platform")
    from entmtp_vllm.vllm_plugin import register
    from entmtp_vllm.vllm_plugin.ray_cpu import setup_ray_worker

    register()
    setup_ray_worker()
    assert current_platform.ray_device_key == "GPU"
    assert list(current_platform.ray_noset_device_env_vars) == list(NOSET_ENV_VARS)


class _Context:
    def __init__(self, actor_id, name):
        self._id, self._name = actor_id, name

    def get_actor_id(self):
        return self._id

    def get_actor_name(self):
        return self._name


def _fake_ray(initialized: bool, actor_id=None, name=None) -> SimpleNamespace:
    return SimpleNamespace(is_initialized=lambda: initialized, get_runtime_context=lambda: _Context(actor_id, name))


@pytest.mark.vllm
@pytest.mark.parametrize(
    "ray, where",
    [
        (None, f"in process {os.getpid()}"),
        (_fake_ray(False), f"in process {os.getpid()}"),
        (_fake_ray(True), f"in process {os.getpid()}"),  # a Ray driver, no actor
        (_fake_ray(True, "a1b2", "vllm_Worker_7"), f"in Ray actor vllm_Worker_7 (pid {os.getpid()})"),
        (_fake_ray(True, "a1b2", ""), f"in Ray actor a1b2 (pid {os.getpid()})"),
    ],
)
def test_the_worker_says_where_it_runs(monkeypatch, ray, where):
    pytest.importorskip("vllm")
    from entmtp_vllm.vllm_plugin import worker

    if ray is None:
        monkeypatch.delitem(sys.modules, "ray", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "ray", ray)
    fake_worker = type("EntMTPCPUWorker", (), {})()
    assert worker.placement(fake_worker) == f"EntMTP worker EntMTPCPUWorker {where}"
