"""What the step budget drafted in one in-process vLLM engine, and what EntMTP's phases cost
(issue #19): one JSON line per run.

One engine (VLLM_ENABLE_V1_MULTIPROCESSING=0, uniprocess executor), bf16, eager, EntMTP with its
defaults (or the settings in JSON, e.g. '{"budget": {"gate": false}}'), `max_num_seqs` = SEQS:
PROMPTS MT-bench test prompts (greedy unless TEMPERATURE, 128 tokens) all submitted, SEQS at a time, after a short
warm-up (4 prompts, 16 tokens). Prints tok/s, engine steps and their mean time, draft tokens
verified and accepted per step, EntMTP's phases (ms a step) and their share of the step, steps
whose heads the gate skipped, prompt-lookup tokens drafted / accepted / scored without being
drafted, the trees drafted, the step-cost model and the lookup rate at the end.

    python docs/results/serving/epyc_lookup_rates/budget_stats.py PROMPTS SEQS [JSON]

TEMPERATURE (default 0: greedy) samples the measured prompts at that temperature instead (the
warm-up too), e.g. TEMPERATURE=0.7 for EntMTP's lossless sampled verification.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    args = sys.argv[1:]
    if len(args) not in (2, 3) or not all(arg.isdigit() and int(arg) > 0 for arg in args[:2]):
        sys.exit(f"usage: budget_stats.py PROMPTS SEQS [JSON] (two positive integers, then EntMTP settings), got {args}")
    n, seqs = int(args[0]), int(args[1])
    try:
        settings = json.loads(args[2]) if len(args) == 3 else {}
    except json.JSONDecodeError as exc:
        sys.exit(f"budget_stats.py: JSON is not valid JSON ({exc.msg})")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.prompts import chat_text, load_prompts

    model = resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [chat_text(tokenizer, p.text) for p in load_prompts("mt_bench", n=n, split="test")]
    llm = LLM(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=2048, max_num_seqs=seqs,
              kv_cache_memory_bytes=2 << 30, distributed_executor_backend="uni",
              speculative_config={"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5},
              additional_config={"entmtp": settings})
    temperature = float(os.environ.get("TEMPERATURE", "0"))
    llm.generate(prompts[:4], SamplingParams(temperature=temperature, max_tokens=16), use_tqdm=False)  # warm-up
    before = llm.collective_rpc("entmtp_stats")[0]
    started = time.perf_counter()
    outputs = llm.generate(prompts, SamplingParams(temperature=temperature, max_tokens=128), use_tqdm=False)
    wall = time.perf_counter() - started
    after = llm.collective_rpc("entmtp_stats")[0]
    delta = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], (int, float)) and not isinstance(after[k], bool)}
    steps = delta["steps_timed"]
    step_ms = delta["step_seconds"] / steps * 1e3
    phases = {k: (v - before["overhead_seconds"].get(k, 0.0)) / steps * 1e3 for k, v in after["overhead_seconds"].items()}
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(json.dumps({
        "seqs": seqs, "settings": settings, "tok_s": round(tokens / wall, 1), "steps": steps, "step_ms": round(step_ms, 2),
        "drafted_per_step": round(delta["drafted_nodes"] / steps, 2),
        "accepted_per_step": round(delta["accepted_tokens"] / steps, 2),
        "phase_ms": {k: round(v, 3) for k, v in phases.items()}, "share": round(sum(phases.values()) / step_ms, 4),
        "gate_skips": delta["gate_skips"],
        "lookup": {"drafted": delta["lookup_proposed"], "accepted": delta["lookup_accepted"],
                   "scored_undrafted": delta.get("lookup_unverified")},
        "trees": {k: v - before["tree_usage"].get(k, 0) for k, v in after["tree_usage"].items()},
        "step_cost_ms": {k: round(v, 3) for k, v in after["step_cost"].items() if k.endswith("_ms")},
        "lookup_rate": round(after["lookup_rate"], 3),
    }), flush=True)


if __name__ == "__main__":
    main()
