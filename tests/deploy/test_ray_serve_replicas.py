"""Two EntMTP replicas on a local Ray cluster (2 cores, 1 CPU each, small KV cache): a bounded
concurrent load through Serve's proxy reaches both, and each replica's `entmtp_` counters are
visible on their own (`metrics_dir`) and moved."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import _ray_deploy

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(1800)]

pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
pytest.importorskip("ray.serve.llm", reason="ray.serve.llm does not import (pip install -e '.[ray]')")
pytest.importorskip("vllm")

REQUESTS = 16
CONCURRENCY = 8


def test_two_replicas_both_serve_and_count(ray_cluster, tmp_path, model_path):
    from ray import serve

    from entmtp_vllm.bench.serve import free_port, parse_prometheus
    from entmtp_vllm.ray_serve import build_app, replica_metrics

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    args = {**_ray_deploy.app_args(), "num_replicas": 2, "num_cpus": 1, "metrics_dir": str(tmp_path)}
    serve.run(build_app(args), name="entmtp2", route_prefix="/")
    try:
        client = _ray_deploy.client(f"http://127.0.0.1:{port}/v1")
        prompts = [f"Write one sentence about the number {i}." for i in range(REQUESTS)]
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            replies = list(pool.map(lambda prompt: _ray_deploy.chat(client, "entmtp", prompt), prompts, timeout=900))
        assert all(reply.strip() for reply in replies)
        replicas = {name: parse_prometheus(text) for name, text in replica_metrics(tmp_path).items()}
        assert len(replicas) == 2, replicas.keys()
        for name, snapshot in replicas.items():
            assert snapshot.total("entmtp_tree_steps") > 0, f"replica {name} drafted no tree"
        assert sum(snapshot.total("entmtp_accepted_tokens") for snapshot in replicas.values()) > 0
    finally:
        serve.delete("entmtp2")
