"""Helpers of the vLLM plugin tests: engine settings, in-process engines, the cached reference.

Kept out of conftest.py so that test modules import them by a name no other test folder uses.
"""


from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# In-process engine with a small KV cache; set only while an engine is built (other test
# packages in the same session may start vLLM differently).
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}

MAX_TOKENS = 32
DTYPE = "float32"
MAX_MODEL_LEN = 1024
NUM_PER_SET = 12
HERE = Path(__file__).resolve().parent


def engine_kwargs(model: str) -> dict:
    return dict(
        model=model,
        dtype=DTYPE,
        enforce_eager=True,
        distributed_executor_backend="uni",
        max_model_len=MAX_MODEL_LEN,
        seed=0,
        gpu_memory_utilization=0.1,
    )


def make_llm(
    model: str,
    entmtp: dict | None = None,
    num_speculative_tokens: int = 6,
    proposer: str = "entmtp_vllm.EntMTP",
    **extra,
):
    """An in-process vLLM engine with EntMTP (entmtp settings) or without speculation (None)."""
    from vllm import LLM

    kwargs = {**engine_kwargs(model), **extra}
    if entmtp is not None:
        kwargs["speculative_config"] = {"model": proposer, "num_speculative_tokens": num_speculative_tokens}
        # Tests submit large batches: keep every request drafting unless a test sets a fallback.
        kwargs["additional_config"] = {"entmtp": {"batch_fallback": None, **entmtp}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: tests reach the drafter
        patch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
        return LLM(**kwargs)


def greedy_params(max_tokens: int = MAX_TOKENS):
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


def sampling_params(max_tokens: int, temperature: float = 0.0, seeds: list[int] | None = None, **extra):
    """One SamplingParams (greedy) or one per prompt, each with its own seed; `extra`: further
    SamplingParams fields (e.g. repetition_penalty)."""
    from vllm import SamplingParams

    if seeds is None:
        return SamplingParams(temperature=temperature, max_tokens=max_tokens, **extra)
    return [SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed, **extra) for seed in seeds]


def run_reference(request, job: dict, env: dict[str, str] | None = None) -> list[list[int]]:
    """Outputs of vLLM without speculation for `job` (see _reference.py), cached by content;
    `env`: variables the reference engine is built with (e.g. `ENTMTP_CPU_GEMM`)."""
    import vllm

    env = env or {}
    parts = [vllm.__version__, DTYPE, MAX_MODEL_LEN, job] + ([env] if env else [])
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(request.config.cache.mkdir("entmtp_vllm_reference"))
    out = folder / f"{key}.json"
    if not out.is_file():
        job_file = folder / f"{key}.job.json"
        job_file.write_text(json.dumps(job))
        subprocess.run(
            [sys.executable, str(HERE / "_reference.py"), str(job_file), str(out)],
            check=True,
            env={**ENGINE_ENV, **os.environ, **env, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
            timeout=1800,
        )
    return json.loads(out.read_text())


def generate_ids(llm, prompts: list[str], params) -> list[list[int]]:
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return [list(output.outputs[0].token_ids) for output in outputs]


def stats(llm) -> dict:
    return llm.collective_rpc("entmtp_stats")[0]

def assert_all_equal(got: list[list[int]], expected: list[list[int]]) -> None:
    differ = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert len(got) == len(expected)
    assert not differ, f"{len(differ)}/{len(got)} outputs differ from vLLM without speculation: {differ}"
