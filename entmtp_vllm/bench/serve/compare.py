"""A comparison run end to end (`run_compare`): every method's server started in turn, measured
at every concurrency level and stopped, in rounds whose server order rotates (`servers.round_order`);
or, with `interleave`, every server up at once and measured in turns (`interleave.py`)."""

from __future__ import annotations

import asyncio
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from entmtp_vllm.bench.serve.client import _bench_async, load_prompt_texts
from entmtp_vllm.bench.serve.config import CompareConfig
from entmtp_vllm.bench.serve.interleave import run_interleaved
from entmtp_vllm.bench.serve.interrupt import interrupt_on_sigterm
from entmtp_vllm.bench.serve.report import _out_dir
from entmtp_vllm.bench.serve.servers import entmtp_commands, round_order, start_server
from entmtp_vllm.bench.serve.statistics import compare_table, median_runs, round_ratios
from entmtp_vllm.bench.serve.vllm_client import vllm_levels
from entmtp_vllm.serve_command import ServeCommand


def run_compare(config: CompareConfig, progress: bool = True, log=print) -> dict[str, Any]:
    """Start each method's server in turn, run every level against it, stop it; compare.
    With `config.rounds` > 1 all of that is repeated, the order rotated each round."""
    from entmtp_vllm.model_store import resolve_model

    prompts = load_prompt_texts(config)  # fail on bad prompt options before any server starts
    model = resolve_model(config.model)
    out = _out_dir(config.out) if config.out else Path(tempfile.mkdtemp(prefix="entmtp-compare-"))
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    # EntMTP settings errors before any server starts; one command (one KV cache size) for all
    entmtp = entmtp_commands(config, model)
    for note in entmtp["entmtp"].notes:
        log(f"every server: {note}")
    with interrupt_on_sigterm():  # a stopped run stops its servers too
        if config.interleave:
            rounds = run_interleaved(config, entmtp, prompts, out, progress, log)
        else:
            rounds = [_sequential_round(config, entmtp, prompts, out, progress, log, r) for r in range(config.rounds)]
    runs = rounds[0]["runs"] if config.rounds == 1 else median_runs([entry["runs"] for entry in rounds])
    results = {
        "benchmark": "serve-compare",
        "config": config.model_dump(),
        "model": model,
        "num_prompts": len(prompts),
        "date": started,
        "runs": runs,
        "table": compare_table(runs),
    }
    if config.rounds > 1:
        results["rounds"] = rounds
        results["round_ratios"] = round_ratios(rounds)
    results["config"]["out"] = str(out)
    return results


def _sequential_round(config: CompareConfig, entmtp: dict[str, ServeCommand], prompts: list[str], out: Path, progress: bool,
                      log, round_index: int) -> dict[str, Any]:
    """One round of servers started, measured and stopped one after another, the order rotated."""
    order = round_order(list(config.methods), round_index)
    runs: dict[str, dict[str, Any]] = {}
    for method in order:
        if config.rounds > 1:
            log(f"round {round_index + 1}/{config.rounds}: {method}")
        runs[method] = _measure_server(config, entmtp, method, prompts, out, progress, log, round_index)
    # the table keeps the configured method order whatever the round's order
    runs = {method: runs[method] for method in config.methods}
    return {"order": order, "runs": runs, "table": compare_table(runs)}


def model_of(command: list[str]) -> str:
    """The model a `vllm serve MODEL ...` command serves (its served name when it sets one)."""
    if "--served-model-name" in command:
        return command[command.index("--served-model-name") + 1]
    return command[command.index("serve") + 1]


def _measure_server(
    config: CompareConfig, entmtp: dict[str, ServeCommand], method: str, prompts: list[str], out: Path, progress: bool, log,
    round_index: int,
) -> dict[str, Any]:
    """Start `method`'s server, run every level against it, stop it."""
    suffix = f"-r{round_index + 1}" if config.rounds > 1 else ""
    server = start_server(config, entmtp, method, out / f"server-{method}{suffix}.log", log)
    try:
        if config.client == "vllm":
            model = model_of(server.command.argv)
            levels = vllm_levels(config, server.base_url, model, prompts, out, f"{method}{suffix}", log)
        else:
            found = asyncio.run(_bench_async(config.bench_config(server.base_url), prompts, progress, label=method))
            model, levels = found["model"], found["levels"]
        return server.record(levels, model)
    finally:
        server.stop()
