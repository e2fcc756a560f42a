"""A comparison with every server up at once, taking turns (`entmtp bench serve --compare
--interleave W`).

Started one after another, each server meets the machine as it is during its own minutes; on a
small shared machine a slow spell of a few minutes moves one server's rate by 20% and every
ratio with it. Here every method's server is started once and kept up (an idle vLLM server
takes ~2% of a core), and each level's prompts are sent in turns: W × concurrency prompts to one
server, the same prompts to the next, and so on, the order rotated every turn
(`turn_order`). Each method's level is then summed over its turns (tokens over the sum of its
turns' wall times, every request's TTFT / TPOT / ITL), so the methods are compared over the same
prompts measured seconds apart, and a slow spell falls on all of them alike.

What that changes, said in the report:
- every turn ends by draining its batch, in every method alike (W waves of the concurrency keep
  it short against the turn);
- rounds do not restart the servers: round r repeats every level's turns with the order rotated
  r more places;
- the servers share the machine's memory, so the KV cache size given to all of them is sized
  for 1/N of it (N servers), unless the server arguments give one.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entmtp_vllm.bench.serve.client import level_metrics, openai_client, run_level, warm_up
from entmtp_vllm.bench.serve.config import CompareConfig, ServeBenchConfig
from entmtp_vllm.bench.serve.prometheus import acceptance_delta
from entmtp_vllm.bench.serve.servers import MethodServer, round_order, start_server
from entmtp_vllm.bench.serve.statistics import RequestResult, compare_table, level_outputs, summarize_level
from entmtp_vllm.bench.serve.vllm_bench_process import VllmBenchProcess
from entmtp_vllm.bench.serve.vllm_client import records_from_vllm, vllm_command, write_prompts
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.serve_command import ServeCommand


def turns(prompts: list[str], concurrency: int, waves: int) -> list[list[str]]:
    """`prompts` cut into turns of `waves` × `concurrency` prompts (the last one shorter)."""
    size = max(1, waves * concurrency)
    return [prompts[start:start + size] for start in range(0, len(prompts), size)]


def single_turn_levels(concurrency: list[int], num_prompts: int, waves: int) -> list[int]:
    """The levels whose prompts all fit in one turn: there each server serves the whole level
    after the other, so the methods are not paired within it (a smaller W, or more prompts,
    splits it)."""
    return [level for level in concurrency if max(1, waves * level) >= num_prompts]


def turn_order(methods: list[str], round_index: int, turn_index: int) -> list[str]:
    """The servers of one turn: `methods` rotated left by round + turn places, so that over a
    level no server always goes first and each round starts where the last one did not."""
    return round_order(methods, round_index + turn_index)


@dataclass
class _Server:
    """One method's server of an interleaved comparison and what its client needs."""

    server: MethodServer
    config: ServeBenchConfig
    """The load test against it."""
    model: str = ""

    @property
    def method(self) -> str:
        return self.server.method


def run_interleaved(config: CompareConfig, entmtp: dict[str, ServeCommand], prompts: list[str], out: Path,
                    progress: bool, log) -> list[dict[str, Any]]:
    """Every method's server started once, every round's levels measured in turns; the rounds
    (`{"order", "runs", "table", "turns"}` each), as `compare.run_compare` lists them."""
    whole = single_turn_levels(list(config.concurrency), len(prompts), config.interleave)
    if whole:
        log(f"interleave: at concurrency {', '.join(map(str, whole))} all {len(prompts)} prompts are one turn, so each "
            "server serves that level after the other, not paired within it; a smaller --interleave splits it")
    servers: list[_Server] = []
    runner = VllmBenchProcess(out / "vllm-bench-process.log") if config.client == "vllm" else None
    try:
        for method in config.methods:
            server = start_server(config, entmtp, method, out / f"server-{method}.log", log)
            servers.append(_Server(server, config.bench_config(server.base_url)))
        for server in servers:
            server.model = asyncio.run(_warm_up(server.config, prompts))
        rounds = []
        for round_index in range(config.rounds):
            rounds.append(_round(config, servers, prompts, out, round_index, progress, log, runner))
        return rounds
    finally:
        if runner is not None:
            runner.close()
        for server in servers:
            server.server.stop()


async def _warm_up(config: ServeBenchConfig, prompts: list[str]) -> str:
    """The served model's name, after `config.warmup` requests (none of them counted)."""
    import httpx

    async with httpx.AsyncClient(timeout=httpx.Timeout(config.request_timeout, connect=30.0)) as http:
        return await warm_up(http, openai_client(http, config.base_url), config, prompts)


def _round(config: CompareConfig, servers: list[_Server], prompts: list[str], out: Path, round_index: int,
           progress: bool, log, runner: VllmBenchProcess | None) -> dict[str, Any]:
    by_method = {server.method: server for server in servers}
    levels: dict[str, list[dict[str, Any]]] = {server.method: [] for server in servers}
    turn_counts = {}
    for concurrency in config.concurrency:
        chunks = turns(prompts, concurrency, config.interleave)
        turn_counts[concurrency] = len(chunks)
        before = {server.method: asyncio.run(_metrics(server.config)) for server in servers}
        records: dict[str, list[RequestResult]] = {server.method: [] for server in servers}
        walls = dict.fromkeys(records, 0.0)
        cpu = dict.fromkeys(records, 0.0)  # the client's CPU seconds
        for turn_index, chunk in enumerate(chunks):
            order = turn_order(list(config.methods), round_index, turn_index)
            log(f"round {round_index + 1}/{config.rounds}, concurrency {concurrency}, turn {turn_index + 1}/{len(chunks)}: "
                + ", ".join(order))
            for method in order:
                server = by_method[method]
                tag = f"r{round_index + 1}-c{concurrency}-t{turn_index + 1}-{method}"
                if runner is not None:
                    done, wall, seconds = _vllm_turn(config, runner, server, chunk, concurrency, out, tag)
                else:
                    started = time.process_time()
                    done, wall = asyncio.run(_entmtp_turn(server, chunk, concurrency, progress, tag))
                    seconds = time.process_time() - started
                records[method] += done
                walls[method] += wall
                cpu[method] += seconds
        for server in servers:
            after = asyncio.run(_metrics(server.config))
            level = summarize_level(records[server.method], walls[server.method], concurrency,
                                    acceptance_delta(before[server.method], after))
            level["turns"] = len(chunks)
            level["client_cpu_s"] = cpu[server.method]
            if config.keeps_outputs():
                level["outputs"] = level_outputs(records[server.method], prompts)
            if config.client == "vllm":
                level["tokens_counted_from"] = "vllm bench serve"
            levels[server.method].append(level)
    runs = {server.method: server.server.record(levels[server.method], server.model) for server in servers}
    order = turn_order(list(config.methods), round_index, 0)
    return {"order": order, "runs": runs, "table": compare_table(runs), "turns": turn_counts}


async def _metrics(config: ServeBenchConfig):
    import httpx

    async with httpx.AsyncClient(timeout=30.0) as http:
        return await level_metrics(http, config)


async def _entmtp_turn(server: _Server, chunk: list[str], concurrency: int, progress: bool,
                       tag: str) -> tuple[list[RequestResult], float]:
    import httpx

    config = server.config
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(config.request_timeout, connect=30.0)) as http:
        return await run_level(openai_client(http, config.base_url), config, server.model, chunk, concurrency, progress,
                               desc=tag)


def _vllm_turn(config: CompareConfig, runner: VllmBenchProcess, server: _Server, chunk: list[str], concurrency: int,
               out: Path, tag: str) -> tuple[list[RequestResult], float, float]:
    """One turn by `vllm bench serve` (`--save-detailed`, so every request's record comes back):
    its records, its duration and the client's CPU seconds."""
    prompts_path = write_prompts(chunk, out / f"prompts-{tag}.jsonl")
    name = f"vllm-bench-{tag}.json"
    command = vllm_command(config, server.config.base_url, server.model, prompts_path, len(chunk), concurrency, out, name)
    if "--save-detailed" not in command:
        command.append("--save-detailed")
    cpu = runner.run(command[3:], out / f"vllm-bench-{tag}.log")  # the arguments after `vllm bench serve`
    if not (out / name).is_file():
        raise EntMTPError(f"vllm bench serve against {server.config.base_url} wrote no {out / name}")
    prompts_path.unlink()
    return *records_from_vllm(json.loads((out / name).read_text()), chunk), cpu
