"""The GPU cluster recipe on paper (`deploy/kuberay/rayservice.yaml`, `deploy/docker/Dockerfile`),
checked without Ray, Docker or Kubernetes: the RayService's embedded Serve config holds the same
application as `deploy/ray/serve_config.yaml`, its GPU worker group asks for GPUs, and the image
installs the Ray pin of pyproject.toml and a vLLM release its `gpu` extra accepts (read from there)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import yaml

from _ray_deploy import CONFIG

from entmtp_vllm.ray_serve import RayServeArgs

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "kuberay" / "rayservice.yaml"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
GPU_ONLY_ARGS = {"accelerator": "gpu"}
"""What the cluster's app adds to the local one: it is built on the head pod, which has no GPU."""


def _manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def _serve_config() -> dict:
    return yaml.safe_load(_manifest()["spec"]["serveConfigV2"])


def _requirement(extra: str, package: str) -> str:
    """The requirement of `package` in pyproject.toml's optional dependency `extra`."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (found,) = [r for r in project["optional-dependencies"][extra] if re.match(rf"{re.escape(package)}(\[|=|>|<)", r)]
    return found


def _pin(extra: str, package: str) -> str:
    found = _requirement(extra, package)
    assert "==" in found, f"{found} is not pinned"
    return found


def _pip_installed() -> list[str]:
    """The arguments of every `pip install` in the Dockerfile's RUN instructions."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    args: list[str] = []
    for line in text.splitlines():
        if not line.startswith("RUN "):
            continue
        for command in re.split(r"&&|;", line[4:]):
            words = shlex.split(command)
            if words[:2] == ["pip", "install"]:
                args += [w for w in words[2:] if not w.startswith("-")]
    return args


def test_manifest_is_a_rayservice_with_the_local_application():
    manifest = _manifest()
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
    local = yaml.safe_load(CONFIG.read_text())["applications"]
    cluster = _serve_config()["applications"]
    assert [a["name"] for a in cluster] == [a["name"] for a in local]
    for here, there in zip(local, cluster):
        assert there["import_path"] == here["import_path"] == "entmtp_vllm.ray_serve:build_app"
        assert there["route_prefix"] == here["route_prefix"]
        assert there["args"]["entmtp"] == here["args"]["entmtp"]
        assert there["args"] == {**here["args"], **GPU_ONLY_ARGS}
        RayServeArgs.model_validate(there["args"])  # the app's own settings model takes them


def test_cluster_listens_on_the_pod_and_replicas_run_on_gpu_workers():
    http = _serve_config()["http_options"]
    assert http["host"] == "0.0.0.0"
    cluster = _manifest()["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    (gpu_group,) = cluster["workerGroupSpecs"]
    (container,) = gpu_group["template"]["spec"]["containers"]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert container["image"] == head["image"]


def test_image_installs_pyprojects_pins():
    from packaging.requirements import Requirement

    installed = _pip_installed()
    ray = _pin("ray", "ray")
    assert ray in installed, installed
    # the image pins one vLLM release (one CUDA build), inside the range the `gpu` extra accepts
    (vllm,) = [arg for arg in installed if arg.startswith("vllm==")]
    assert Requirement(_requirement("gpu", "vllm")).specifier.contains(vllm.split("==")[1]), vllm
    assert _manifest()["spec"]["rayClusterConfig"]["rayVersion"] == ray.split("==")[1]
    dockerfile = DOCKERFILE.read_text()
    assert re.search(r"^FROM nvidia/cuda:12\.\S+", dockerfile, re.MULTILINE)
    assert re.search(r"^ENV VLLM_PLUGINS=entmtp\b", dockerfile, re.MULTILINE)
    assert ".[gpu,ray]" in installed  # the package itself, its other pins with it


def test_cluster_app_built_without_a_gpu_gets_gpu_settings(monkeypatch):
    """The head pod builds the app and has no GPU: `accelerator: gpu` keeps the CPU path out."""
    from entmtp_vllm.ray_serve import engine_settings, replicas_on_cpu

    monkeypatch.setattr("entmtp_vllm.serve_command.resolve_model", lambda model: model or "/models/fake")
    monkeypatch.setattr("entmtp_vllm.serve_command.on_cpu", lambda: True)
    args = RayServeArgs.model_validate(_serve_config()["applications"][0]["args"])
    assert not replicas_on_cpu(args)
    _, kwargs, _ = engine_settings(args)
    assert "enforce_eager" not in kwargs and "dtype" not in kwargs
    assert kwargs["kv_cache_memory_bytes"] == 268435456  # the config's own, on GPU too
    assert replicas_on_cpu(args.model_copy(update={"accelerator": "auto"}))
