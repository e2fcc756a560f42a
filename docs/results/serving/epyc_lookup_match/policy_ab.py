"""In-process tokens a second of one vLLM engine (no speculation, or EntMTP with the given
settings) on a prompt set at a fixed number of requests at a time: one JSON line per run.

One engine (VLLM_ENABLE_V1_MULTIPROCESSING=0, uniprocess executor), bf16, eager, `max_num_seqs`
= SEQS, the front door's thread setting expected in the environment (OMP_NUM_THREADS=2 on the
2-core machine): PROMPTS prompts of DATASET/SPLIT (default mt_bench/test), greedy, 128 tokens,
all submitted at once after a short warm-up (4 prompts, 16 tokens). Prints tok/s, engine steps
and their mean wall time, and for EntMTP the draft tokens verified / accepted, the prompt-lookup
tokens verified / accepted, EntMTP's own phases (ms a step) and its fitted step-cost model.
(EntMTP's counters count the timed generation only, the warm-up left out; before the shared
runner `entmtp_vllm.bench.in_process`, the counters of the committed runs included the warm-up.)

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_lookup_match/policy_ab.py METHOD PROMPTS SEQS [JSON]

METHOD: `none` (no speculation) or `entmtp` (JSON: EntMTP settings, e.g. a policy object).
Runs of one method move by several percent between runs (the step budget's online cost model
and gate follow the measured timings): compare methods over several alternating runs.
"""

from __future__ import annotations

import json
import os
import sys

from entmtp_vllm.bench.in_process import chat_prompts, in_process_engine, timed_generate


def main() -> None:
    args = sys.argv[1:]
    if len(args) not in (3, 4) or args[0] not in ("none", "entmtp") or not all(a.isdigit() and int(a) > 0 for a in args[1:3]):
        sys.exit(f"usage: policy_ab.py none|entmtp PROMPTS SEQS [JSON], got {args}")
    method, n, seqs = args[0], int(args[1]), int(args[2])
    try:
        settings = json.loads(args[3]) if len(args) == 4 else {}
    except json.JSONDecodeError as exc:
        sys.exit(f"policy_ab.py: JSON is not valid JSON ({exc.msg})")
    dataset, split = os.environ.get("DATASET", "mt_bench"), os.environ.get("SPLIT", "test")
    llm = in_process_engine(seqs, method, settings)
    run = timed_generate(llm, chat_prompts(llm, dataset, split, n))
    result = {"method": method, "dataset": f"{dataset}/{split}", "settings": settings, "seqs": seqs,
              "tok_s": round(run.tok_s, 2), "tokens": run.tokens, "steps": len(run.engine_step_seconds),
              "step_ms": round(run.engine_step_ms, 2)}
    if run.entmtp is not None:
        result.update({
            "drafted": run.entmtp["drafted_nodes"], "accepted": run.entmtp["accepted_tokens"],
            "lookup_drafted": run.entmtp["lookup_proposed"], "lookup_accepted": run.entmtp["lookup_accepted"],
            "own_ms": {k: round(v, 3) for k, v in run.phase_ms().items()},
            "step_cost_ms": {k: round(v, 3) for k, v in run.entmtp_after["step_cost"].items() if k.endswith("_ms")},
        })
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
