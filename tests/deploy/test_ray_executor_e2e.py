"""EntMTP under vLLM's Ray executor on CPU: `entmtp serve -- --distributed-executor-backend ray`
against a local Ray cluster (started here, node IP 127.0.0.1, one logical `GPU` slot: the Ray
device the plugin gives the CPU platform, `entmtp_vllm/vllm_plugin/cpu/ray_device.py`), against the same
server with the default executor.

Checks: greedy outputs identical on 3 prompts (24 tokens, float32); the EntMTP worker ran inside
vLLM's Ray worker actor (its log line names the actor and its pid, and that pid was a
`ray::RayWorkerProc` process among the Ray processes this test's `ray.init` started, outside the
server's process tree), and drafts were accepted; at the end every process of the server and of the Ray cluster is gone. Servers are
stopped with SIGINT and waited for, one at a time.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import _ray_deploy

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(1800)]

pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

STARTUP_TIMEOUT_S = 900
EXIT_TIMEOUT_S = 180.0  # the waits return as soon as the processes are gone
MAX_TOKENS = 24
PROMPTS = [
    "Explain speculative decoding in two sentences.",
    "Write a haiku about the sea.",
    "List three prime numbers and say why they are prime.",
]
IN_ACTOR = re.compile(r"EntMTP worker (\w+) in Ray actor (\S+) \(pid (\d+)\)")
IN_PROCESS = re.compile(r"EntMTP worker (\w+) in process (\d+)")
ACCEPTED = re.compile(r"^vllm:spec_decode_num_accepted_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


@dataclass
class Served:
    outputs: list[str]
    log: str
    metrics: str
    processes: dict[int, list[str]]
    """pid: command line, of every process of the server (and, with Ray, of the cluster) seen
    while it served."""
    left_after_sigint: list[int]
    """The server's processes still running once it exited after SIGINT (before the
    `ServerProcess.stop()` clean-up that kills its process group)."""


def _command(model_path: str, port: int, extra: list[str]) -> list[str]:
    script = Path(sys.executable).with_name("entmtp")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "entmtp_vllm.cli.main"]
    return command + [
        "serve", "--model", model_path, "--dtype", "float32", "--",
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "entmtp",
        "--max-model-len", "1024", "--max-num-seqs", "4", "--kv-cache-memory-bytes", "268435456",
        "--seed", "0", *extra,
    ]


def _tree(root: int, exclude: frozenset[int] | set[int] = frozenset()) -> dict[int, list[str]]:
    """pid: command line of `root`'s descendants (not `root`), without `exclude` and theirs."""
    found: dict[int, list[str]] = {}
    for child in psutil.Process(root).children(recursive=True):
        try:
            found[child.pid] = child.cmdline()
        except psutil.Error:
            pass
    return {pid: line for pid, line in found.items() if pid not in exclude}


def _alive(pids) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_gone(pids, timeout: float = EXIT_TIMEOUT_S) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _alive(pids)) and time.monotonic() < deadline:
        time.sleep(1.0)
    return left


def _interrupt(server, pids) -> list[int]:
    """SIGINT, wait for the server to exit, then for its processes; those still running."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGINT)
        try:
            server.process.wait(timeout=EXIT_TIMEOUT_S)
        except Exception:
            pass
    return _wait_gone(pids)


def _serve(model_path: str, folder: Path, extra: list[str], env: dict[str, str], ray_tree=None) -> Served:
    import httpx

    from entmtp_vllm.bench.serve import ServerProcess, free_port

    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    server = ServerProcess(_command(model_path, port, extra), folder / "server.log", base_url, env=env,
                           name="entmtp serve")
    processes: dict[int, list[str]] = {}
    server_pids: set[int] = set()
    try:
        server.wait_healthy(STARTUP_TIMEOUT_S)
        client = _ray_deploy.client(base_url)
        outputs = [_ray_deploy.chat(client, "entmtp", prompt, MAX_TOKENS) for prompt in PROMPTS]
        metrics = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=30.0).text
        processes = {server.process.pid: ["entmtp serve"], **_tree(server.process.pid)}
        server_pids = set(processes)
        if ray_tree is not None:
            processes.update(ray_tree(server_pids))
    finally:
        left = _interrupt(server, server_pids)
        server.stop(grace=EXIT_TIMEOUT_S)
    return Served(outputs, (folder / "server.log").read_text(errors="replace"), metrics, processes, left)


def _server_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "VLLM_ENABLE_V1_MULTIPROCESSING"}


@pytest.fixture(scope="module")
def default_served(tmp_path_factory, model_path) -> Served:
    """The server with vLLM's default executor (run and stopped before Ray starts)."""
    return _serve(model_path, tmp_path_factory.mktemp("default"), [], _server_env())


@dataclass
class RayServed:
    served: Served
    ray_processes: dict[int, list[str]]
    actors_left_after_server: list[int]
    """vLLM's worker actors still running once the server exited (Ray still up)."""
    left_after_shutdown: list[int]


@pytest.fixture(scope="module")
def ray_served(default_served, tmp_path_factory, model_path) -> RayServed:
    """The server with `--distributed-executor-backend ray` on a local Ray cluster with one
    logical GPU slot; the server is stopped, then Ray is shut down, before the checks."""
    import ray

    context = ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
                       _node_ip_address="127.0.0.1")
    me = os.getpid()
    ray_processes: dict[int, list[str]] = {}
    try:
        env = _server_env()
        env["RAY_ADDRESS"] = context.address_info["gcs_address"]
        env.setdefault("RAY_AUTH_MODE", "token")  # a new local cluster uses Ray's token auth by default

        def ray_tree(server_pids: set[int]) -> dict[int, list[str]]:
            found = _tree(me, exclude=server_pids)
            ray_processes.update(found)
            return found

        served = _serve(model_path, tmp_path_factory.mktemp("ray"),
                        ["--distributed-executor-backend", "ray"], env, ray_tree)
        actors = [pid for pid, cmd in ray_processes.items() if cmd and cmd[0].startswith("ray::RayWorkerProc")]
        actors_left = _wait_gone(actors)
    finally:
        ray.shutdown()
    left = _wait_gone(set(served.processes) | set(ray_processes))
    return RayServed(served, ray_processes, actors_left, left)


def test_greedy_outputs_equal_the_default_executors(default_served, ray_served):
    assert ray_served.served.outputs == default_served.outputs
    assert all(output for output in default_served.outputs)


def test_the_entmtp_worker_runs_inside_vllms_ray_worker_actor(default_served, ray_served):
    served = ray_served.served
    assert "distributed_executor_backend': 'ray'" in served.log
    (line,) = set(IN_ACTOR.findall(served.log))
    worker_class, actor, pid = line[0], line[1], int(line[2])
    assert worker_class == "EntMTPCPUWorker" and actor.startswith("vllm_Worker")
    # that pid was a Ray worker process of this cluster running vLLM's actor, not a server process
    assert pid in ray_served.ray_processes, (pid, ray_served.ray_processes)
    assert ray_served.ray_processes[pid][0].startswith("ray::RayWorkerProc"), ray_served.ray_processes[pid]
    raylets = [p for p, cmd in ray_served.ray_processes.items() if cmd and cmd[0].endswith("/raylet")]
    assert raylets, ray_served.ray_processes
    # the default executor's worker is a plain process of the server
    assert not IN_ACTOR.findall(default_served.log)
    (plain,) = set(IN_PROCESS.findall(default_served.log))
    assert plain[0] == "EntMTPCPUWorker" and int(plain[1]) in default_served.processes


def test_drafts_were_accepted_under_the_ray_executor(ray_served):
    accepted = [float(value) for value in ACCEPTED.findall(ray_served.served.metrics)]
    assert accepted and sum(accepted) > 0, ray_served.served.metrics[-2000:]


def test_no_ray_or_vllm_process_is_left(default_served, ray_served):
    assert not default_served.left_after_sigint, default_served.processes
    assert not ray_served.served.left_after_sigint, ray_served.served.processes
    # vLLM's executor ended its worker actor when the server stopped, before Ray was shut down
    assert not ray_served.actors_left_after_server, ray_served.ray_processes
    assert ray_served.ray_processes, "no Ray process was seen"
    assert not ray_served.left_after_shutdown, {
        pid: ray_served.served.processes.get(pid) or ray_served.ray_processes.get(pid)
        for pid in ray_served.left_after_shutdown
    }
