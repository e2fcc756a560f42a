"""Where EntMTP's own milliseconds go in an in-process engine step: wall-clock timers around the
proposer's, drafter's, planner's and verifier's functions (`time.perf_counter` wrappers, no
profiler: the calls keep their own speed), per engine step and per call.

One engine (VLLM_ENABLE_V1_MULTIPROCESSING=0, uniprocess executor), bf16, eager, the default
EntMTP settings, SEQS requests at a time: PROMPTS prompts of the MT-bench test split, greedy, 128
tokens, all submitted at once after a short warm-up (4 prompts, 16 tokens).

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_host_cuts/phase_timers.py SEQS PROMPTS

Prints the engine's own phase counters (ms a step) and one line per timed function: ms a step,
calls a step, microseconds a call. Nested functions count inside their callers too (propose_trees
holds draft_trees, which holds compute_heads, which holds head_logits). Functions a version of
the code lacks are skipped. A run's drafting volume follows the step budget's online cost model
and gate, so totals move by tens of percent between runs; microseconds a call compare across runs.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time

TIMED = [
    ("entmtp_vllm.vllm_plugin.tree_runner", "TreeRunnerMixin", ["_plan_step", "_verify", "propose_draft_token_ids"]),
    ("entmtp_vllm.vllm_plugin.tree_runner", None, ["greedy_tokens", "accept_greedy_host"]),
    ("entmtp_vllm.vllm_plugin.proposer", "EntMTPProposer",
     ["propose_trees", "_lookup", "_score_undrafted", "_count", "record_lookup", "record_accepted", "record_verification"]),
    ("entmtp_vllm.heads.drafting", None, ["compute_heads", "draft_trees"]),
    ("entmtp_vllm.heads.drafting", "TreeDrafter", ["head_logits", "begin", "top_children"]),
    ("entmtp_vllm.scheduling", "TreeScheduler", ["features", "choose", "observe"]),
    ("entmtp_vllm.step_planner", "StepPlanner", ["candidate", "plan"]),
    ("entmtp_vllm.step_planner", None, ["plan_deeper", "plan_budget"]),
]


def main() -> None:
    if len(sys.argv) != 3 or not all(a.isdigit() and int(a) > 0 for a in sys.argv[1:]):
        sys.exit("usage: phase_timers.py SEQS PROMPTS")
    seqs, n = int(sys.argv[1]), int(sys.argv[2])
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import importlib

    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.prompts import chat_text, load_prompts

    seconds, calls = collections.Counter(), collections.Counter()

    def wrap(owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[label] += time.perf_counter() - started
                calls[label] += 1

        setattr(owner, name, timed)

    for module_name, class_name, names in TIMED:
        module = importlib.import_module(module_name)
        owner = getattr(module, class_name) if class_name else module
        for name in names:
            if hasattr(owner, name):
                wrap(owner, name, f"{class_name}.{name}" if class_name else name)

    model = resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [chat_text(tokenizer, p.text) for p in load_prompts("mt_bench", n=n, split="test")]
    llm = LLM(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=2048, max_num_seqs=seqs,
              kv_cache_memory_bytes=2 << 30, distributed_executor_backend="uni",
              speculative_config={"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5})
    llm.generate(prompts[:4], SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)  # warm-up
    seconds.clear()
    calls.clear()
    started = time.perf_counter()
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=128), use_tqdm=False)
    wall = time.perf_counter() - started
    stats = llm.collective_rpc("entmtp_stats")[0]
    steps = max(1, stats["steps_timed"])
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(json.dumps({"seqs": seqs, "prompts": n, "tok_s": round(tokens / wall, 1), "steps": steps,
                      "step_ms": round(1e3 * stats["step_seconds"] / steps, 2),
                      "drafted": stats["drafted_nodes"], "accepted": stats["accepted_tokens"],
                      "own_ms": {k: round(1e3 * v / steps, 3) for k, v in stats["overhead_seconds"].items()}}))
    for label, total in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"{label:40s} {1e3 * total / steps:7.3f} ms/step  {calls[label] / steps:6.2f} calls/step  "
              f"{1e6 * total / calls[label]:8.1f} us/call")


if __name__ == "__main__":
    main()
