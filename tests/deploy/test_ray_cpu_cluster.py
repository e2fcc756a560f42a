"""The Ray executor's start-up check and the worker's placement line against a real local Ray
(`entmtp_vllm/vllm_plugin/cpu/ray_device.py`: `check_ray_cluster`, `placement`): a cluster without GPU slots is refused
in one line, one with enough passes and is left connected, no cluster at all is refused in one
line, nor is a dead cluster address (at once); a Ray driver is no actor, a Ray actor names itself. Every Ray process is stopped at the end."""

from __future__ import annotations

import os
import subprocess

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.cpu.ray_device import check_ray_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")


@pytest.fixture
def local_ray(request):
    """ray.init of a local cluster with `request.param` GPU slots (logical), shut down after."""
    ray.init(num_cpus=1, num_gpus=request.param, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    try:
        yield
    finally:
        ray.shutdown()


def _one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("local_ray", [0], indirect=True)
def test_a_cluster_without_gpu_slots_is_refused_in_one_line(local_ray):
    with pytest.raises(EntMTPError) as error:
        check_ray_cluster(1)
    text = _one_line(error)
    assert "declares 0" in text and "ray start --head --num-gpus 1" in text


@pytest.mark.parametrize("local_ray", [2], indirect=True)
def test_a_cluster_with_enough_slots_passes_and_stays_connected(local_ray):
    check_ray_cluster(2)
    assert ray.is_initialized()
    with pytest.raises(EntMTPError, match="per worker \\(3\\)"):
        check_ray_cluster(3)


def test_no_cluster_is_refused_in_one_line(monkeypatch):
    assert not ray.is_initialized()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # address "auto" finds any cluster running on this machine (`ray start`, another test run)
    if subprocess.run(["pgrep", "-f", "raylet"], capture_output=True).returncode == 0:
        pytest.skip("a Ray cluster is running on this machine")
    with pytest.raises(EntMTPError) as error:
        check_ray_cluster(1)
    assert "needs a running Ray cluster" in _one_line(error)
    assert not ray.is_initialized()


def test_a_dead_cluster_address_is_refused_in_seconds(monkeypatch):
    """`RAY_ADDRESS` naming a port nobody listens on: refused in one line at once (ray.init
    alone retries such a GCS address for minutes)."""
    import socket
    import time

    with socket.socket() as probe:  # a free port: bound, then closed before the check
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    start = time.monotonic()
    with pytest.raises(EntMTPError) as error:
        check_ray_cluster(1)
    assert time.monotonic() - start < 30
    assert f"none reachable at 127.0.0.1:{port}: ConnectionRefusedError" in _one_line(error)
    assert not ray.is_initialized()


@pytest.mark.parametrize("local_ray", [0], indirect=True)
def test_the_worker_names_the_ray_actor_it_runs_in(local_ray):
    from entmtp_vllm.vllm_plugin.worker_base import placement

    class EntMTPCPUWorker:  # placement() reads only the class name
        pass

    assert placement(EntMTPCPUWorker()) == f"EntMTP worker EntMTPCPUWorker in process {os.getpid()}"  # a driver

    @ray.remote(num_cpus=0)
    class Probe:
        def where(self):
            from entmtp_vllm.vllm_plugin.worker_base import placement

            return placement(EntMTPCPUWorker()), os.getpid()

    probe = Probe.options(name="entmtp_probe").remote()
    where, pid = ray.get(probe.where.remote(), timeout=300)
    assert where == f"EntMTP worker EntMTPCPUWorker in Ray actor entmtp_probe (pid {pid})"
    ray.kill(probe)
