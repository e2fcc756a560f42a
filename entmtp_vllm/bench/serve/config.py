"""What a serving benchmark run is: its settings (`ServeBenchConfig`, `CompareConfig`), checked
with one-line errors naming the command-line flag (`make_config`, `parse_int_list`)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from entmtp_vllm.config import CPU_IN_PROCESS, CPU_THREADS
from entmtp_vllm.errors import EntMTPError, flag_problem

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
DEFAULT_CONCURRENCY = (1, 4, 16)
COMPARE_METHODS = ("vllm", "ngram", "entmtp")
VARIANT_PREFIX = "entmtp-"
"""A comparison method `entmtp-LABEL` is the EntMTP server with the settings of variant LABEL."""
VARIANT_LABEL = re.compile(r"^[A-Za-z0-9_.]+$")
BASELINE = "vllm"
"""The method every ratio of a comparison is taken against (no speculation)."""
METRICS_FROM_SERVER = "server"
"""`metrics_from`: the server's own `/metrics` page."""
RAY_METRICS_PREFIX = "ray:"
"""`metrics_from`: `ray:<dir>`, the per-replica folders of a Ray Serve app's `metrics_dir`."""

# Which command-line flag each config field comes from (for one-line errors).
_FLAGS = {
    "concurrency": "--concurrency",
    "num_prompts": "--num-prompts",
    "max_tokens": "--max-tokens",
    "temperature": "--temperature",
    "request_seed": "--request-seed",
    "duration": "--duration",
    "request_timeout": "--request-timeout",
    "warmup": "--warmup",
    "health_timeout": "--health-timeout",
    "datasets": "--dataset",
    "base_url": "--base-url",
    "methods": "--methods",
    "entmtp_variants": "--variant",
    "num_speculative_tokens": "--num-speculative-tokens",
    "metrics_from": "--metrics-from",
    "threads": "--server-threads",
}


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

    request_seed: int | None = None
    """Seed sent with every request (vLLM's `seed`), so that sampled requests are reproducible;
    None: none sent. With `--compare`, greedy or seeded runs also compare every method's output
    with the baseline's, prompt by prompt (`same_outputs` in the table)."""

    ignore_eos: bool = False
    """Ask the server to generate `max_tokens` tokens whatever the model says (vLLM's
    `ignore_eos` extra parameter; other servers may refuse it)."""

    duration: float | None = Field(default=None, gt=0)
    """Seconds per level: keep sending prompts cyclically until then (a soak, or a steady-load
    measurement); None: each prompt once per level. Output tok/s is then the server's own count
    of generated tokens over the window (`vllm:generation_tokens`), while every client is busy:
    a fixed set of prompts sent once ends with a drain where fewer and fewer requests run, which
    at a concurrency near the number of prompts measures mostly the slowest request."""

    chat: bool = True
    """Chat completions (the server applies the chat template); False: plain completions with
    the prompt text as is."""

    warmup: int = Field(default=1, ge=0)
    """Requests sent (and left out of every number) before the first level."""

    request_timeout: float = Field(default=600.0, gt=0)
    """Seconds a request may take before it counts as failed."""

    metrics_from: str = Field(default=METRICS_FROM_SERVER, pattern=r"^(server|ray:.+)$")
    """Where the speculative-decoding counters are read, before and after every level. `server`:
    the server's `/metrics` (beside `base_url`). `ray:<dir>`: a Ray Serve app started with
    `metrics_dir: <dir>` (Serve's proxy serves no `/metrics`): every replica's folder under `<dir>`
    (`entmtp_vllm.ray_serve.replica_metrics`) is read and the counters summed over the replicas;
    gauges are kept per replica (a `replica` label); per level each replica's own accepted tokens
    and drafts are reported too. Only replicas that write under `<dir>` as seen from this machine
    count (one node, or a folder every node shares)."""

    def keeps_outputs(self) -> bool:
        """Whether each level keeps every prompt's output (greedy or seeded requests, each prompt
        sent once): outputs that another server must reproduce."""
        return (self.temperature == 0.0 or self.request_seed is not None) and self.duration is None

    def extra_body(self) -> dict[str, Any] | None:
        """vLLM's extra request fields this load test sends (`ignore_eos`, `seed`)."""
        extra: dict[str, Any] = {}
        if self.ignore_eos:
            extra["ignore_eos"] = True
        if self.request_seed is not None:
            extra["seed"] = self.request_seed
        return extra or None

    def ray_metrics_dir(self) -> str | None:
        """The folder of `metrics_from: ray:<dir>`; None when the counters come from `/metrics`."""
        if self.metrics_from.startswith(RAY_METRICS_PREFIX):
            return self.metrics_from[len(RAY_METRICS_PREFIX):]
        return None


class CompareConfig(ServeBenchConfig):
    """A comparison: the same load test against servers this tool starts, one after another."""

    model: str | None = None
    """Model folder or hub id every server serves; None: the embedded SmolLM2."""

    methods: list[str] = Field(default_factory=lambda: list(COMPARE_METHODS), min_length=1)
    """Servers to run, in this order: `vllm` (no speculation, the ratios' baseline), `ngram`
    (vLLM's prompt lookup), `entmtp`, and `entmtp-LABEL` for each of `entmtp_variants`."""

    entmtp_variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Further EntMTP servers, by label (letters, digits, `_`, `.`): method `entmtp-LABEL` is the
    `entmtp` server with these settings laid over `entmtp_config` (e.g. `{"bank": "chain4.json"}`),
    the same vLLM arguments and KV cache size, so that several EntMTP configurations meet the
    same baseline in one run (`--variant LABEL=JSON`)."""

    server_args: list[str] = Field(default_factory=list)
    """Extra `vllm serve` arguments for every server (e.g. `--dtype float32 --max-model-len 2048`)."""

    eager: bool = True
    """On CPU, pass `--enforce-eager` to every server (as `entmtp serve` does by default)."""

    in_process: bool = CPU_IN_PROCESS
    """On CPU, run every server's worker inside its engine core's process (`ServeOptions.in_process`;
    `entmtp serve --in-process`). Off: vLLM's own process layout. Default and why:
    `config.CPU_IN_PROCESS`."""

    threads: int | None = Field(default=CPU_THREADS, ge=1)
    """On CPU with `in_process`, torch's threads in every server's engine core
    (`ServeOptions.threads`; `entmtp serve --threads`). None: every core, unless OMP_NUM_THREADS is
    set. Default and why: `config.CPU_THREADS`."""

    cpu_gemm: Literal["packed", "vllm"] | None = None
    """On CPU, every server's matrix multiply (`ServeOptions.cpu_gemm`; `entmtp serve --cpu-gemm`):
    the choice is made once and given to all servers alike. None: automatic."""

    client: Literal["entmtp", "vllm"] = "entmtp"
    """Load generator: this package's streaming client, or vLLM's own `vllm bench serve`
    (`vllm_client.py`), whose results fill the same tables."""

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

    interleave: int = Field(default=0, ge=0)
    """0: each server started, measured and stopped in turn. W > 0: every server kept up at
    once and each level's prompts sent in turns of W × concurrency prompts, one server after
    another, the order rotating every turn (`interleave.py`), so the methods are measured over
    the same prompts seconds apart; rounds then repeat the turns without restarting servers."""

    out: str | None = None
    """Folder for the server logs (None: a temporary folder, kept)."""

    def bench_config(self, base_url: str) -> ServeBenchConfig:
        """The load test this comparison runs against one of its servers (at `base_url`, its
        model asked of the server)."""
        return ServeBenchConfig(**{
            key: getattr(self, key) for key in ServeBenchConfig.model_fields if key not in ("base_url", "model")
        }, base_url=base_url, model=None)


def make_config(cls: type[ServeBenchConfig], **values: Any) -> ServeBenchConfig:
    """`cls(**values)`, with validation problems as one-line `EntMTPError`s naming the flag."""
    try:
        config = cls(**values)
    except ValidationError as exc:
        field_name, where, problem = flag_problem(exc, _FLAGS)
        value = values.get(field_name)
        if field_name in ("concurrency", "datasets", "methods") and isinstance(value, list) and not value:
            problem = "needs at least one value"
        raise EntMTPError(f"{where}: {problem} (got {value!r})") from None
    for level in config.concurrency:
        if level < 1:
            raise EntMTPError(f"--concurrency: every level must be at least 1 (got {level})")
    if len(set(config.concurrency)) != len(config.concurrency):
        raise EntMTPError(f"--concurrency lists a level twice: {config.concurrency}")
    if isinstance(config, CompareConfig):
        if config.metrics_from != METRICS_FROM_SERVER:
            raise EntMTPError("--metrics-from: --compare reads the /metrics of the servers it starts; "
                              "ray:<dir> is for a Ray Serve endpoint given with --base-url")
        if len(set(config.methods)) != len(config.methods):
            raise EntMTPError(f"--methods lists a server twice: {config.methods}")
        for label in config.entmtp_variants:
            if not VARIANT_LABEL.match(label):
                raise EntMTPError(f"--variant {label!r}: a label takes letters, digits, '_' and '.' only")
        known = [*COMPARE_METHODS, *(VARIANT_PREFIX + label for label in config.entmtp_variants)]
        unknown = [method for method in config.methods if method not in known]
        if unknown:
            hint = "" if not unknown[0].startswith(VARIANT_PREFIX) else " (a variant needs --variant LABEL=JSON)"
            raise EntMTPError(f"--methods: unknown server {unknown[0]!r}; choose from {', '.join(known)}{hint}")
        if config.interleave and config.duration:
            raise EntMTPError("--interleave sends each level's prompts in turns; it does not combine with --duration")
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
