"""Run one job on a CPU vLLM engine whose attention is vLLM's Triton backend under the Triton
interpreter (see `_triton_interpreter.py`); a script, run in a subprocess by
`test_gpu_path_engine.py` so that its patches of vLLM stay out of the test session.

    TRITON_INTERPRET=1 python _triton_engine.py JOB.json OUT.json

JOB: {"model", "prompts": [[token ids]], "max_tokens", "entmtp": null | {EntMTP settings},
"num_speculative_tokens", "oracle": [[reference outputs]] (the drafter's bigram table)}.
OUT: {"ids": [[generated token ids]], "stats": the proposer's counters or null, "backend": the
attention backend class of the first layer, "kernel_calls": how often each EntMTP kernel ran,
"warm_up_calls": how often before the first request, "warm_up_line": what the warm-up logged}.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(job_file: str, out_file: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    sys.path[:0] = [str(HERE), str(HERE.parent)]  # _triton_interpreter here, _oracle above
    import _triton_interpreter

    _triton_interpreter.enable()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    import _oracle

    calls = _count_kernel_calls()
    job = json.loads(Path(job_file).read_text())
    kwargs = dict(model=job["model"], skip_tokenizer_init=True, dtype="float32", enforce_eager=True, seed=0,
                  max_model_len=512, kv_cache_memory_bytes=2**26, distributed_executor_backend="uni")
    if job.get("entmtp") is not None:
        _oracle.TABLE = _oracle.bigram_table(job["oracle"])
        kwargs["speculative_config"] = {"model": "_oracle.OracleEntMTP",
                                        "num_speculative_tokens": job["num_speculative_tokens"]}
        kwargs["additional_config"] = {"entmtp": job["entmtp"]}
        kwargs["worker_cls"] = "_triton_interpreter.InterpretedGPUPathWorker"
    llm = LLM(**kwargs)
    warmed = dict(calls)  # the kernels launched before any request: the worker's warm-up
    warm_up_line = llm.collective_rpc(_warm_up_line)[0]
    params = SamplingParams(temperature=0.0, max_tokens=job["max_tokens"], ignore_eos=True)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in job["prompts"]], params, use_tqdm=False)
    stats = llm.collective_rpc("entmtp_stats")[0] if job.get("entmtp") is not None else None
    backend = llm.collective_rpc(_backend_name)[0]
    Path(out_file).write_text(json.dumps({
        "ids": [list(output.outputs[0].token_ids) for output in outputs], "stats": stats, "backend": backend,
        "kernel_calls": calls, "warm_up_calls": warmed, "warm_up_line": warm_up_line,
    }, default=str))


def _count_kernel_calls() -> dict[str, int]:
    """Count the calls of the EntMTP kernels the CUDA path uses (wrapped in place, so the
    plugin's default-kernel checks still see the module attribute)."""
    import entmtp_kernels

    calls = {"paged_tree_attention": 0, "compact_kv": 0}

    def counted(name, kernel):
        @functools.wraps(kernel)
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return kernel(*args, **kwargs)

        return wrapper

    for name in calls:
        setattr(entmtp_kernels, name, counted(name, getattr(entmtp_kernels, name)))
    return calls


def _warm_up_line(worker) -> str | None:
    """What the worker logged for its kernels' warm-up (None: it has none)."""
    return getattr(worker, "warm_up_line", None)


def _backend_name(worker) -> str:
    """The attention backend class of the engine's first attention group."""
    return worker.model_runner.attn_groups[0][0].backend.__name__


if __name__ == "__main__":
    main(*sys.argv[1:3])
