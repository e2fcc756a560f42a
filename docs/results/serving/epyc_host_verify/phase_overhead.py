"""EntMTP's own time per engine step, by phase, in one in-process vLLM engine (issue #19 item 4).

One engine (VLLM_ENABLE_V1_MULTIPROCESSING=0, uniprocess executor), bf16, eager, EntMTP with its
defaults, `max_num_seqs` = SEQS: PROMPTS MT-bench test prompts (greedy, 128 tokens) are all
submitted and run SEQS at a time. Prints one JSON line: tok/s, engine steps, the step time EntMTP
measures, drafted / accepted tokens per step, and the plugin's `overhead_seconds` per phase
(plan, draft, verify) in ms per step, with their share of the step.

    python docs/results/serving/epyc_host_verify/phase_overhead.py PROMPTS SEQS
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    if len(sys.argv) != 3 or not all(arg.isdigit() and int(arg) > 0 for arg in sys.argv[1:]):
        sys.exit(f"usage: phase_overhead.py PROMPTS SEQS (two positive integers), got {sys.argv[1:]}")
    n, seqs = int(sys.argv[1]), int(sys.argv[2])
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
              speculative_config={"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5})
    llm.generate(prompts[:4], SamplingParams(temperature=0.0, max_tokens=16), use_tqdm=False)  # warm-up
    before = llm.collective_rpc("entmtp_stats")[0]
    started = time.perf_counter()
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=128), use_tqdm=False)
    wall = time.perf_counter() - started
    after = llm.collective_rpc("entmtp_stats")[0]
    steps = after["steps_timed"] - before["steps_timed"]
    step_ms = (after["step_seconds"] - before["step_seconds"]) / steps * 1e3
    phases = {k: (v - before["overhead_seconds"].get(k, 0.0)) / steps * 1e3 for k, v in after["overhead_seconds"].items()}
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(json.dumps({
        "seqs": seqs, "tok_s": round(tokens / wall, 1), "steps": steps, "step_ms": round(step_ms, 2),
        "drafted_per_step": round((after["drafted_nodes"] - before["drafted_nodes"]) / steps, 2),
        "accepted_per_step": round((after["accepted_tokens"] - before["accepted_tokens"]) / steps, 2),
        "phase_ms": {k: round(v, 3) for k, v in phases.items()}, "share": round(sum(phases.values()) / step_ms, 4),
    }), flush=True)


if __name__ == "__main__":
    main()
