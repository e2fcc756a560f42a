"""The Ray Serve app's settings (`deploy/ray/serve_config.yaml`, `entmtp_vllm.ray_serve`), no Ray
cluster and no model: the config's EntMTP settings pass the plugin's parser, the engine arguments
are `entmtp serve`'s, bad settings are one-line errors, a replica without the plugin is refused."""

from __future__ import annotations

import pytest
import yaml

from _ray_deploy import CONFIG

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.ray_serve import RayServeArgs, engine_settings, plugin_env, plugin_problem
from entmtp_vllm.vllm_plugin.config import ADDITIONAL_CONFIG_KEY, PROPOSER_CLASS, parse_config, resolve

FAKE_MODEL = "/models/fake"  # the config gives the KV cache size: no model file is read


@pytest.fixture()
def no_model(monkeypatch):
    """`build_serve_command` resolves the model; the settings checks need none."""
    monkeypatch.setattr("entmtp_vllm.serve_command.resolve_model", lambda model: model or FAKE_MODEL)


def _app_args() -> dict:
    config = yaml.safe_load(CONFIG.read_text())
    (app,) = config["applications"]
    assert app["import_path"] == "entmtp_vllm.ray_serve:build_app"
    assert config["http_options"]["host"] == "127.0.0.1"
    return app["args"]


def test_config_entmtp_settings_pass_the_plugin_parser(no_model):
    args = RayServeArgs.model_validate(_app_args())
    model, kwargs, _ = engine_settings(args, cpu=True)
    assert model == FAKE_MODEL
    speculative = kwargs["speculative_config"]
    assert speculative["model"] == PROPOSER_CLASS
    settings = parse_config(kwargs["additional_config"][ADDITIONAL_CONFIG_KEY])
    resolved = resolve(settings, speculative["num_speculative_tokens"])
    assert speculative["num_speculative_tokens"] == resolved.bank.max_nodes - 1
    # CPU-sized, as entmtp serve would run it, the config's engine arguments on top
    assert kwargs["enforce_eager"] is True
    assert kwargs["kv_cache_memory_bytes"] == 268435456
    assert kwargs["max_model_len"] == 1024


def test_engine_kwargs_override_and_gpu_keeps_vllm_defaults(no_model):
    args = RayServeArgs.model_validate({"engine_kwargs": {"dtype": "bfloat16", "kv_cache_memory_bytes": 2**28}})
    _, kwargs, notes = engine_settings(args, cpu=True)
    assert kwargs["dtype"] == "bfloat16" and not any("dtype" in note for note in notes)
    _, gpu, _ = engine_settings(RayServeArgs(), cpu=False)
    assert "enforce_eager" not in gpu and "kv_cache_memory_bytes" not in gpu and "dtype" not in gpu


@pytest.mark.parametrize("args, message", [
    ({"entmtp": {"bank": "no-such-bank:1,2"}}, "bank"),
    ({"entmtp": {"config": {"no_such_setting": 1}}}, "no_such_setting"),
    ({"entmtp": {"num_speculative_tokens": 1, "bank": "full:2,2"}}, "num_speculative_tokens"),
    ({"engine_kwargs": {"speculative_config": {"method": "ngram"}}}, "EntMTP sets it"),
    ({"engine_kwargs": {"model": "x"}}, "entmtp.model"),
])
def test_bad_settings_are_one_line_errors_before_deploying(no_model, args, message):
    with pytest.raises(EntMTPError) as error:
        engine_settings(RayServeArgs.model_validate(args), cpu=True)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_every_replica_allows_the_plugin():
    assert plugin_env({}) == {"VLLM_PLUGINS": "entmtp"}
    assert plugin_env({"VLLM_PLUGINS": "other"}) == {"VLLM_PLUGINS": "other,entmtp"}
    assert plugin_env({"VLLM_PLUGINS": "entmtp"}) == {"VLLM_PLUGINS": "entmtp"}


def test_a_replica_without_the_plugin_is_refused():
    assert plugin_problem({"VLLM_PLUGINS": "entmtp"}) is None
    assert plugin_problem({}) is None
    problem = plugin_problem({"VLLM_PLUGINS": "other"})
    assert problem is not None and "leaves out 'entmtp'" in problem


def test_build_app_refuses_a_bad_setting(no_model):
    pytest.importorskip("ray.serve.llm", reason="ray[serve] is not installed (pip install -e '.[ray]')")
    from entmtp_vllm.ray_serve import build_app

    with pytest.raises(EntMTPError, match="no_such_setting"):
        build_app({"entmtp": {"config": {"no_such_setting": 1}}})


@pytest.mark.parametrize("scaling, expected", [
    ({"num_replicas": 2}, {"num_replicas": 2}),
    ({"autoscaling_config": {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 4}},
     {"autoscaling_config": {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 4}}),
])
def test_llm_config_replicas_plugin_and_cpu_bundle(no_model, scaling, expected):
    pytest.importorskip("ray.serve.llm", reason="ray[serve] is not installed (pip install -e '.[ray]')")
    from entmtp_vllm.ray_serve import llm_config

    config = llm_config({**_app_args(), **scaling, "num_replicas": scaling.get("num_replicas"),
                         "runtime_env": {"env_vars": {"VLLM_PLUGINS": "other"}}}, cpu=True)
    deployment = {key: value for key, value in config.deployment_config.items() if key != "ray_actor_options"}
    assert deployment == expected
    assert config.deployment_config["ray_actor_options"] == {"num_cpus": 0}
    assert config.runtime_env["env_vars"]["VLLM_PLUGINS"] == "other,entmtp"
    assert config.placement_group_config == {"bundles": [{"CPU": 1}]}
    assert config.callback_config.callback_class == "entmtp_vllm.ray_serve:EntMTPReplicaCheck"
    assert config.callback_config.callback_kwargs == {"metrics_dir": None}
    assert config.engine_kwargs["speculative_config"]["model"] == PROPOSER_CLASS
