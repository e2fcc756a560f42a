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
    import importlib

    from entmtp_vllm.bench.in_process import chat_prompts, in_process_engine, timed_generate, warm_up_engine

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

    llm = in_process_engine(seqs)
    prompts = chat_prompts(llm, "mt_bench", "test", n)
    warm_up_engine(llm, prompts)  # warm-up, not counted
    seconds.clear()
    calls.clear()
    run = timed_generate(llm, prompts, warm_up=0)
    steps = run.timed_steps
    print(json.dumps({"seqs": seqs, "prompts": n, "tok_s": round(run.tok_s, 1), "steps": steps,
                      "step_ms": round(1e3 * run.entmtp["step_seconds"] / steps, 2),
                      "drafted": run.entmtp["drafted_nodes"], "accepted": run.entmtp["accepted_tokens"],
                      "own_ms": {k: round(v, 3) for k, v in run.phase_ms().items()}}))
    for label, total in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"{label:40s} {1e3 * total / steps:7.3f} ms/step  {calls[label] / steps:6.2f} calls/step  "
              f"{1e6 * total / calls[label]:8.1f} us/call")


if __name__ == "__main__":
    main()
