"""One vLLM engine inside this process, timed over a prompt set: the measurement in-process benchmark
scripts share (phase timers, policy A/B, budget statistics).

    llm = in_process_engine(seqs=16, method="entmtp", settings={"budget": {"gate": False}})
    prompts = chat_prompts(llm, "mt_bench", "test", 46)
    run = timed_generate(llm, prompts)          # greedy, 128 tokens, after a 4-prompt warm-up
    run.tok_s, run.engine_step_ms, run.entmtp["drafted_nodes"], run.phase_ms(), run.share()

The engine: `VLLM_ENABLE_V1_MULTIPROCESSING=0` and the uniprocess executor (scheduler, worker and
model in this process, so timers and profilers see all of it), eager, one KV cache size for every
method, bf16 unless told otherwise. The thread count is the environment's (the front door's
`OMP_NUM_THREADS`). Not a serving benchmark: no HTTP, no client, no engine-core process; what it
is for is comparing EntMTP's settings and code versions on identical engines, run after run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from entmtp_vllm.errors import EntMTPError

METHODS = ("none", "entmtp")
"""`none`: vLLM without speculation; `entmtp`: the plugin, with `settings` as its additional config."""


def in_process_engine(seqs: int, method: str = "entmtp", settings: dict | None = None, dtype: str = "bfloat16",
                      kv_cache_bytes: int = 2 << 30, max_model_len: int = 2048):
    """A `vllm.LLM` on the default model running at most `seqs` requests a step."""
    if method not in METHODS:
        raise EntMTPError(f"method must be one of {METHODS}, got {method!r}")
    if seqs <= 0:
        raise EntMTPError(f"seqs must be positive, got {seqs}")
    if settings and method != "entmtp":
        raise EntMTPError("EntMTP settings given for an engine without speculation")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.vllm_plugin.config import ADDITIONAL_CONFIG_KEY, PROPOSER_CLASS

    extra: dict[str, Any] = {}
    if method == "entmtp":
        # 5 drafts: what the front door passes for the default bank (its largest tree's drafts)
        extra = {"speculative_config": {"model": PROPOSER_CLASS, "num_speculative_tokens": 5},
                 "additional_config": {ADDITIONAL_CONFIG_KEY: dict(settings or {})}}
    return LLM(model=resolve_model(None), dtype=dtype, enforce_eager=True, max_model_len=max_model_len,
               max_num_seqs=seqs, kv_cache_memory_bytes=kv_cache_bytes, distributed_executor_backend="uni", **extra)


def chat_prompts(llm, dataset: str = "mt_bench", split: str | None = "test", n: int = 46) -> list[str]:
    """The first `n` prompts of `dataset`/`split`, each in the engine tokenizer's chat template."""
    from entmtp_vllm.prompts import chat_text, load_prompts

    tokenizer = llm.get_tokenizer()
    return [chat_text(tokenizer, p.text) for p in load_prompts(dataset, n=n, split=split)]


def _difference(after: Any, before: Any) -> Any:
    """Counters gained between two `entmtp_stats()` snapshots: numbers subtracted, dicts of
    numbers key by key; anything else (a string, a bool) as it is after."""
    if isinstance(after, dict):
        before = before if isinstance(before, dict) else {}
        return {k: _difference(v, before.get(k)) for k, v in after.items()}
    if isinstance(after, (int, float)) and not isinstance(after, bool):
        return after - (before if isinstance(before, (int, float)) and not isinstance(before, bool) else 0)
    return after


@dataclass
class TimedRun:
    """One timed generation over a prompt set."""

    tokens: int
    """Tokens generated."""
    wall_s: float
    """Wall seconds of the whole generation."""
    engine_step_seconds: list[float] = field(default_factory=list)
    """Wall seconds of each `LLMEngine.step` call (scheduling, forward, sampling, drafting)."""
    entmtp: dict | None = None
    """EntMTP's counters gained during the run (`entmtp_stats()`, after minus before); None
    without speculation. Its model states (`step_cost`, `lookup_rate`, `head_scale`) are those
    after minus before too: read them from `entmtp_after`."""
    entmtp_after: dict | None = None
    """`entmtp_stats()` at the end of the run."""

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def engine_step_ms(self) -> float:
        """Mean milliseconds of an engine step."""
        return 1e3 * sum(self.engine_step_seconds) / max(1, len(self.engine_step_seconds))

    @property
    def timed_steps(self) -> int:
        """Engine steps EntMTP timed (it times from `execute_model` to the end of `sample_tokens`)."""
        return max(1, self.entmtp["steps_timed"]) if self.entmtp else 0

    def per_step(self, counter: str) -> float:
        """One of EntMTP's counters per timed step."""
        return self.entmtp[counter] / self.timed_steps

    def phase_ms(self) -> dict[str, float]:
        """EntMTP's own milliseconds a timed step, by phase (plan, draft, verify, ...)."""
        return {k: 1e3 * v / self.timed_steps for k, v in self.entmtp["overhead_seconds"].items()}

    def share(self) -> float:
        """EntMTP's own time as a share of the steps it timed."""
        return sum(self.entmtp["overhead_seconds"].values()) / self.entmtp["step_seconds"]


def _entmtp_stats(llm) -> dict | None:
    """The plugin's counters; None for an engine without speculation (its worker is vLLM's own)."""
    if llm.llm_engine.vllm_config.speculative_config is None:
        return None
    return llm.collective_rpc("entmtp_stats")[0]


def warm_up_engine(llm, prompts: list[str], count: int = 4, temperature: float = 0.0) -> None:
    """Generate 16 tokens for each of the first `count` prompts (a caller that counts or profiles
    from here on calls this, then `timed_generate(..., warm_up=0)`)."""
    from vllm import SamplingParams

    llm.generate(prompts[:count], SamplingParams(temperature=temperature, max_tokens=16), use_tqdm=False)


def timed_generate(llm, prompts: list[str], temperature: float = 0.0, max_tokens: int = 128,
                   warm_up: int = 4) -> TimedRun:
    """Generate every prompt at once (the engine runs `max_num_seqs` of them a step) after a
    warm-up on the first `warm_up` prompts (`warm_up_engine`, same temperature), timing the whole
    generation and each engine step."""
    from vllm import SamplingParams

    if not prompts:
        raise EntMTPError("no prompts to time")
    if warm_up:
        warm_up_engine(llm, prompts, warm_up, temperature)
    engine = llm.llm_engine
    step, step_seconds = engine.step, []

    def timed_step():
        started = time.perf_counter()
        try:
            return step()
        finally:
            step_seconds.append(time.perf_counter() - started)

    before = _entmtp_stats(llm)
    engine.step = timed_step
    try:
        started = time.perf_counter()
        outputs = llm.generate(prompts, SamplingParams(temperature=temperature, max_tokens=max_tokens), use_tqdm=False)
        wall = time.perf_counter() - started
    finally:
        engine.step = step
    after = _entmtp_stats(llm)
    return TimedRun(tokens=sum(len(o.outputs[0].token_ids) for o in outputs), wall_s=wall,
                    engine_step_seconds=step_seconds, entmtp=None if after is None else _difference(after, before),
                    entmtp_after=after)
