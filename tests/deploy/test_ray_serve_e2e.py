"""EntMTP on a real local Ray cluster (CPU, loopback only): `deploy/ray/serve_config.yaml`'s app
with one replica behind Ray Serve's HTTP proxy, against `entmtp serve` run directly with the same
settings.

Checks: completions, chat completions and streaming through the proxy; greedy outputs identical
to the direct server's on the same prompts (both in float32: in bf16 a server's own greedy output
can change between two requests for the same prompt, see docs/serving.md); the replica's `entmtp_` counters moved (drafts
accepted); a replica whose environment leaves the plugin out fails at start-up with EntMTP's
error instead of serving. Every Ray process is stopped at the end (`serve.shutdown()`,
`ray.shutdown()`); the direct server gets SIGINT and is waited for.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import _ray_deploy

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(1800)]

pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
pytest.importorskip("ray.serve.llm", reason="ray.serve.llm does not import (pip install -e '.[ray]')")
pytest.importorskip("vllm")

STARTUP_TIMEOUT_S = 900
MAX_TOKENS = _ray_deploy.MAX_TOKENS
PROMPTS = [
    "Explain speculative decoding in two sentences.",
    "Write a haiku about the sea.",
    "List three prime numbers and say why they are prime.",
]
COMPLETION_PROMPT = "The capital of France is"
_client, _chat = _ray_deploy.client, _ray_deploy.chat
DTYPE = "float32"


def _app_args() -> dict:
    """The shipped config's args in float32 (the front door's choice on CPUs without native bf16;
    on the others it is bf16, where a greedy token can depend on the step's row count)."""
    args = _ray_deploy.app_args()
    return {**args, "entmtp": {**args["entmtp"], "dtype": DTYPE}}


def _completion(client, model: str, prompt: str) -> str:
    return client.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0.0).choices[0].text


@pytest.fixture(scope="module")
def direct_outputs(tmp_path_factory, model_path) -> dict[str, list[str]]:
    """Greedy outputs of `entmtp serve` started directly with the config's settings (stopped
    before Ray starts: the two never share the 2 cores)."""
    from entmtp_vllm.bench.serve import ServerProcess, free_port

    engine = _app_args()["engine_kwargs"]
    folder = tmp_path_factory.mktemp("direct")
    port = free_port()
    script = Path(sys.executable).with_name("entmtp")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "entmtp_vllm.cli.main"]
    command += [
        "serve", "--model", model_path, "--acceptance", _app_args()["entmtp"]["acceptance"], "--dtype", DTYPE, "--",
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "entmtp",
        "--max-model-len", str(engine["max_model_len"]), "--max-num-seqs", str(engine["max_num_seqs"]),
        "--kv-cache-memory-bytes", str(engine["kv_cache_memory_bytes"]), "--seed", str(engine["seed"]),
    ]
    env = {key: value for key, value in os.environ.items() if key != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    base_url = f"http://127.0.0.1:{port}/v1"
    process = ServerProcess(command, folder / "server.log", base_url, env=env, name="entmtp serve")
    try:
        process.wait_healthy(STARTUP_TIMEOUT_S)
        client = _client(base_url)
        return {
            "chat": [_chat(client, "entmtp", prompt) for prompt in PROMPTS],
            "completion": [_completion(client, "entmtp", COMPLETION_PROMPT)],
        }
    finally:
        process.stop()


@pytest.fixture(scope="module")
def ray_app(direct_outputs, ray_cluster, tmp_path_factory, model_path):
    """(base_url, metrics folder) of the config's app served by Ray Serve on loopback."""
    from ray import serve

    from entmtp_vllm.bench.serve import free_port
    from entmtp_vllm.ray_serve import build_app

    port = free_port()
    metrics = tmp_path_factory.mktemp("replica_metrics")
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    args = {**_app_args(), "metrics_dir": str(metrics)}
    serve.run(build_app(args), name="entmtp", route_prefix="/")
    yield f"http://127.0.0.1:{port}/v1", metrics
    serve.delete("entmtp")


def test_chat_through_the_proxy_equals_entmtp_serve(ray_app, direct_outputs):
    base_url, _ = ray_app
    client = _client(base_url)
    assert [_chat(client, "entmtp", prompt) for prompt in PROMPTS] == direct_outputs["chat"]


def test_completion_through_the_proxy_equals_entmtp_serve(ray_app, direct_outputs):
    base_url, _ = ray_app
    reply = _client(base_url).completions.create(
        model="entmtp", prompt=COMPLETION_PROMPT, max_tokens=MAX_TOKENS, temperature=0.0
    )
    assert reply.choices[0].text == direct_outputs["completion"][0]
    assert reply.usage.completion_tokens == MAX_TOKENS or reply.choices[0].finish_reason == "stop"


def test_streaming_through_the_proxy_equals_non_streaming(ray_app, direct_outputs):
    base_url, _ = ray_app
    pieces = []
    stream = _client(base_url).chat.completions.create(
        model="entmtp", messages=[{"role": "user", "content": PROMPTS[1]}], max_tokens=MAX_TOKENS,
        temperature=0.0, stream=True,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    assert len(pieces) > 1
    assert "".join(pieces) == direct_outputs["chat"][1]


def test_replica_entmtp_counters_moved(ray_app):
    from entmtp_vllm.bench.serve import parse_prometheus
    from entmtp_vllm.ray_serve import replica_metrics

    base_url, metrics = ray_app
    _chat(_client(base_url), "entmtp", PROMPTS[2])
    replicas = replica_metrics(metrics)
    assert len(replicas) == 1, replicas.keys()
    (snapshot,) = [parse_prometheus(text) for text in replicas.values()]
    assert snapshot.total("entmtp_tree_steps") > 0
    assert snapshot.total("entmtp_drafted_nodes") > 0
    assert snapshot.total("entmtp_accepted_tokens") > 0


def test_replica_without_the_plugin_fails_at_start_up(ray_cluster):
    """VLLM_PLUGINS in the replica's environment leaves EntMTP out: the deployment fails (after
    Serve's few start-up retries, not in a loop) and its status shows EntMTP's error."""
    from ray import serve
    from ray.serve.llm import build_openai_app

    from entmtp_vllm.ray_serve import llm_config

    config = llm_config({**_app_args(), "model_id": "no-plugin"})
    config.runtime_env["env_vars"]["VLLM_PLUGINS"] = "some_other_plugin"
    app = build_openai_app({"llm_configs": [config], "ingress_deployment_config": {"ray_actor_options": {"num_cpus": 0}}})
    try:
        with pytest.raises(RuntimeError, match="Deploying application no-plugin failed"):
            serve.run(app, name="no-plugin", route_prefix="/no-plugin")
        deployment = serve.status().applications["no-plugin"].deployments["LLMServer:no-plugin"]
        assert deployment.status == "DEPLOY_FAILED"
        assert "VLLM_PLUGINS='some_other_plugin' leaves out 'entmtp'" in deployment.message, deployment.message
    finally:
        serve.delete("no-plugin")
