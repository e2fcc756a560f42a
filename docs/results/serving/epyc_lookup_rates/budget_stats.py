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

from entmtp_vllm.bench.in_process import chat_prompts, in_process_engine, timed_generate


def main() -> None:
    args = sys.argv[1:]
    if len(args) not in (2, 3) or not all(arg.isdigit() and int(arg) > 0 for arg in args[:2]):
        sys.exit(f"usage: budget_stats.py PROMPTS SEQS [JSON] (two positive integers, then EntMTP settings), got {args}")
    n, seqs = int(args[0]), int(args[1])
    try:
        settings = json.loads(args[2]) if len(args) == 3 else {}
    except json.JSONDecodeError as exc:
        sys.exit(f"budget_stats.py: JSON is not valid JSON ({exc.msg})")
    llm = in_process_engine(seqs, "entmtp", settings)
    run = timed_generate(llm, chat_prompts(llm, "mt_bench", "test", n), float(os.environ.get("TEMPERATURE", "0")))
    delta, after = run.entmtp, run.entmtp_after
    print(json.dumps({
        "seqs": seqs, "settings": settings, "tok_s": round(run.tok_s, 1), "steps": run.timed_steps,
        "step_ms": round(1e3 * delta["step_seconds"] / run.timed_steps, 2),
        "drafted_per_step": round(run.per_step("drafted_nodes"), 2),
        "accepted_per_step": round(run.per_step("accepted_tokens"), 2),
        "phase_ms": {k: round(v, 3) for k, v in run.phase_ms().items()}, "share": round(run.share(), 4),
        "gate_skips": delta["gate_skips"],
        "lookup": {"drafted": delta["lookup_proposed"], "accepted": delta["lookup_accepted"],
                   "scored_undrafted": delta.get("lookup_unverified")},
        "trees": delta["tree_usage"],
        "step_cost_ms": {k: round(v, 3) for k, v in after["step_cost"].items() if k.endswith("_ms")},
        "lookup_rate": round(after["lookup_rate"], 3),
    }), flush=True)


if __name__ == "__main__":
    main()
