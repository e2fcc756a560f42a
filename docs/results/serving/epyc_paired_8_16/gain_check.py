"""Does the step budget over- or under-value its drafts? In one in-process engine
(`entmtp_vllm.bench.in_process`: bf16, eager, SEQS requests at a time, PROMPTS MT-bench test
prompts, greedy, 128 tokens, after a 4-prompt warm-up), every step's plan is read on the way: the
expected accepted draft tokens it kept (its `gain`, the sum of its kept nodes' values), split into
copied (prompt-lookup) and head nodes, against the draft tokens the engine then accepted. Nothing
changes what the engine drafts or accepts. One JSON line.

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_paired_8_16/gain_check.py SEQS PROMPTS [JSON]

JSON: EntMTP settings (default: none, the plugin's defaults). Head tokens accepted are the
accepted draft tokens less the lookup tokens accepted.
"""

from __future__ import annotations

import collections
import json
import sys

from entmtp_vllm.bench.in_process import chat_prompts, in_process_engine, timed_generate, warm_up_engine
from entmtp_vllm.step_planner import StepPlanner


def main() -> None:
    args = sys.argv[1:]
    if len(args) not in (2, 3) or not all(a.isdigit() and int(a) > 0 for a in args[:2]):
        sys.exit(f"usage: gain_check.py SEQS PROMPTS [JSON], got {args}")
    seqs, n = int(args[0]), int(args[1])
    try:
        settings = json.loads(args[2]) if len(args) == 3 else {}
    except json.JSONDecodeError as exc:
        sys.exit(f"gain_check.py: JSON is not valid JSON ({exc.msg})")
    sums: collections.Counter = collections.Counter()
    plan = StepPlanner.plan

    def reading_plan(self, drafts, trees, lookups, batch_size, spent):
        result = plan(self, drafts, trees, lookups, batch_size, spent)
        sums["expected"] += result.gain
        for draft, buffers, lookup, kept in zip(drafts, trees, lookups, result.kept):
            values = self.candidate(draft.token_probs, buffers, lookup).values
            for i in range(kept):
                kind = "lookup" if draft.token_probs[i + 1] is not None and draft.token_probs[i + 1] < 0 else "head"
                sums[f"{kind}_expected"] += values[i]
                sums[f"{kind}_kept"] += 1
        return result

    StepPlanner.plan = reading_plan
    llm = in_process_engine(seqs, "entmtp", settings)
    prompts = chat_prompts(llm, "mt_bench", "test", n)
    warm_up_engine(llm, prompts)  # warm-up, not counted
    sums.clear()
    run = timed_generate(llm, prompts, warm_up=0)
    counters = run.entmtp
    print(json.dumps({
        "seqs": seqs, "tok_s": round(run.tok_s, 1), "steps": len(run.engine_step_seconds),
        "accepted": counters["accepted_tokens"], "expected": round(sums["expected"], 1),
        "lookup_accepted": counters["lookup_accepted"], "lookup_expected": round(sums["lookup_expected"], 1),
        "head_accepted": counters["accepted_tokens"] - counters["lookup_accepted"],
        "head_expected": round(sums["head_expected"], 1),
        "drafted": counters["drafted_nodes"], "kept": sums["lookup_kept"] + sums["head_kept"],
    }), flush=True)


if __name__ == "__main__":
    main()
