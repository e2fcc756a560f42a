"""`entmtp data list|show`."""

from __future__ import annotations

import json

import pytest

from entmtp_vllm.cli.main import main


def test_list_names_every_set(capsys, shared_data) -> None:
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("humaneval", "mt_bench", "sharegpt", "gsm8k", "spec_bench"):
        assert name in out
    assert "164 prompts" in out and "480 prompts" in out


def test_show_raw_json(capsys, shared_data) -> None:
    assert main(["data", "show", "spec_bench", "-n", "3", "--category", "math", "--raw", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3 and {r["category"] for r in rows} == {"math"}


@pytest.mark.slow
def test_show_applies_the_chat_template(capsys) -> None:
    assert main(["data", "show", "mt_bench", "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert "<|im_start|>user" in out and out.rstrip().endswith("<|im_start|>assistant")


def test_unknown_set_is_a_one_line_error(capsys) -> None:
    assert main(["data", "show", "nope", "--raw"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("entmtp: error: unknown prompt set 'nope'") and err.count("\n") == 1
