"""`entmtp serve`'s command builder: the raw `vllm serve` line, --config, one-line errors."""

from __future__ import annotations

import argparse
import json

import pytest

from entmtp_vllm.cli.serve_cmd import build_command
from entmtp_vllm.errors import EntMTPError



def _args(**overrides) -> argparse.Namespace:
    values = dict(model=None, heads=None, bank=None, tree=None, policy=None, acceptance=None, config=None,
                  num_speculative_tokens=None, dtype=None, eager=True, uniproc=True, dry_run=True, vllm_args=[])
    values.update(overrides)
    return argparse.Namespace(**values)


def _entmtp_settings(command: list[str]) -> dict:
    if "--additional-config" not in command:
        return {}
    return json.loads(command[command.index("--additional-config") + 1])["entmtp"]


def test_defaults_send_no_settings_and_the_shipped_banks_budget():
    command = build_command(_args())
    assert command[1] == "serve" and "--enforce-eager" in command
    spec = json.loads(command[command.index("--speculative-config") + 1])
    assert spec == {"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5}
    assert _entmtp_settings(command) == {}


def test_config_json_goes_over_the_options():
    command = build_command(_args(acceptance="typical", config='{"acceptance": "greedy", "batch_fallback": null}'))
    assert _entmtp_settings(command) == {"acceptance": "greedy", "batch_fallback": None}


@pytest.mark.parametrize(
    "config, words",
    [
        ("{bad", ["--config", "invalid JSON"]),
        ("[1]", ["--config", "JSON object"]),
        ('{"batch_fallback": {"max_batch": 0}}', ["batch_fallback.max_batch"]),
        ('{"bogus": 1}', ["bogus"]),
    ],
)
def test_bad_config_is_one_line(config, words):
    with pytest.raises(EntMTPError) as info:
        build_command(_args(config=config))
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "uniproc, vllm_args, expected",
    [
        (True, [], True),
        (False, [], False),
        (True, ["--", "--max-model-len", "2048"], True),
        (True, ["--", "-tp", "2"], False),  # several devices: vLLM's own executor
        (True, ["--tensor-parallel-size=2"], False),
        (True, ["--", "--distributed-executor-backend", "mp"], False),  # the user's choice, once
    ],
)
def test_uniproc_executor_unless_the_vllm_args_choose(uniproc, vllm_args, expected):
    command = build_command(_args(uniproc=uniproc, vllm_args=vllm_args))
    assert (command[command.index("--enforce-eager") + 1 : command.index("--enforce-eager") + 3]
            == ["--distributed-executor-backend", "uni"]) is expected
    assert command.count("--distributed-executor-backend") <= 1
