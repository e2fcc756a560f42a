"""`entmtp serve`'s command line: out-of-range values are one line naming the flag, before
anything starts (the command itself: tests/test_serve_command.py; served: tests/vllm_plugin)."""

from __future__ import annotations

import pytest

from entmtp_vllm.cli.main import main


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--threads", "0"], "--threads: Input should be greater than or equal to 1 (got 0)"),
        (["--num-speculative-tokens", "0"], "--num-speculative-tokens: Input should be greater than or equal to 1 (got 0)"),
    ],
)
def test_out_of_range_values_are_one_line(argv, words, capsys):
    assert main(["serve", "--dry-run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"entmtp: error: {words}" and "Traceback" not in err
