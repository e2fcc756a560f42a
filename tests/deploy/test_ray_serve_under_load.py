"""Two EntMTP replicas on a local Ray cluster (2 cores, 1 CPU each) under load through Serve's
proxy: `entmtp bench serve --metrics-from ray:<metrics_dir>` sums both replicas' counters over a
level and sees both replicas draft; then one replica actor is killed (`ray.kill`) while two
clients keep requests in flight: every request answers or fails within its timeout, only those in
flight on the victim may fail, no answer is truncated, the other replica keeps answering, and Serve
brings the deployment back to two running replicas, which serve."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

import _ray_deploy

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(1800)]

pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
pytest.importorskip("ray.serve.llm", reason="ray.serve.llm does not import (pip install -e '.[ray]')")
pytest.importorskip("vllm")

APP = "entmtp-load"
PROMPTS = 8
CONCURRENCY = 2
MAX_TOKENS = 16
RECOVERY_S = 900  # 198-215 s measured with another job on the cores; returns as soon as it is back
REQUEST_TIMEOUT_S = 120  # a request of the fault's load answers or fails within this
FAULT_MAX_TOKENS = 8


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


def _replica_actors() -> dict[str, list[str]]:
    """The app's replica actor names by deployment (alive ones: Ray drops a killed actor's name)."""
    import ray

    by_deployment = defaultdict(list)
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"] if isinstance(entry, dict) else entry
        if name.startswith(f"SERVE_REPLICA::{APP}#"):
            by_deployment[name.split("#")[1]].append(name)
    return by_deployment


def _llm_deployment() -> str:
    """The deployment with two replicas (the LLM server; the ingress has one)."""
    (deployment,) = [d for d, names in _replica_actors().items() if len(names) == 2]
    return deployment


def _running_llm_replicas() -> int:
    from ray import serve

    deployments = serve.status().applications[APP].deployments
    return max(d.replica_states.get("RUNNING", 0) for d in deployments.values())


def _load(base_url: str, stop: threading.Event, outcomes: list) -> None:
    """One client of the fault's load: greedy chats back to back until `stop`, each outcome kept
    as (seconds since the epoch it ended, "answered" | "error", detail, seconds it took)."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=REQUEST_TIMEOUT_S)
    i = 0
    while not stop.is_set():
        began = time.monotonic()
        try:
            reply = client.chat.completions.create(
                model="entmtp", messages=[{"role": "user", "content": f"Name a colour ({i})."}],
                max_tokens=FAULT_MAX_TOKENS, temperature=0.0)
            (choice,) = reply.choices
            detail = (choice.finish_reason, reply.usage.completion_tokens, choice.message.content)
            outcomes.append((time.monotonic(), "answered", detail, time.monotonic() - began))
        except Exception as exc:  # noqa: BLE001 - counted, asserted on below
            outcomes.append((time.monotonic(), "error", f"{type(exc).__name__}: {exc}"[:200], time.monotonic() - began))
        i += 1


def test_a_replica_killed_under_load_is_replaced_and_no_request_hangs(two_replicas):
    import ray

    base_url, metrics_dir = two_replicas
    deployment = _llm_deployment()
    victim = _replica_actors()[deployment][0]

    def replaced() -> bool:
        # Serve's status can still count the killed replica as running for a while, and the actor
        # list can lag the status: the replacement is in when both agree on two, without the victim
        alive = _replica_actors()[deployment]
        return len(alive) == 2 and victim not in alive and _running_llm_replicas() == 2

    stop, outcomes = threading.Event(), []
    clients = [threading.Thread(target=_load, args=(base_url, stop, outcomes), daemon=True)
               for _ in range(CONCURRENCY)]
    for thread in clients:
        thread.start()
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while len(outcomes) < 2 * CONCURRENCY:  # the load runs on both replicas before the kill
        assert time.monotonic() < deadline, f"the load did not start: {outcomes}"
        time.sleep(0.2)
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    killed = time.monotonic()
    while time.monotonic() - killed < RECOVERY_S and not (replaced() and _answered_after(outcomes, killed) >= 4):
        time.sleep(2)
    recovered_s = time.monotonic() - killed
    stop.set()
    for thread in clients:
        thread.join(REQUEST_TIMEOUT_S + 30)
    errors = [o for o in outcomes if o[1] == "error"]
    print(f"killed {victim} under load; {len(outcomes)} requests: {_answered_after(outcomes, 0)} answered "
          f"({_answered_after(outcomes, killed)} after the kill), {len(errors)} errors {[e[2] for e in errors]}; "
          f"two replicas running after {recovered_s:.0f} s; slowest request {max(o[3] for o in outcomes):.1f} s")
    assert not any(thread.is_alive() for thread in clients), "a request hangs past its timeout"
    assert replaced(), f"Serve did not replace the killed replica in {RECOVERY_S} s: {_replica_actors()}"
    assert _answered_after(outcomes, killed) >= 4, "the surviving replica did not keep answering"
    # only requests in flight on the victim when it died may fail, and only then
    assert len(errors) <= CONCURRENCY and all(killed <= e[0] <= killed + REQUEST_TIMEOUT_S for e in errors), errors
    for _, kind, detail, _ in outcomes:  # nothing is silently truncated
        if kind == "answered":
            finish_reason, tokens, content = detail
            assert content.strip() and (finish_reason == "stop" or (finish_reason == "length" and tokens == FAULT_MAX_TOKENS)), detail
    # the replacement serves: a few more requests, all answered
    client = _ray_deploy.client(base_url)
    for i in range(3):
        assert _ray_deploy.chat(client, "entmtp", f"Name a fruit ({i}).", max_tokens=8).strip()
    assert len(list(metrics_dir.glob("replica-*"))) == 3  # the new replica got its own folder


def _answered_after(outcomes: list, since: float) -> int:
    return sum(1 for ended, kind, _, _ in outcomes if kind == "answered" and ended >= since)
