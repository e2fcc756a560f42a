"""Two EntMTP replicas on a local Ray cluster (2 cores, 1 CPU each) under load through Serve's
proxy: `entmtp bench serve --metrics-from ray:<metrics_dir>` sums both replicas' counters over a
level and sees both replicas draft; then one replica actor is killed (`ray.kill`), requests keep
being answered by the other, and Serve brings the deployment back to two running replicas."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

import _ray_deploy

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(1200)]

pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
pytest.importorskip("ray.serve.llm", reason="ray.serve.llm does not import (pip install -e '.[ray]')")
pytest.importorskip("vllm")

APP = "entmtp-load"
PROMPTS = 8
CONCURRENCY = 2
MAX_TOKENS = 16
RECOVERY_S = 420


@pytest.fixture(scope="module")
def two_replicas(ray_cluster, model_path, tmp_path_factory):
    """(OpenAI base URL, metrics_dir) of the shipped config's app with two replicas."""
    from ray import serve

    from entmtp_vllm.bench.serve import free_port
    from entmtp_vllm.ray_serve import build_app

    metrics_dir = tmp_path_factory.mktemp("replica-metrics")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    args = {**_ray_deploy.app_args(), "num_replicas": 2, "num_cpus": 1, "metrics_dir": str(metrics_dir)}
    serve.run(build_app(args), name=APP, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}/v1", metrics_dir
    finally:
        serve.delete(APP)


def test_bench_serve_sums_both_replicas_counters(two_replicas):
    from entmtp_vllm.bench.serve import make_config, markdown_report, run_serve_bench, ServeBenchConfig

    base_url, metrics_dir = two_replicas
    config = make_config(ServeBenchConfig, base_url=base_url, metrics_from=f"ray:{metrics_dir}",
                         num_prompts=PROMPTS, concurrency=[CONCURRENCY], max_tokens=MAX_TOKENS)
    results = run_serve_bench(config, progress=False)
    print(markdown_report(results))
    (level,) = results["levels"]
    assert level["completed"] == PROMPTS and level["failed"] == 0
    acc = level["acceptance"]
    assert acc["counted_by"] == "entmtp"
    assert acc["num_drafts"] > 0 and acc["num_accepted_tokens"] > 0 and acc["mean_acceptance_length"] > 1
    replicas = acc["replicas"]
    assert len(replicas) == 2, replicas
    for name, counts in replicas.items():
        assert counts["num_drafts"] > 0, f"replica {name} got no request of the level"
    assert sum(c["num_accepted_tokens"] for c in replicas.values()) == acc["num_accepted_tokens"]


def _llm_replica_actors() -> list[str]:
    """Names of the app's LLM replica actors (the deployment of the app with two replicas)."""
    import ray

    by_deployment = defaultdict(list)
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"] if isinstance(entry, dict) else entry
        if name.startswith(f"SERVE_REPLICA::{APP}#"):
            by_deployment[name.split("#")[1]].append(name)
    (names,) = [names for names in by_deployment.values() if len(names) == 2]
    return names


def _running_llm_replicas() -> int:
    from ray import serve

    deployments = serve.status().applications[APP].deployments
    return max(d.replica_states.get("RUNNING", 0) for d in deployments.values())


def test_a_killed_replica_is_replaced_and_requests_keep_being_answered(two_replicas):
    import ray

    base_url, metrics_dir = two_replicas
    client = _ray_deploy.client(base_url)
    victim = _llm_replica_actors()[0]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    killed = time.monotonic()
    answered, failed = 0, []
    while time.monotonic() - killed < RECOVERY_S:
        try:
            reply = _ray_deploy.chat(client, "entmtp", f"Name a colour ({answered}).", max_tokens=8)
            answered += bool(reply.strip())
        except Exception as exc:  # noqa: BLE001 - counted, reported below
            failed.append(f"{type(exc).__name__}: {exc}"[:200])
        if answered >= 4 and _running_llm_replicas() == 2 and victim not in _llm_replica_actors():
            break
    recovered_s = time.monotonic() - killed
    print(f"killed {victim}; {answered} answered, {len(failed)} failed; two replicas running after {recovered_s:.0f} s")
    assert _running_llm_replicas() == 2, f"Serve did not replace the killed replica in {RECOVERY_S} s"
    assert victim not in _llm_replica_actors()
    assert answered >= 4 and len(failed) <= 1, failed
    # the replacement serves: a few more requests, all answered
    for i in range(3):
        assert _ray_deploy.chat(client, "entmtp", f"Name a fruit ({i}).", max_tokens=8).strip()
    assert len(list(metrics_dir.glob("replica-*"))) == 3  # the new replica got its own folder
