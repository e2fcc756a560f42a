"""In-process tokens a second of one vLLM engine (no speculation, or EntMTP with the given
settings) on a prompt set at a fixed number of requests at a time: one JSON line per run.

One engine (VLLM_ENABLE_V1_MULTIPROCESSING=0, uniprocess executor), bf16, eager, `max_num_seqs`
= SEQS, the front door's thread setting expected in the environment (OMP_NUM_THREADS=2 on the
2-core machine): PROMPTS prompts of DATASET/SPLIT (default mt_bench/test), greedy, 128 tokens,
all submitted at once after a short warm-up (4 prompts, 16 tokens). Prints tok/s, engine steps
and their mean wall time, and for EntMTP the draft tokens verified / accepted, the prompt-lookup
tokens verified / accepted, EntMTP's own phases (ms a step) and its fitted step-cost model.

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_lookup_match/policy_ab.py METHOD PROMPTS SEQS [JSON]

METHOD: `none` (no speculation) or `entmtp` (JSON: EntMTP settings, e.g. a policy object).
Runs of one method move by several percent between runs (the step budget's online cost model
and gate follow the measured timings): compare methods over several alternating runs.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    args = sys.argv[1:]
    if len(args) not in (3, 4) or args[0] not in ("none", "entmtp") or not all(a.isdigit() and int(a) > 0 for a in args[1:3]):
        sys.exit(f"usage: policy_ab.py none|entmtp PROMPTS SEQS [JSON], got {args}")
    method, n, seqs = args[0], int(args[1]), int(args[2])
    try:
        settings = json.loads(args[3]) if len(args) == 4 else {}
    except json.JSONDecodeError as exc:
        sys.exit(f"policy_ab.py: JSON is not valid JSON ({exc.msg})")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.prompts import chat_text, load_prompts

    model = resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(model)
    dataset, split = os.environ.get("DATASET", "mt_bench"), os.environ.get("SPLIT", "test")
    prompts = [chat_text(tokenizer, p.text) for p in load_prompts(dataset, n=n, split=split)]
    extra = {}
    if method == "entmtp":
        extra = {"speculative_config": {"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5},
                 "additional_config": {"entmtp": settings}}
    llm = LLM(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=2048, max_num_seqs=seqs,
              kv_cache_memory_bytes=2 << 30, distributed_executor_backend="uni", **extra)
    llm.generate(prompts[:4], SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)  # warm-up
    engine, step_seconds = llm.llm_engine, []
    step = engine.step

    def timed_step():
        started = time.perf_counter()
        out = step()
        step_seconds.append(time.perf_counter() - started)
        return out

    engine.step = timed_step
    started = time.perf_counter()
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=128), use_tqdm=False)
    wall = time.perf_counter() - started
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    result = {"method": method, "dataset": f"{dataset}/{split}", "settings": settings, "seqs": seqs,
              "tok_s": round(tokens / wall, 2), "tokens": tokens, "steps": len(step_seconds),
              "step_ms": round(1e3 * sum(step_seconds) / len(step_seconds), 2)}
    if method == "entmtp":
        stats = llm.collective_rpc("entmtp_stats")[0]
        timed = max(1, stats["steps_timed"])
        result.update({
            "drafted": stats["drafted_nodes"], "accepted": stats["accepted_tokens"],
            "lookup_drafted": stats["lookup_proposed"], "lookup_accepted": stats["lookup_accepted"],
            "own_ms": {k: round(1e3 * v / timed, 3) for k, v in stats["overhead_seconds"].items()},
            "step_cost_ms": {k: round(v, 3) for k, v in stats["step_cost"].items() if k.endswith("_ms")},
        })
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
