"""vLLM's own load generator as the client of a comparison (`entmtp bench serve --compare
--client vllm`), so that the numbers do not depend on this project's client.

For every concurrency level `vllm_levels` runs

    vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --dataset-name custom
        --dataset-path PROMPTS.jsonl --skip-chat-template --max-concurrency C ...

against the server (the prompts are the comparison's own, written once as `{"prompt": text}`
lines; the server applies the chat template, as for every other client), reads the JSON result
vLLM writes, and turns it into a level in this package's format (`statistics.summarize_level`'s
keys), the server's `/metrics` deltas over the level included, so reports and ratios are the
same whichever client ran.
"""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path
from typing import Any

import httpx

from entmtp_vllm.bench.serve.client import fetch_metrics
from entmtp_vllm.bench.serve.config import CompareConfig
from entmtp_vllm.bench.serve.prometheus import acceptance_delta
from entmtp_vllm.bench.serve.statistics import RequestResult, level_outputs
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.serve_command import vllm_executable

PERCENTILES = (50, 90, 99)


def write_prompts(prompts: list[str], path: Path) -> Path:
    """The prompts as vLLM's custom dataset (one `{"prompt": text}` per line)."""
    path.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in prompts))
    return path


def vllm_command(config: CompareConfig, base_url: str, model: str, prompts_path: Path, count: int,
                 concurrency: int, result_dir: Path, result_name: str) -> list[str]:
    """The `vllm bench serve` command line of one level."""
    root = base_url.removesuffix("/v1")
    command = [
        vllm_executable(), "bench", "serve", "--backend", "openai-chat", "--base-url", root, "--endpoint", "/v1/chat/completions",
        "--model", model, "--dataset-name", "custom", "--dataset-path", str(prompts_path), "--skip-chat-template",
        "--num-prompts", str(count), "--max-concurrency", str(concurrency), "--custom-output-len", str(config.max_tokens),
        "--temperature", str(config.temperature), "--percentile-metrics", "ttft,tpot,itl",
        "--metric-percentiles", ",".join(str(p) for p in PERCENTILES), "--save-result", "--result-dir",
        str(result_dir), "--result-filename", result_name, "--disable-tqdm",
    ]
    if config.ignore_eos:
        command.append("--ignore-eos")
    if config.request_seed is not None:
        command += ["--extra-body", json.dumps({"seed": config.request_seed})]
    if config.keeps_outputs():
        command.append("--save-detailed")  # every request's output text, in the prompts' order
    return command


def _summary(result: dict[str, Any], metric: str) -> dict[str, float] | None:
    mean = result.get(f"mean_{metric}_ms")
    if mean is None:
        return None
    out = {"mean": float(mean)}
    for p in PERCENTILES:
        out[f"p{p}"] = float(result.get(f"p{p}_{metric}_ms", result.get(f"median_{metric}_ms") if p == 50 else 0.0))
    return out


def level_from_result(result: dict[str, Any], concurrency: int, acceptance: dict[str, Any] | None) -> dict[str, Any]:
    """A level in `summarize_level`'s format from vLLM's result JSON."""
    completed, failed = int(result.get("completed", 0)), int(result.get("failed", 0))
    errors = [e for e in result.get("errors", []) if e][:3] if isinstance(result.get("errors"), list) else []
    return {
        "concurrency": concurrency,
        "requests": completed + failed,
        "completed": completed,
        "failed": failed,
        "errors": errors,
        "wall_s": float(result.get("duration", 0.0)),
        "output_tokens": int(result.get("total_output_tokens", 0)),
        "output_tokens_per_s": float(result.get("output_throughput", 0.0)),
        "requests_per_s": float(result.get("request_throughput", 0.0)),
        "tokens_counted_from": "vllm bench serve",
        "ttft_ms": _summary(result, "ttft"),
        "tpot_ms": _summary(result, "tpot"),
        "itl_ms": _summary(result, "itl"),
        "acceptance": acceptance,
    }


def vllm_levels(config: CompareConfig, base_url: str, model: str, prompts: list[str], out: Path, label: str, log) -> list[dict[str, Any]]:
    """Every level of `config.concurrency` measured by `vllm bench serve` against `base_url`."""
    prompts_path = write_prompts(prompts, out / "prompts.jsonl")
    levels = []
    for concurrency in config.concurrency:
        name = f"vllm-bench-{label}-c{concurrency}.json"
        command = vllm_command(config, base_url, model, prompts_path, len(prompts), concurrency, out, name)
        before = _metrics(base_url)
        log(f"[{label}] vllm bench serve, concurrency {concurrency}")
        cpu = _children_cpu()
        done = subprocess.run(command, capture_output=True, text=True)
        cpu = _children_cpu() - cpu
        (out / f"{name.removesuffix('.json')}.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0 or not (out / name).is_file():
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            raise EntMTPError(f"vllm bench serve failed against {base_url} (exit {done.returncode}): " + " | ".join(tail))
        after = _metrics(base_url)
        result = json.loads((out / name).read_text())
        levels.append(level_from_result(result, concurrency, acceptance_delta(before, after)))
        levels[-1]["client_cpu_s"] = cpu  # vLLM's whole command, its ~15 s of imports included
        if config.keeps_outputs():
            levels[-1]["outputs"] = level_outputs(records_from_vllm(result, prompts)[0], prompts)
    return levels


def records_from_vllm(result: dict[str, Any], prompts: list[str] | None = None) -> tuple[list[RequestResult], float]:
    """vLLM's detailed result JSON (`--save-detailed`) as request records and its duration, so that
    its requests sum like this package's own client's (TPOT = (latency − TTFT) / (output tokens −
    1), as vLLM defines it); `prompts`: the prompts sent, in order (each record's prompt and text)."""
    keys = ("latencies", "ttfts", "itls", "output_lens", "errors")
    missing = [key for key in keys if key not in result]
    if missing:
        raise EntMTPError(f"vllm bench serve's result has no {', '.join(missing)} (was --save-detailed passed?)")
    records = []
    texts = result.get("generated_texts") or []
    for index, (latency, ttft, itl, tokens, error) in enumerate(zip(*(result[key] for key in keys))):
        ok = not error
        records.append(RequestResult(ok=ok, latency_s=float(latency), ttft_s=float(ttft) if ok else None,
                                     itl_s=[float(gap) for gap in itl], output_tokens=int(tokens or 0),
                                     tokens_from_usage=True, error=error or None,
                                     text=texts[index] if index < len(texts) else "",
                                     prompt=prompts[index] if prompts is not None and index < len(prompts) else None))
    return records, float(result["duration"])


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _metrics(base_url: str):
    import asyncio

    async def fetch():
        async with httpx.AsyncClient(timeout=30.0) as client:
            return await fetch_metrics(client, base_url)

    return asyncio.run(fetch())
