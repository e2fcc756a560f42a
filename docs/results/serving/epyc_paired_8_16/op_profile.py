"""Where an in-process engine step's time goes, by torch operator: torch.profiler (CPU) over one
timed generation of `entmtp_vllm.bench.in_process` (bf16, eager, SEQS requests at a time,
PROMPTS MT-bench test prompts, greedy, 128 tokens, after a 4-prompt warm-up), self CPU time per
operator in milliseconds per engine step, the 30 largest.

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_paired_8_16/op_profile.py none|entmtp SEQS PROMPTS

The profiler slows the Python parts of a step, not its operators; compare operators between
methods, not tok/s with other runs.
"""

from __future__ import annotations

import json
import sys

from entmtp_vllm.bench.in_process import METHODS, chat_prompts, in_process_engine, timed_generate, warm_up_engine


def main() -> None:
    args = sys.argv[1:]
    if len(args) != 3 or args[0] not in METHODS or not all(a.isdigit() and int(a) > 0 for a in args[1:]):
        sys.exit(f"usage: op_profile.py none|entmtp SEQS PROMPTS, got {args}")
    method, seqs, n = args[0], int(args[1]), int(args[2])
    from torch.profiler import ProfilerActivity, profile

    llm = in_process_engine(seqs, method)
    prompts = chat_prompts(llm, "mt_bench", "test", n)
    warm_up_engine(llm, prompts)  # warm-up, not profiled
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run = timed_generate(llm, prompts, warm_up=0)
    steps = len(run.engine_step_seconds)
    print(json.dumps({"method": method, "tok_s": run.tok_s, "tokens": run.tokens, "steps": steps,
                      "step_ms": run.engine_step_ms}))
    rows = sorted(((e.self_cpu_time_total, e.key, e.count) for e in prof.key_averages()), reverse=True)
    for total_us, key, count in rows[:30]:
        print(f"{total_us / 1e3 / steps:8.3f} ms/step {count / steps:8.2f} calls/step  {key[:90]}")


if __name__ == "__main__":
    main()
