"""EntMTP on Ray Serve: `ray.serve.llm` replicas of the vLLM engine with the EntMTP plugin.

    serve run deploy/ray/serve_config.yaml          # Ray's own command (import path below)
    from entmtp_vllm.ray_serve import build_app      # from Python: serve.run(build_app({...}))

`build_app(args)` is a Serve application builder (`import_path: entmtp_vllm.ray_serve:build_app`).
Its settings go through the same `build_serve_command` as `entmtp serve`, so a replica's engine
gets exactly the arguments `entmtp serve` would pass to `vllm serve` (the speculative config,
`additional_config["entmtp"]`, and on CPU `--enforce-eager`, `--dtype float32` without native
bf16, a sized `--kv-cache-memory-bytes`), translated into `engine_kwargs` for Ray Serve LLM's
`LLMConfig`. A bad EntMTP setting raises the plugin's one-line `EntMTPError` while the app is
built, before any replica starts.

Every replica runs with `VLLM_PLUGINS` including `entmtp` (its `runtime_env`), and its start-up
callback (`EntMTPReplicaCheck`) refuses to start the engine when the plugin is not importable or
not allowed there: such a replica would otherwise serve without speculation.

This module imports no vLLM and only Ray's callback base class at import time (the settings part
works and is tested without Ray); it lives in the package because the code that builds and checks a replica must be
importable on every Ray node, as the plugin itself must be.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.serve_command import ServeOptions, build_serve_command
from entmtp_vllm.vllm_plugin.install import map_method

PLUGIN_NAME = "entmtp"
"""The EntMTP entry point in `vllm.general_plugins` (pyproject.toml)."""
PLUGIN_VALUE = "entmtp_vllm.vllm_plugin:register"
DEFAULT_MODEL_ID = "entmtp"
"""The model name clients send (`"model": ...`) when the app's args give none."""

_FLAG_OPTIONS = {"--enforce-eager"}
_JSON_OPTIONS = {"--speculative-config", "--additional-config"}
_INT_OPTIONS = {"--kv-cache-memory-bytes"}


class RayServeArgs(BaseModel):
    """The `args` of the Serve application (`serve_config.yaml`), all optional."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)

    model_id: str = DEFAULT_MODEL_ID
    """Served model name (what requests name in `"model"`)."""

    entmtp: ServeOptions = Field(default_factory=ServeOptions)
    """What `entmtp serve` takes (model, heads, bank, tree, policy, acceptance, config, dtype,
    eager, num_speculative_tokens); `vllm_args` are not used here: give `engine_kwargs`."""

    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Further vLLM engine arguments (`AsyncEngineArgs` names), over EntMTP's defaults."""

    num_replicas: int | str | None = None
    """Serve replicas (an int, or "auto"); None: 1 unless `autoscaling_config` is given."""

    autoscaling_config: dict[str, Any] | None = None
    """Serve autoscaling (`min_replicas`, `max_replicas`, `target_ongoing_requests`, ...)."""

    accelerator: Literal["auto", "cpu", "gpu"] = "auto"
    """Where the replicas' engines run. `auto`: as on the machine that builds the app (no CUDA
    device visible there: CPU). Give `gpu` on a cluster whose head node has no GPU (KubeRay: the
    app is built on the head, the replicas run on GPU workers), or `cpu` to force the CPU path."""

    num_cpus: float = Field(default=1, gt=0)
    """CPUs reserved per replica (its placement group bundle; the replica actor itself reserves
    none: vLLM's engine core and worker are processes under it, not Ray actors)."""

    ingress_num_cpus: float = Field(default=0, ge=0)
    """CPUs reserved by the OpenAI ingress replica (Serve's default, 1, would leave a 2-core
    machine no room for the engine)."""

    runtime_env: dict[str, Any] = Field(default_factory=dict)
    """Ray runtime_env of every replica; `VLLM_PLUGINS` gets `entmtp` added."""

    deployment_config: dict[str, Any] = Field(default_factory=dict)
    """Further Serve deployment options (over num_replicas / autoscaling_config)."""

    metrics_dir: str | None = None
    """A folder on each node: every replica sets `PROMETHEUS_MULTIPROC_DIR` to its own subfolder
    `replica-<host>-<pid>` before its engine starts, so that the `entmtp_` counters of its engine
    processes land there (`replica_metrics()` reads them, one snapshot per replica). None: the
    counters are kept in the engine's worker process only."""


def _kwarg_args(engine_kwargs: dict[str, Any]) -> list[str]:
    """`engine_kwargs` as `vllm serve` options, for the settings `build_serve_command` reads
    (the KV cache size, dtype, max length); the kwargs themselves reach the engine unchanged."""
    args: list[str] = []
    for key, value in engine_kwargs.items():
        if value is None or isinstance(value, (dict, list, bool)):
            continue
        args += ["--" + key.replace("_", "-"), str(value)]
    return args


def _argv_kwargs(argv: list[str]) -> dict[str, Any]:
    """The options `build_serve_command` added (after `vllm serve MODEL`) as `engine_kwargs`."""
    import json

    kwargs: dict[str, Any] = {}
    i = 3
    while i < len(argv):
        option = argv[i]
        key = option[2:].replace("-", "_")
        if option in _FLAG_OPTIONS:
            kwargs[key] = True
            i += 1
            continue
        value: Any = argv[i + 1]
        if option in _JSON_OPTIONS:
            value = json.loads(value)
        elif option in _INT_OPTIONS:
            value = int(value)
        kwargs[key] = value
        i += 2
    return kwargs


def plugin_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """`VLLM_PLUGINS` with `entmtp` in it (the caller's other plugins kept)."""
    current = (environ if environ is not None else os.environ).get("VLLM_PLUGINS")
    names = [name.strip() for name in (current or "").split(",") if name.strip()]
    if PLUGIN_NAME not in names:
        names.append(PLUGIN_NAME)
    return {"VLLM_PLUGINS": ",".join(names)}


def engine_settings(args: RayServeArgs, cpu: bool | None = None) -> tuple[str, dict[str, Any], list[str]]:
    """(model path, engine_kwargs, notes): what `entmtp serve` would run, as `LLMConfig` input
    (`cpu`: None follows `args.accelerator`). Raises `EntMTPError` (one line) for bad EntMTP settings."""
    cpu = replicas_on_cpu(args) if cpu is None else cpu
    if args.entmtp.vllm_args:
        raise EntMTPError("entmtp.vllm_args is not used on Ray Serve: give the vLLM options as engine_kwargs")
    for reserved in ("model", "served_model_name"):
        if reserved in args.engine_kwargs:
            raise EntMTPError(f"engine_kwargs.{reserved}: give the model as entmtp.model and its name as model_id")
    extra = _kwarg_args(args.engine_kwargs)
    # replicas get engine arguments, not the command's variables: vLLM's own CPU matrix multiply
    options = args.entmtp.model_copy(update={"vllm_args": extra, "in_process": False, "cpu_gemm": "vllm"})
    command = build_serve_command(options, cpu=cpu)
    added = command.argv[: len(command.argv) - len(extra)]
    kwargs = _argv_kwargs(added)
    # vLLM's own form of the proposer (`custom_class`): engine arguments may be validated before
    # the plugin's mapping of `"method": "entmtp"` runs in the replica
    kwargs["speculative_config"] = map_method(kwargs["speculative_config"], kwargs.get("additional_config"))
    for key in ("speculative_config", "additional_config"):
        if key in args.engine_kwargs:
            raise EntMTPError(f"engine_kwargs.{key}: EntMTP sets it; give EntMTP settings under entmtp (config, bank, ...)")
    kwargs.update(args.engine_kwargs)
    return added[2], kwargs, command.notes


def llm_config(args: RayServeArgs | dict[str, Any] | None = None, cpu: bool | None = None):
    """The Ray Serve LLM `LLMConfig` of one EntMTP model."""
    from ray.serve.llm import LLMConfig

    args = args if isinstance(args, RayServeArgs) else RayServeArgs.model_validate(args or {})
    cpu = replicas_on_cpu(args) if cpu is None else cpu
    model, engine_kwargs, notes = engine_settings(args, cpu)
    for note in notes:
        print(f"# {note}", flush=True)
    runtime_env = dict(args.runtime_env)
    env_vars = {**runtime_env.get("env_vars", {})}
    env_vars.update(plugin_env(env_vars if "VLLM_PLUGINS" in env_vars else None))
    runtime_env["env_vars"] = env_vars
    deployment: dict[str, Any] = {}
    if args.autoscaling_config is not None:
        deployment["autoscaling_config"] = dict(args.autoscaling_config)
        if args.num_replicas is not None:
            deployment["num_replicas"] = args.num_replicas
    else:
        deployment["num_replicas"] = 1 if args.num_replicas is None else args.num_replicas
    deployment["ray_actor_options"] = {"num_cpus": 0}
    deployment.update(args.deployment_config)
    config: dict[str, Any] = dict(
        model_loading_config={"model_id": args.model_id, "model_source": model},
        engine_kwargs=engine_kwargs,
        runtime_env=runtime_env,
        deployment_config=deployment,
        callback_config={
            "callback_class": "entmtp_vllm.ray_serve:EntMTPReplicaCheck",
            "callback_kwargs": {"metrics_dir": args.metrics_dir},
        },
    )
    if cpu:
        config["accelerator_config"] = {"kind": "cpu"}
        config["placement_group_config"] = {"bundles": [{"CPU": args.num_cpus}]}
    return LLMConfig(**config)


def build_app(args: RayServeArgs | dict[str, Any] | None = None):
    """Serve application builder: one EntMTP model behind Ray Serve's OpenAI-compatible routes."""
    from ray.serve.llm import build_openai_app

    args = args if isinstance(args, RayServeArgs) else RayServeArgs.model_validate(args or {})
    return build_openai_app({
        "llm_configs": [llm_config(args)],
        "ingress_deployment_config": {"ray_actor_options": {"num_cpus": args.ingress_num_cpus}},
    })


def replicas_on_cpu(args: RayServeArgs) -> bool:
    """Whether the replicas' engines run on CPU: `args.accelerator`, or for `auto` whether this
    process sees no CUDA device."""
    if args.accelerator != "auto":
        return args.accelerator == "cpu"
    from entmtp_vllm.serve_command import on_cpu

    return on_cpu()


def plugin_problem(environ: dict[str, str] | None = None) -> str | None:
    """Why vLLM would not load the EntMTP plugin in this process (None: it would)."""
    from importlib.metadata import entry_points

    environ = dict(os.environ) if environ is None else environ
    allowed = environ.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN_NAME not in [name.strip() for name in allowed.split(",")]:
        return f"VLLM_PLUGINS={allowed!r} leaves out {PLUGIN_NAME!r}: vLLM would not load the EntMTP plugin"
    found = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == PLUGIN_NAME]
    if not found:
        return (f"no vllm.general_plugins entry point named {PLUGIN_NAME!r}: the entmtp-vllm package is not "
                "installed in this replica's environment")
    try:
        found[0].load()
        import entmtp_vllm.vllm_plugin.install  # noqa: F401 - what register() imports
    except Exception as exc:  # noqa: BLE001 - reported as the reason
        return f"the EntMTP plugin ({found[0].value}) does not import: {type(exc).__name__}: {exc}"
    return None


try:  # the replica's start-up check is a Ray Serve LLM callback when Ray is installed
    from ray.llm._internal.common.callbacks.base import CallbackBase as _CallbackBase
except Exception:  # noqa: BLE001 - Ray (or its LLM part) absent: the settings part still works
    _CallbackBase = object


REPLICA_METRICS_PREFIX = "replica-"


class EntMTPReplicaCheck(_CallbackBase):  # type: ignore[misc, valid-type]
    """Runs in every replica before its engine starts: no EntMTP plugin, no engine. With a
    `metrics_dir`, gives the replica's engine processes their own Prometheus folder."""

    async def on_before_node_init(self) -> None:
        problem = plugin_problem()
        if problem is not None:
            raise EntMTPError(f"EntMTP replica on {socket.gethostname()} (pid {os.getpid()}): {problem}")
        base = self.kwargs.get("metrics_dir")
        if base:
            folder = Path(base) / f"{REPLICA_METRICS_PREFIX}{socket.gethostname()}-{os.getpid()}"
            folder.mkdir(parents=True, exist_ok=True)
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)


def replica_metrics(metrics_dir: str | Path) -> dict[str, str]:
    """{replica folder name: its Prometheus text} for the replicas that wrote under `metrics_dir`
    on this node (the `entmtp_` series and vLLM's own multiprocess ones)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    texts: dict[str, str] = {}
    for folder in sorted(Path(metrics_dir).glob(f"{REPLICA_METRICS_PREFIX}*")):
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(folder))
        texts[folder.name] = generate_latest(registry).decode()
    return texts
