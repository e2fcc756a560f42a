"""The load test's client: streaming requests to an OpenAI-compatible server (`stream_request`),
`concurrency` of them in flight at a time (`run_level`), level after level with the server's
`/metrics` (or, for a Ray Serve app, its replicas' counters summed: `ray_metrics`) read around
each (`run_serve_bench`)."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import datetime, timezone
from typing import Any

from entmtp_vllm.bench.serve.config import ServeBenchConfig
from entmtp_vllm.bench.serve.prometheus import GENERATION_TOKENS, MetricsSnapshot, acceptance_delta, parse_prometheus
from entmtp_vllm.bench.serve.statistics import RequestResult, level_outputs, summarize_level
from entmtp_vllm.errors import EntMTPError


def metrics_url(base_url: str) -> str:
    """`http://host:port/v1` → `http://host:port/metrics`."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/metrics"


def server_root(base_url: str) -> str:
    return metrics_url(base_url)[: -len("/metrics")]


async def fetch_metrics(client, base_url: str) -> MetricsSnapshot | None:
    """The server's `/metrics` page parsed, or None when it has none (or is unreachable)."""
    try:
        response = await client.get(metrics_url(base_url), timeout=30.0)
    except Exception:
        return None
    if response.status_code != 200:
        return None
    return parse_prometheus(response.text)


async def level_metrics(client, config: ServeBenchConfig) -> MetricsSnapshot | None:
    """The counters a level's numbers are taken between: `config.metrics_from`'s source."""
    metrics_dir = config.ray_metrics_dir()
    if metrics_dir is None:
        return await fetch_metrics(client, config.base_url)
    from entmtp_vllm.bench.serve.ray_metrics import read_replicas

    return await asyncio.to_thread(read_replicas, metrics_dir)


def level_acceptance(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> dict[str, Any] | None:
    """`acceptance_delta`, and with several replicas' counters each replica's own (`replicas`)."""
    delta = acceptance_delta(before, after)
    if delta is not None and after is not None and after.replicas:
        from entmtp_vllm.bench.serve.ray_metrics import replica_deltas

        delta["replicas"] = replica_deltas(before, after)
    return delta


async def list_models(client, base_url: str) -> list[str]:
    url = base_url.rstrip("/") + "/models"
    try:
        response = await client.get(url, timeout=30.0)
        response.raise_for_status()
        data = response.json()
    except Exception as exc:
        raise EntMTPError(f"cannot list the server's models at {url} ({type(exc).__name__}: {exc}); "
                          "is the server up? pass --base-url, or --model") from None
    return [entry["id"] for entry in data.get("data", []) if isinstance(entry, dict) and "id" in entry]


def _chunk_text(chunk: Any, chat: bool) -> str:
    choices = getattr(chunk, "choices", None) or []
    if not choices:
        return ""
    choice = choices[0]
    if chat:
        delta = getattr(choice, "delta", None)
        return (getattr(delta, "content", None) or "") if delta is not None else ""
    return getattr(choice, "text", None) or ""


def _finished(chunk: Any) -> bool:
    choices = getattr(chunk, "choices", None) or []
    return bool(choices) and getattr(choices[0], "finish_reason", None) is not None


async def stream_request(client, config: ServeBenchConfig, model: str, prompt: str) -> RequestResult:
    """Send one streaming request; never raises (errors are recorded)."""
    extra_body = config.extra_body()
    common = dict(
        model=model,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=extra_body,
        timeout=config.request_timeout,
    )
    start = time.perf_counter()
    ttft = None
    last = None
    gaps: list[float] = []
    chunks = 0
    usage_tokens = None
    prompt_tokens = None
    pieces: list[str] = []
    try:
        if config.chat:
            stream = await client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **common)
        else:
            stream = await client.completions.create(prompt=prompt, **common)
        try:
            async for chunk in stream:
                now = time.perf_counter()
                usage = getattr(chunk, "usage", None)
                if usage is not None and getattr(usage, "completion_tokens", None) is not None:
                    usage_tokens = int(usage.completion_tokens)
                    prompt_tokens = getattr(usage, "prompt_tokens", None)
                text = _chunk_text(chunk, config.chat)
                if not text and ttft is None and _finished(chunk):
                    ttft = now - start  # the only token had no text (e.g. end of sequence)
                if text:
                    if ttft is None:
                        ttft = now - start
                    else:
                        gaps.append(now - last)
                    last = now
                    chunks += 1
                    pieces.append(text)
        finally:
            await stream.close()
    except Exception as exc:  # any failure is one failed request, never the end of the run
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return RequestResult(
            ok=False,
            latency_s=time.perf_counter() - start,
            error=f"{type(exc).__name__}: {message}"[:300],
            prompt=prompt,
        )
    latency = time.perf_counter() - start
    return RequestResult(
        ok=True,
        latency_s=latency,
        ttft_s=ttft,
        itl_s=gaps,
        output_tokens=usage_tokens if usage_tokens is not None else chunks,
        tokens_from_usage=usage_tokens is not None,
        prompt_tokens=prompt_tokens,
        text="".join(pieces),
        prompt=prompt,
    )


async def run_level(
    client, config: ServeBenchConfig, model: str, prompts: list[str], concurrency: int, progress: bool, desc: str = "",
    window_read: asyncio.Event | None = None,
) -> tuple[list[RequestResult], float]:
    """All requests of one level: (records, wall seconds from the first send to the last end).
    With `--duration`, the clients stop sending at the deadline, or once `window_read` is set
    when later (the window's counters are read while every client is still busy)."""
    from tqdm import tqdm

    results: list[RequestResult] = []
    total = None if config.duration else len(prompts)
    bar = tqdm(total=total, desc=desc or f"concurrency {concurrency}", unit="req", disable=not progress, leave=True)
    next_index = 0
    start = time.perf_counter()
    deadline = start + config.duration if config.duration else None

    async def worker() -> None:
        nonlocal next_index
        while True:
            if deadline is not None:
                if time.perf_counter() >= deadline and (window_read is None or window_read.is_set()):
                    return
            elif next_index >= len(prompts):
                return
            index = next_index
            next_index += 1
            result = await stream_request(client, config, model, prompts[index % len(prompts)])
            results.append(result)
            bar.update()
            if not result.ok:
                bar.set_postfix(failed=sum(not r.ok for r in results))

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        bar.close()
    return results, time.perf_counter() - start


def load_prompt_texts(config: ServeBenchConfig) -> list[str]:
    from entmtp_vllm.prompts import load_prompts

    texts: list[str] = []
    for dataset in config.datasets:
        for prompt in load_prompts(dataset, config.num_prompts, config.seed, config.split, config.category, config.data_path):
            texts.append(prompt.text)
    if not texts:
        raise EntMTPError(f"no prompts in {', '.join(config.datasets)}")
    return texts


def _api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or "EMPTY"


def openai_client(http, base_url: str):
    """The OpenAI client the load test sends its requests with, over `http` (an httpx.AsyncClient)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=base_url, api_key=_api_key(), max_retries=0, http_client=http)


async def warm_up(http, client, config: ServeBenchConfig, prompts: list[str]) -> str:
    """The model to ask (`config.model`, else the first the server lists), after `config.warmup`
    requests that are not counted; one line when every one of them failed."""
    model = config.model
    if model is None:
        models = await list_models(http, config.base_url)
        if not models:
            raise EntMTPError(f"the server at {config.base_url} lists no model; pass --model")
        model = models[0]
    done = [await stream_request(client, config, model, prompts[i % len(prompts)]) for i in range(config.warmup)]
    if done and not any(r.ok for r in done):
        raise EntMTPError(f"every warm-up request to {config.base_url} failed: {done[0].error}")
    return model


async def _bench_async(config: ServeBenchConfig, prompts: list[str], progress: bool, label: str = "") -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=max(config.concurrency) + 8, max_keepalive_connections=max(config.concurrency) + 8)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(config.request_timeout, connect=30.0)) as http:
        client = openai_client(http, config.base_url)
        model = await warm_up(http, client, config, prompts)
        levels = []
        for concurrency in config.concurrency:
            before = await level_metrics(http, config)
            started, cpu = time.perf_counter(), time.process_time()
            window_read = asyncio.Event() if config.duration else None
            level = asyncio.create_task(run_level(
                client, config, model, prompts, concurrency, progress,
                desc=f"{label + ' ' if label else ''}concurrency {concurrency}", window_read=window_read,
            ))
            window = None
            if config.duration:  # the server's own count at the deadline, while every client is busy
                await asyncio.sleep(config.duration)
                sent = time.perf_counter()
                try:
                    at_deadline = await level_metrics(http, config)
                finally:
                    window_read.set()
                window = window_throughput(before, at_deadline, sent - started, time.perf_counter() - started)
            results, wall = await level
            cpu = time.process_time() - cpu  # this process: the client, and the window's reads
            after = await level_metrics(http, config)
            levels.append(summarize_level(results, wall, concurrency, level_acceptance(before, after), window))
            levels[-1]["client_cpu_s"] = cpu
            if config.keeps_outputs():
                levels[-1]["outputs"] = level_outputs(results, prompts)
    return {"model": model, "levels": levels}


def window_throughput(before: MetricsSnapshot | None, at_deadline: MetricsSnapshot | None,
                      sent: float, received: float) -> dict | None:
    """Output tokens per second over a `--duration` window, from the server's own counter
    (`vllm:generation_tokens`) at its start and at the deadline: every client is busy for the
    whole window, so this is the steady rate, without the drain of the requests still running at
    the deadline (up to one whole request at every client). None without that counter.

    `sent` / `received`: seconds from the level's start to sending the deadline's read and to its
    answer. The server read its counter somewhere in between (a busy server can take seconds to
    answer `/metrics`), so the window ends at the midpoint, and `read_s` (the read's duration)
    bounds the error of `seconds`."""
    counts = [None if snap is None else snap.total(GENERATION_TOKENS) for snap in (before, at_deadline)]
    seconds = (sent + received) / 2
    if None in counts or seconds <= 0:
        return None
    tokens = counts[1] - counts[0]
    return {"seconds": seconds, "read_s": received - sent, "output_tokens": tokens, "output_tokens_per_s": tokens / seconds}


def run_serve_bench(config: ServeBenchConfig, progress: bool = True, label: str = "") -> dict[str, Any]:
    """Every concurrency level against the server at `config.base_url`; a JSON-ready dict."""
    prompts = load_prompt_texts(config)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    found = asyncio.run(_bench_async(config, prompts, progress, label))
    return {
        "benchmark": "serve",
        "config": config.model_dump(),
        "model": found["model"],
        "base_url": config.base_url,
        "metrics_from": config.metrics_from,
        "num_prompts": len(prompts),
        "date": started,
        "levels": found["levels"],
    }
