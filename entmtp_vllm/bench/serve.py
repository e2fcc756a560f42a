"""Online benchmark: load-test an OpenAI-compatible server, level by level of concurrency.

`run_serve_bench(config)` sends streaming requests (chat completions by default) built from
prompt sets, with `concurrency` requests in flight at a time, once per concurrency level. Each
prompt is sent once per level, or, with `duration`, prompts are sent cyclically until that many
seconds have passed (soak tests). Per level it reports, from client-side timings:

- TTFT: send → first streamed token text (or the end, when the answer has no text); ITL: gaps between streamed chunks that carry text;
  TPOT per request: (latency − TTFT) / (output tokens − 1); mean / p50 / p90 / p99 in ms;
- output tok/s (output tokens / wall time of the level), requests/s, completed and failed counts
  (a failed request never stops the run; the first few error messages are kept);
- output tokens come from the server's `usage` (`stream_options.include_usage`); a server that
  does not send it falls back to counting streamed chunks (with speculative decoding a chunk can
  carry several tokens, so that undercounts);
- when `<server>/metrics` exposes them, the speculative-decoding counters over the level:
  vLLM's `vllm:spec_decode_num_drafts` / `_num_draft_tokens` / `_num_accepted_tokens`
  (mean acceptance length = 1 + accepted / drafts) and every `entmtp_` series (counter deltas,
  gauge values at the end; tree usage by tree name).

`run_compare(config)` starts servers itself, one after another (vLLM without speculation, vLLM's
`ngram`, EntMTP through `entmtp serve`'s command builder), runs every level against each and
reports throughput and TPOT ratios against the run without speculation.

Results are JSON-ready dicts; `write_report` / `write_compare_report` write JSON, Markdown and a
PNG plot.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.serve_command import ServeCommand, ServeOptions, build_serve_command

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
DEFAULT_CONCURRENCY = (1, 4, 16)
MAX_ERROR_MESSAGES = 5
"""Error messages kept per level (all failures are counted)."""
PERCENTILES = (50, 90, 99)
COMPARE_METHODS = ("vllm", "ngram", "entmtp")
BASELINE = "vllm"
"""The method every ratio of a comparison is taken against (no speculation)."""

SPEC_SERIES = {
    "num_drafts": "vllm:spec_decode_num_drafts",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
}
PER_POSITION_SERIES = "vllm:spec_decode_num_accepted_tokens_per_pos"
ENTMTP_PREFIX = "entmtp_"

# Which command-line flag each config field comes from (for one-line errors).
_FLAGS = {
    "concurrency": "--concurrency",
    "num_prompts": "--num-prompts",
    "max_tokens": "--max-tokens",
    "temperature": "--temperature",
    "duration": "--duration",
    "request_timeout": "--request-timeout",
    "warmup": "--warmup",
    "health_timeout": "--health-timeout",
    "datasets": "--dataset",
    "base_url": "--base-url",
    "methods": "--methods",
    "num_speculative_tokens": "--num-speculative-tokens",
}


# ---------------------------------------------------------------------------------------- config


class _Model(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


class ServeBenchConfig(_Model):
    """One load test against one OpenAI-compatible server."""

    base_url: str = DEFAULT_BASE_URL
    """The server's OpenAI API root (ends in `/v1`); `/metrics` is looked up beside it (the URL
    without `/v1`)."""

    model: str | None = None
    """Model name sent with each request; None: the first model the server lists at `/v1/models`."""

    datasets: list[str] = Field(default_factory=lambda: ["mt_bench"], min_length=1)
    """Prompt sets (`entmtp data list`); the prompts of all of them are used, in order."""

    num_prompts: int | None = Field(default=32, ge=1)
    """Prompts per set (None: all of them)."""

    seed: int = 123
    """Subsampling seed of the prompt sets."""

    split: str = "all"
    """Stable split of the prompt sets (all, train, calib, test)."""

    category: str | None = None
    """Keep one category (mt_bench, spec_bench)."""

    data_path: str | None = None
    """Local JSONL file of the prompt set (gsm8k, spec_bench)."""

    concurrency: list[int] = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY), min_length=1)
    """Concurrency levels: requests in flight at once; the levels run one after another."""

    max_tokens: int = Field(default=128, ge=1)
    """Maximum new tokens per request."""

    temperature: float = Field(default=0.0, ge=0.0)
    """Sampling temperature sent with each request (0: greedy)."""

    ignore_eos: bool = False
    """Ask the server to generate `max_tokens` tokens whatever the model says (vLLM's
    `ignore_eos` extra parameter; other servers may refuse it)."""

    duration: float | None = Field(default=None, gt=0)
    """Seconds per level: keep sending prompts cyclically until then (a soak test); None: each
    prompt once per level."""

    chat: bool = True
    """Chat completions (the server applies the chat template); False: plain completions with
    the prompt text as is."""

    warmup: int = Field(default=1, ge=0)
    """Requests sent (and left out of every number) before the first level."""

    request_timeout: float = Field(default=600.0, gt=0)
    """Seconds a request may take before it counts as failed."""


class CompareConfig(ServeBenchConfig):
    """A comparison: the same load test against servers this tool starts, one after another."""

    model: str | None = None
    """Model folder or hub id every server serves; None: the embedded SmolLM2."""

    methods: list[Literal["vllm", "ngram", "entmtp"]] = Field(
        default_factory=lambda: list(COMPARE_METHODS), min_length=1
    )
    """Servers to run, in this order: `vllm` (no speculation, the ratios' baseline), `ngram`
    (vLLM's prompt lookup), `entmtp`."""

    server_args: list[str] = Field(default_factory=list)
    """Extra `vllm serve` arguments for every server (e.g. `--dtype float32 --max-model-len 2048`)."""

    eager: bool = True
    """On CPU, pass `--enforce-eager` to every server (as `entmtp serve` does by default)."""

    in_process: bool = False
    """Run every server's engine core and worker inside its API server process
    (`ServeOptions.in_process`; `entmtp serve --in-process`). Off: vLLM's own process layout."""

    health_timeout: float = Field(default=600.0, gt=0)
    """Seconds a server may take to answer `/health` before the comparison fails."""

    host: str = "127.0.0.1"
    """Address the servers listen on (each on a free port)."""

    ngram_num_speculative_tokens: int = Field(default=4, ge=1)
    """`ngram`: draft tokens per step."""

    ngram_prompt_lookup_max: int = Field(default=4, ge=1)
    """`ngram`: longest n-gram matched in the context."""

    ngram_prompt_lookup_min: int = Field(default=2, ge=1)
    """`ngram`: shortest n-gram matched in the context."""

    heads: str | None = None
    """`entmtp`: heads folder (None: the shipped Hydra heads)."""

    bank: str | None = None
    """`entmtp`: bank file, choices JSON or tree shape (None: `entmtp serve`'s default)."""

    tree: str | None = None
    """`entmtp`: keep only this tree of the bank."""

    policy: str | None = None
    """`entmtp`: policy string (None: the bank's own)."""

    acceptance: Literal["greedy", "typical", "lossless"] | None = None
    """`entmtp`: acceptance rule for sampled requests (None: the plugin's default)."""

    num_speculative_tokens: int | None = Field(default=None, ge=1)
    """`entmtp`: vLLM's draft budget (None: the largest tree's nodes minus the root)."""

    entmtp_config: str | None = None
    """`entmtp`: further EntMTP settings as a JSON object (`entmtp serve --config`)."""

    rounds: int = Field(default=1, ge=1)
    """Times every server is started and measured. Round r runs the methods rotated by r - 1
    places (vllm, ngram, entmtp; then ngram, entmtp, vllm; ...), so that no server always runs
    first or last. With more than one round the main table shows, per method and level, the
    round with the median output tok/s, and a second table lists every round."""

    out: str | None = None
    """Folder for the server logs (None: a temporary folder, kept)."""


def make_config(cls: type[ServeBenchConfig], **values: Any) -> ServeBenchConfig:
    """`cls(**values)`, with validation problems as one-line `EntMTPError`s naming the flag."""
    try:
        config = cls(**values)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field_name = str(first["loc"][0]) if first["loc"] else "config"
        where = _FLAGS.get(field_name, "--" + field_name.replace("_", "-"))
        value = values.get(field_name)
        problem = first["msg"]
        if field_name in ("concurrency", "datasets", "methods") and isinstance(value, list) and not value:
            problem = "needs at least one value"
        raise EntMTPError(f"{where}: {problem} (got {value!r})") from None
    for level in config.concurrency:
        if level < 1:
            raise EntMTPError(f"--concurrency: every level must be at least 1 (got {level})")
    if len(set(config.concurrency)) != len(config.concurrency):
        raise EntMTPError(f"--concurrency lists a level twice: {config.concurrency}")
    if isinstance(config, CompareConfig):
        if len(set(config.methods)) != len(config.methods):
            raise EntMTPError(f"--methods lists a server twice: {config.methods}")
        if config.ngram_prompt_lookup_min > config.ngram_prompt_lookup_max:
            raise EntMTPError("ngram prompt_lookup_min must not exceed prompt_lookup_max")
    return config


def parse_int_list(text: str, flag: str = "--concurrency") -> list[int]:
    """`"1,4,16"` → `[1, 4, 16]`; empty lists, non-integers and values below 1 are errors."""
    parts = [part.strip() for part in str(text).split(",")]
    if not any(parts):
        raise EntMTPError(f"{flag} needs at least one value, e.g. {flag} 1,4,16")
    values = []
    for part in parts:
        if not part:
            raise EntMTPError(f"{flag}: empty value in {text!r}; write e.g. 1,4,16")
        try:
            value = int(part)
        except ValueError:
            raise EntMTPError(f"{flag}: {part!r} is not an integer") from None
        if value < 1:
            raise EntMTPError(f"{flag}: every value must be at least 1 (got {value})")
        values.append(value)
    return values


# ----------------------------------------------------------------------------------- statistics


@dataclass
class RequestResult:
    """Client-side record of one streamed request."""

    ok: bool
    latency_s: float
    """Send → end of the stream (or → the error)."""
    ttft_s: float | None = None
    """Send → first chunk carrying text (or the final chunk, when no text came at all)."""
    itl_s: list[float] = field(default_factory=list)
    """Gaps between consecutive chunks carrying text."""
    output_tokens: int = 0
    tokens_from_usage: bool = False
    """Whether `output_tokens` is the server's count (else: text chunks counted)."""
    prompt_tokens: int | None = None
    error: str | None = None
    text: str = ""

    @property
    def tpot_s(self) -> float | None:
        """(latency − TTFT) / (output tokens − 1); None for fewer than two tokens."""
        if not self.ok or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default); `values` must not be empty."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize_ms(values_s: list[float]) -> dict[str, float] | None:
    """mean / p50 / p90 / p99 in milliseconds of durations in seconds (None: no values)."""
    if not values_s:
        return None
    out = {"mean": 1000.0 * sum(values_s) / len(values_s)}
    for q in PERCENTILES:
        out[f"p{q}"] = 1000.0 * percentile(values_s, q)
    return out


def summarize_level(
    results: list[RequestResult],
    wall_s: float,
    concurrency: int,
    acceptance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One concurrency level's numbers from its requests' records and its wall time."""
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    errors: list[str] = []
    for r in failed:
        if r.error and r.error not in errors and len(errors) < MAX_ERROR_MESSAGES:
            errors.append(r.error)
    tokens = sum(r.output_tokens for r in done)
    from_usage = [r.tokens_from_usage for r in done]
    counted = "usage" if from_usage and all(from_usage) else "chunks" if not any(from_usage) else "mixed"
    itl = [gap for r in done for gap in r.itl_s]
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "completed": len(done),
        "failed": len(failed),
        "errors": errors,
        "wall_s": wall_s,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / wall_s if wall_s > 0 else 0.0,
        "requests_per_s": len(done) / wall_s if wall_s > 0 else 0.0,
        "tokens_counted_from": counted if done else None,
        "ttft_ms": summarize_ms([r.ttft_s for r in done if r.ttft_s is not None]),
        "tpot_ms": summarize_ms([t for t in (r.tpot_s for r in done) if t is not None]),
        "itl_ms": summarize_ms(itl),
        "latency_ms": summarize_ms([r.latency_s for r in done]),
        "acceptance": acceptance,
    }


# ----------------------------------------------------------------------------- Prometheus text

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')

Labels = tuple[tuple[str, str], ...]


@dataclass
class MetricsSnapshot:
    """The samples of one `/metrics` page."""

    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    """(sample name, sorted labels) → value."""
    types: dict[str, str] = field(default_factory=dict)
    """Family name → counter / gauge / histogram / … (from `# TYPE`; names without `_total`)."""

    def series(self, family: str) -> dict[Labels, float]:
        """Samples of a counter or gauge family (`name` or `name_total`), by labels."""
        out: dict[Labels, float] = {}
        for (name, labels), value in self.samples.items():
            if name == family or name == family + "_total":
                out[labels] = out.get(labels, 0.0) + value
        return out

    def total(self, family: str) -> float | None:
        """Sum of a family over its label sets; None when the page does not have it."""
        found = self.series(family)
        return sum(found.values()) if found else None

    def kind(self, family: str) -> str | None:
        return self.types.get(family) or self.types.get(family + "_total")

    def families(self, prefix: str) -> list[str]:
        """Counter / gauge family names starting with `prefix` (`_total` stripped), sorted."""
        names = {_family_name(name) for name, _ in self.samples if name.startswith(prefix)}
        return sorted(name for name in names if not name.endswith("_created"))


def _family_name(sample_name: str) -> str:
    return sample_name[: -len("_total")] if sample_name.endswith("_total") else sample_name


def _unescape(value: str) -> str:
    return value.replace("\\\\", "\0").replace('\\"', '"').replace("\\n", "\n").replace("\0", "\\")


def parse_prometheus(text: str) -> MetricsSnapshot:
    """Parse Prometheus' text exposition format (what vLLM's `/metrics` serves). Unparseable
    lines are skipped; `_created` samples are left out."""
    snapshot = MetricsSnapshot()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                snapshot.types[_family_name(parts[2])] = parts[3].strip()
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name = match["name"]
        if name.endswith("_created"):
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels: Labels = ()
        if match["labels"]:
            labels = tuple(sorted((k, _unescape(v)) for k, v in _LABEL.findall(match["labels"])))
        snapshot.samples[(name, labels)] = snapshot.samples.get((name, labels), 0.0) + value
    return snapshot


def _label_key(labels: Labels, drop: tuple[str, ...] = ("engine", "model_name", "pid")) -> str:
    kept = [(k, v) for k, v in labels if k not in drop]
    if not kept:
        return ""
    if len(kept) == 1:
        return kept[0][1]
    return ",".join(f"{k}={v}" for k, v in kept)


def acceptance_delta(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> dict[str, Any] | None:
    """Speculative-decoding numbers between two `/metrics` snapshots (None: no such series).

    Counters are differences (after − before); `entmtp_` gauges are their values after."""
    if after is None:
        return None
    before = before or MetricsSnapshot()
    out: dict[str, Any] = {}
    spec_present = False
    for key, family in SPEC_SERIES.items():
        end = after.total(family)
        if end is not None:
            spec_present = True
        out[key] = (end or 0.0) - (before.total(family) or 0.0)
    if spec_present:
        drafts, drafted, accepted = out["num_drafts"], out["num_draft_tokens"], out["num_accepted_tokens"]
        out["mean_acceptance_length"] = 1.0 + accepted / drafts if drafts > 0 else None
        out["draft_acceptance_rate"] = accepted / drafted if drafted > 0 else None
        per_pos_after = after.series(PER_POSITION_SERIES)
        per_pos_before = before.series(PER_POSITION_SERIES)
        by_position: dict[int, float] = {}
        for labels, value in per_pos_after.items():
            position = dict(labels).get("position")
            if position is not None and position.isdigit():
                by_position[int(position)] = by_position.get(int(position), 0.0) + value - per_pos_before.get(labels, 0.0)
        out["acceptance_rate_per_position"] = (
            [by_position[p] / drafts for p in sorted(by_position)] if by_position and drafts > 0 else None
        )
    else:
        out = {key: None for key in SPEC_SERIES}
        out.update(mean_acceptance_length=None, draft_acceptance_rate=None, acceptance_rate_per_position=None)

    entmtp: dict[str, Any] = {}
    for family in after.families(ENTMTP_PREFIX):
        short = family[len(ENTMTP_PREFIX):]
        kind = after.kind(family)
        end_series = after.series(family)
        start_series = before.series(family)
        values = {
            _label_key(labels): value if kind == "gauge" else value - start_series.get(labels, 0.0)
            for labels, value in end_series.items()
        }
        if set(values) == {""}:
            entmtp[short] = values[""]
        else:
            entmtp[short] = {k: v for k, v in sorted(values.items())}
    out["entmtp"] = entmtp or None
    usage = entmtp.get("tree_steps")
    out["tree_usage"] = usage if isinstance(usage, dict) else None
    if not spec_present and not entmtp:
        return None
    return out


# ------------------------------------------------------------------------------------ requests


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
    extra_body = {"ignore_eos": True} if config.ignore_eos else None
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
    )


async def run_level(
    client, config: ServeBenchConfig, model: str, prompts: list[str], concurrency: int, progress: bool, desc: str = ""
) -> tuple[list[RequestResult], float]:
    """All requests of one level: (records, wall seconds from the first send to the last end)."""
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
                if time.perf_counter() >= deadline:
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


async def _bench_async(config: ServeBenchConfig, prompts: list[str], progress: bool, label: str = "") -> dict[str, Any]:
    import httpx
    from openai import AsyncOpenAI

    limits = httpx.Limits(max_connections=max(config.concurrency) + 8, max_keepalive_connections=max(config.concurrency) + 8)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(config.request_timeout, connect=30.0)) as http:
        model = config.model
        if model is None:
            models = await list_models(http, config.base_url)
            if not models:
                raise EntMTPError(f"the server at {config.base_url} lists no model; pass --model")
            model = models[0]
        client = AsyncOpenAI(base_url=config.base_url, api_key=_api_key(), max_retries=0, http_client=http)
        warmup = []
        for i in range(config.warmup):
            warmup.append(await stream_request(client, config, model, prompts[i % len(prompts)]))
        if warmup and not any(r.ok for r in warmup):
            raise EntMTPError(f"every warm-up request to {config.base_url} failed: {warmup[0].error}")
        levels = []
        for concurrency in config.concurrency:
            before = await fetch_metrics(http, config.base_url)
            results, wall = await run_level(
                client, config, model, prompts, concurrency, progress,
                desc=f"{label + ' ' if label else ''}concurrency {concurrency}",
            )
            after = await fetch_metrics(http, config.base_url)
            levels.append(summarize_level(results, wall, concurrency, acceptance_delta(before, after)))
    return {"model": model, "levels": levels}


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
        "num_prompts": len(prompts),
        "date": started,
        "levels": found["levels"],
    }


# ------------------------------------------------------------------------------------- reports


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _stat(summary: dict[str, float] | None, key: str) -> float | None:
    return None if summary is None else summary.get(key)


def markdown_report(results: dict[str, Any]) -> str:
    """A run's levels as Markdown tables: latencies, then acceptance (when the server has it)."""
    cfg = results["config"]
    mode = "chat" if cfg["chat"] else "completions"
    amount = f"{cfg['duration']:g} s per level" if cfg.get("duration") else f"{results['num_prompts']} prompts per level"
    lines = [
        f"Serve benchmark — `{results['model']}` at {results['base_url']}; {', '.join(cfg['datasets'])}, {amount}, "
        f"max {cfg['max_tokens']} tokens, T={cfg['temperature']}, {mode}; {results['date']}",
        "",
        "| concurrency | ok | failed | output tok/s | req/s | TTFT mean / p50 / p90 / p99 (ms) | "
        "TPOT mean / p50 / p90 / p99 (ms) | ITL mean / p50 / p90 / p99 (ms) | τ |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def four(summary):
        if summary is None:
            return "–"
        return " / ".join(f"{summary[k]:.1f}" for k in ("mean", "p50", "p90", "p99"))

    for level in results["levels"]:
        acc = level.get("acceptance") or {}
        lines.append(
            f"| {level['concurrency']} | {level['completed']} | {level['failed']} | {level['output_tokens_per_s']:.2f} | "
            f"{level['requests_per_s']:.3f} | {four(level['ttft_ms'])} | {four(level['tpot_ms'])} | "
            f"{four(level['itl_ms'])} | {_fmt(acc.get('mean_acceptance_length'), 3)} |"
        )
    if any(level.get("acceptance") for level in results["levels"]):
        lines += [
            "",
            "| concurrency | drafts | draft tokens | accepted | mean acceptance length | acceptance rate | tree usage |",
            "|---:|---:|---:|---:|---:|---:|---|",
        ]
        for level in results["levels"]:
            acc = level.get("acceptance")
            if not acc:
                continue
            usage = acc.get("tree_usage") or {}
            usage_text = ", ".join(f"`{name}` {count:g}" for name, count in usage.items()) or "–"
            lines.append(
                f"| {level['concurrency']} | {_fmt(acc.get('num_drafts'), 0)} | {_fmt(acc.get('num_draft_tokens'), 0)} | "
                f"{_fmt(acc.get('num_accepted_tokens'), 0)} | {_fmt(acc.get('mean_acceptance_length'), 3)} | "
                f"{_fmt(acc.get('draft_acceptance_rate'), 3)} | {usage_text} |"
            )
    failures = [(level["concurrency"], error) for level in results["levels"] for error in level["errors"]]
    if failures:
        lines += ["", "Errors (first few per level):"]
        lines += [f"- concurrency {c}: {error}" for c, error in failures]
    return "\n".join(lines) + "\n"


def _plot(series: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    """Two panels: output tok/s and TPOT p50 against concurrency, one line per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for name, levels in series.items():
        xs = [level["concurrency"] for level in levels]
        left.plot(xs, [level["output_tokens_per_s"] for level in levels], marker="o", label=name)
        tpot = [_stat(level["tpot_ms"], "p50") for level in levels]
        right.plot(xs, [float("nan") if t is None else t for t in tpot], marker="o", label=name)
    for ax, ylabel in ((left, "output tokens / s"), (right, "TPOT p50 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ticks = sorted({level["concurrency"] for levels in series.values() for level in levels})
        ax.set_xticks(ticks, [str(t) for t in ticks])
    if len(series) > 1:
        left.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _out_dir(out_dir: str | os.PathLike[str]) -> Path:
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EntMTPError(f"cannot create output folder {out}: {exc.strerror or exc}") from None
    return out


def write_report(results: dict[str, Any], out_dir: str | os.PathLike[str], stem: str = "serve") -> dict[str, Path]:
    """`<stem>.json`, `<stem>.md` and `<stem>.png` in `out_dir` (created)."""
    out = _out_dir(out_dir)
    paths = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md", "png": out / f"{stem}.png"}
    paths["json"].write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_report(results), encoding="utf-8")
    _plot({results["model"]: results["levels"]}, paths["png"], f"{results['model']} — {', '.join(results['config']['datasets'])}")
    return paths


# ------------------------------------------------------------------------------------ compare


def compare_table(runs: dict[str, dict[str, Any]], baseline: str = BASELINE) -> list[dict[str, Any]]:
    """One row per (concurrency level, method): throughput, TPOT, their ratios to `baseline` at
    the same level (tok/s ratio > 1 and TPOT ratio < 1 are better), acceptance length."""
    base_levels = {level["concurrency"]: level for level in runs.get(baseline, {}).get("levels", [])}
    levels = sorted({level["concurrency"] for run in runs.values() for level in run["levels"]})
    rows = []
    for concurrency in levels:
        base = base_levels.get(concurrency)
        for method, run in runs.items():
            level = next((lv for lv in run["levels"] if lv["concurrency"] == concurrency), None)
            if level is None:
                continue
            tps = level["output_tokens_per_s"]
            tpot = _stat(level["tpot_ms"], "p50")
            base_tps = base["output_tokens_per_s"] if base else None
            base_tpot = _stat(base["tpot_ms"], "p50") if base else None
            acc = level.get("acceptance") or {}
            rows.append(
                {
                    "concurrency": concurrency,
                    "method": method,
                    "output_tokens_per_s": tps,
                    "tps_ratio": tps / base_tps if base_tps else None,
                    "tpot_p50_ms": tpot,
                    "tpot_ratio": tpot / base_tpot if tpot is not None and base_tpot else None,
                    "ttft_p50_ms": _stat(level["ttft_ms"], "p50"),
                    "mean_acceptance_length": acc.get("mean_acceptance_length"),
                    "completed": level["completed"],
                    "failed": level["failed"],
                }
            )
    return rows


def round_order(methods: list[str], round_index: int) -> list[str]:
    """The servers of round `round_index` (0-based): `methods` rotated left by that many places."""
    shift = round_index % len(methods)
    return methods[shift:] + methods[:shift]


def median_runs(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per method and level, the level of the round with the median output tok/s (the lower
    middle one for an even number of rounds), so that TPOT, TTFT and τ come from the same run."""
    methods = list(dict.fromkeys(method for runs in rounds for method in runs))
    merged: dict[str, dict[str, Any]] = {}
    for method in methods:
        runs = [runs[method] for runs in rounds if method in runs]
        levels = sorted({level["concurrency"] for run in runs for level in run["levels"]})
        chosen = []
        for concurrency in levels:
            found = [lv for run in runs for lv in run["levels"] if lv["concurrency"] == concurrency]
            found.sort(key=lambda lv: lv["output_tokens_per_s"])
            chosen.append({**found[(len(found) - 1) // 2], "rounds": len(found)})
        first = {key: value for key, value in runs[0].items() if key != "log"}  # one log per round: "logs"
        merged[method] = {**first, "levels": chosen, "logs": [run.get("log") for run in runs]}
    return merged


def round_ratios(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level and method (the baseline left out): each round's tok/s ratio to that round's
    baseline, and their median, min and max."""
    found: dict[tuple[int, str], list[float]] = {}
    for entry in rounds:
        for row in entry["table"]:
            if row["method"] != BASELINE and row["tps_ratio"] is not None:
                found.setdefault((row["concurrency"], row["method"]), []).append(row["tps_ratio"])
    return [
        {"concurrency": c, "method": m, "ratios": values, "median": statistics.median(values),
         "min": min(values), "max": max(values)}
        for (c, m), values in sorted(found.items())
    ]


def _rounds_markdown(results: dict[str, Any]) -> list[str]:
    """Every round's tok/s and ratio (to that round's baseline) per level and method."""
    rounds = results.get("rounds") or []
    if len(rounds) < 2:
        return []
    methods = results["config"]["methods"]
    lines = [
        "",
        f"{len(rounds)} rounds; the table above shows, per method and level, the round with the median output "
        "tok/s (its ratios are to the baseline's median round). Every round (tok/s, and in brackets the ratio "
        f"to `{BASELINE}` of the same round):",
        "",
        "| round | order | concurrency | " + " | ".join(methods) + " |",
        "|---:|---|---:|" + "---:|" * len(methods),
    ]
    for number, entry in enumerate(rounds, start=1):
        by = {(row["concurrency"], row["method"]): row for row in entry["table"]}
        for concurrency in sorted({row["concurrency"] for row in entry["table"]}):
            cells = [
                f"{by[concurrency, m]['output_tokens_per_s']:.2f} ({_fmt(by[concurrency, m]['tps_ratio'], 3)})"
                if (concurrency, m) in by else "–"
                for m in methods
            ]
            lines.append(f"| {number} | {', '.join(entry['order'])} | {concurrency} | " + " | ".join(cells) + " |")
    spread = results.get("round_ratios") or round_ratios(rounds)
    if spread:
        lines += ["", "Ratio to no speculation over the rounds (median, min–max):", ""]
        lines += [f"- concurrency {r['concurrency']}, `{r['method']}`: {r['median']:.3f} ({r['min']:.3f}–{r['max']:.3f})"
                  for r in spread]
    return lines


def compare_markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    lines = [
        f"Serve comparison — `{results['model']}`; {', '.join(cfg['datasets'])}, {results['num_prompts']} prompts per "
        f"level, max {cfg['max_tokens']} tokens, T={cfg['temperature']}, {'chat' if cfg['chat'] else 'completions'}; "
        f"server args `{shlex.join(cfg['server_args']) or '(none)'}`; {results['date']}",
        "",
        f"Ratios are against `{BASELINE}` (no speculation) at the same concurrency: tok/s ratio > 1 and TPOT ratio < 1 "
        "are better.",
        "",
        "| concurrency | method | output tok/s | tok/s ratio | TPOT p50 (ms) | TPOT ratio | TTFT p50 (ms) | τ | ok | failed |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["table"]:
        lines.append(
            f"| {row['concurrency']} | {row['method']} | {row['output_tokens_per_s']:.2f} | {_fmt(row['tps_ratio'], 3)} | "
            f"{_fmt(row['tpot_p50_ms'])} | {_fmt(row['tpot_ratio'], 3)} | {_fmt(row['ttft_p50_ms'])} | "
            f"{_fmt(row['mean_acceptance_length'], 3)} | {row['completed']} | {row['failed']} |"
        )
    lines += _rounds_markdown(results)
    rounds = results.get("rounds") or [{"runs": results["runs"]}]
    for number, entry in enumerate(rounds, start=1):
        where = f" (round {number})" if len(rounds) > 1 else ""
        for method, run in entry["runs"].items():
            errors = [(lv["concurrency"], e) for lv in run["levels"] for e in lv["errors"]]
            if errors:
                lines += ["", f"Errors of `{method}`{where}:"] + [f"- concurrency {c}: {e}" for c, e in errors]
    return "\n".join(lines) + "\n"


def write_compare_report(results: dict[str, Any], out_dir: str | os.PathLike[str], stem: str = "compare") -> dict[str, Path]:
    out = _out_dir(out_dir)
    paths = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md", "png": out / f"{stem}.png"}
    paths["json"].write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    paths["markdown"].write_text(compare_markdown(results), encoding="utf-8")
    _plot(
        {method: run["levels"] for method, run in results["runs"].items()},
        paths["png"],
        f"{Path(results['model']).name} — {', '.join(results['config']['datasets'])}, max {results['config']['max_tokens']} tokens",
    )
    return paths


# -------------------------------------------------------------------------------- server process


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ServerProcess:
    """A server started as a subprocess in its own process group, its output in a log file.

    `wait_healthy()` polls `/health`; `stop()` sends SIGINT, waits, then kills the group."""

    def __init__(self, command: list[str], log_path: Path, base_url: str, env: dict[str, str] | None = None, name: str = "server"):
        self.command = command
        self.log_path = Path(log_path)
        self.base_url = base_url
        self.name = name
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self._log.write(("$ " + shlex.join(command) + "\n").encode())
        self._log.flush()
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )

    def _died(self, what: str) -> EntMTPError:
        return EntMTPError(
            f"{self.name} server {what}; its log is {self.log_path}. Last lines:\n{log_tail(self.log_path)}"
        )

    def wait_healthy(self, timeout: float = 600.0, poll: float = 1.0) -> None:
        import httpx

        url = server_root(self.base_url) + "/health"
        deadline = time.monotonic() + timeout
        while True:
            code = self.process.poll()
            if code is not None:
                raise self._died(f"exited with status {code} before answering {url}")
            try:
                if httpx.get(url, timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise self._died(f"did not answer {url} within {timeout:g} s (stopped)")
            time.sleep(poll)

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGINT, up to `grace` seconds to exit, then SIGKILL to the whole process group."""
        process = self.process
        if process.poll() is None:
            try:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        try:  # children (the engine core, its workers) left behind
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if not self._log.closed:
            self._log.close()
        return process.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _entmtp_command(config: CompareConfig, model: str) -> ServeCommand:
    """`vllm serve` with EntMTP, built by `entmtp serve`'s own command builder."""
    return build_serve_command(
        ServeOptions(
            model=model, heads=config.heads, bank=config.bank, tree=config.tree, policy=config.policy,
            acceptance=config.acceptance, config=config.entmtp_config,
            num_speculative_tokens=config.num_speculative_tokens, eager=config.eager,
            in_process=config.in_process, vllm_args=list(config.server_args),
        )
    )


def _strip_option(command: list[str], option: str) -> list[str]:
    out, skip = [], False
    for part in command:
        if skip:
            skip = False
            continue
        if part == option:
            skip = True
            continue
        if part.startswith(option + "="):
            continue
        out.append(part)
    return out


def server_commands(config: CompareConfig, entmtp: ServeCommand, host: str, port: int) -> dict[str, ServeCommand]:
    """The command line of each method's server. All share one base (the EntMTP command
    without its speculation options), so model, dtype, eager, KV cache size, process layout and
    extra arguments are identical."""
    plain = _strip_option(_strip_option(entmtp.argv, "--speculative-config"), "--additional-config")
    ngram = plain + [
        "--speculative-config",
        json.dumps(
            {
                "method": "ngram",
                "num_speculative_tokens": config.ngram_num_speculative_tokens,
                "prompt_lookup_max": config.ngram_prompt_lookup_max,
                "prompt_lookup_min": config.ngram_prompt_lookup_min,
            }
        ),
    ]
    where = ["--host", host, "--port", str(port)]
    commands = {"vllm": plain + where, "ngram": ngram + where, "entmtp": entmtp.argv + where}
    return {method: ServeCommand(commands[method], dict(entmtp.env), list(entmtp.notes)) for method in config.methods}


def run_compare(config: CompareConfig, progress: bool = True, log=print) -> dict[str, Any]:
    """Start each method's server in turn, run every level against it, stop it; compare.
    With `config.rounds` > 1 all of that is repeated, the order rotated each round."""
    from entmtp_vllm.model_store import resolve_model

    prompts = load_prompt_texts(config)  # fail on bad prompt options before any server starts
    model = resolve_model(config.model)
    out = _out_dir(config.out) if config.out else Path(tempfile.mkdtemp(prefix="entmtp-compare-"))
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    # EntMTP settings errors before any server starts; one command (one KV cache size) for all
    entmtp = _entmtp_command(config, model)
    for note in entmtp.notes:
        log(f"every server: {note}")
    rounds: list[dict[str, Any]] = []
    for round_index in range(config.rounds):
        order = round_order(list(config.methods), round_index)
        runs: dict[str, dict[str, Any]] = {}
        for method in order:
            if config.rounds > 1:
                log(f"round {round_index + 1}/{config.rounds}: {method}")
            runs[method] = _measure_server(config, entmtp, method, prompts, out, progress, log, round_index)
        # the table keeps the configured method order whatever the round's order
        runs = {method: runs[method] for method in config.methods}
        rounds.append({"order": order, "runs": runs, "table": compare_table(runs)})
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


def _measure_server(
    config: CompareConfig, entmtp: ServeCommand, method: str, prompts: list[str], out: Path, progress: bool, log,
    round_index: int,
) -> dict[str, Any]:
    """Start `method`'s server, run every level against it, stop it."""
    port = free_port(config.host)
    built = server_commands(config, entmtp, config.host, port)[method]
    command = built.argv
    base_url = f"http://{config.host}:{port}/v1"
    metrics_dir = tempfile.mkdtemp(prefix=f"entmtp-prometheus-{method}-")
    env = {**os.environ, **built.env, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    suffix = f"-r{round_index + 1}" if config.rounds > 1 else ""
    log_path = out / f"server-{method}{suffix}.log"
    log(f"[{method}] starting: {built.shell()}  (log: {log_path})")
    t0 = time.monotonic()
    server = ServerProcess(command, log_path, base_url, env=env, name=method)
    try:
        server.wait_healthy(config.health_timeout)
        log(f"[{method}] healthy after {time.monotonic() - t0:.0f} s")
        bench_config = ServeBenchConfig(**{
            key: getattr(config, key) for key in ServeBenchConfig.model_fields if key not in ("base_url", "model")
        }, base_url=base_url, model=None)
        found = asyncio.run(_bench_async(bench_config, prompts, progress, label=method))
        return {"command": command, "env": built.env, "log": str(log_path), "levels": found["levels"], "served_model": found["model"]}
    finally:
        server.stop()
        shutil.rmtree(metrics_dir, ignore_errors=True)

