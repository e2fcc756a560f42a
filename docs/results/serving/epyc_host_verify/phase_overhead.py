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
import sys

from entmtp_vllm.bench.in_process import chat_prompts, in_process_engine, timed_generate


def main() -> None:
    if len(sys.argv) != 3 or not all(arg.isdigit() and int(arg) > 0 for arg in sys.argv[1:]):
        sys.exit(f"usage: phase_overhead.py PROMPTS SEQS (two positive integers), got {sys.argv[1:]}")
    n, seqs = int(sys.argv[1]), int(sys.argv[2])
    llm = in_process_engine(seqs)
    run = timed_generate(llm, chat_prompts(llm, "mt_bench", "test", n))
    step_ms = 1e3 * run.entmtp["step_seconds"] / run.timed_steps
    print(json.dumps({
        "seqs": seqs, "tok_s": round(run.tok_s, 1), "steps": run.timed_steps, "step_ms": round(step_ms, 2),
        "drafted_per_step": round(run.per_step("drafted_nodes"), 2),
        "accepted_per_step": round(run.per_step("accepted_tokens"), 2),
        "phase_ms": {k: round(v, 3) for k, v in run.phase_ms().items()}, "share": round(run.share(), 4),
    }), flush=True)


if __name__ == "__main__":
    main()
