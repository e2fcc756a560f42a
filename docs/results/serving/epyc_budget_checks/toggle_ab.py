"""One in-process EntMTP engine, two settings alternated turn by turn (A B B A ...) on the same
prompts: tokens a second per turn, and per A-B pair the ratio B / A. Both settings meet the same
process, memory and online state, seconds apart, so the machine's drift between fresh engines
(no speculation alone moved 300-346 tok/s between runs here) mostly cancels.

    DATASET=spec_bench KIND=rows python toggle_ab.py PROMPTS SEQS TURNS

KIND:
- `served_rate`: the step budget's bar, the step's own rate (A, `own`) against min(own, the
  server's measured rate) (B, `served`). Needs `served_rate.patch` applied (run with a worktree
  that has it first on PYTHONPATH); A sets `ServedRate.MIN_STEPS` out of reach, so the rate is
  never known and the plans use the step's own rate.
- `rows`: `ENTMTP_CPU_ROWS_ATTENTION` `off` (A) against `all` (B) (ARMS=off,on to compare other
  values; the plugin reads the variable every step in a uniprocess engine).

LO / HI keep only the prompts of LO to HI tokens (the first PROMPTS of them).
PREFIX_CACHING=1 keeps vLLM's prefix cache on (then every turn after the first finds its prompts'
KV cached and prefills nothing); by default it is off, so every turn prefills its prompts again,
as a server meeting new prompts does. bf16, eager, 2 GiB of KV cache, 128 tokens, greedy; a
warm-up and one untimed turn first.
"""

from __future__ import annotations

import json
import os
import statistics as st
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

from vllm import LLM  # noqa: E402

from entmtp_vllm.bench.in_process import chat_prompts, timed_generate, warm_up_engine  # noqa: E402
from entmtp_vllm.model_store import resolve_model  # noqa: E402

dataset, kind = os.environ.get("DATASET", "mt_bench"), os.environ.get("KIND", "rows")
n, seqs, turns = (int(a) for a in sys.argv[1:4])
llm = LLM(model=resolve_model(None), dtype="bfloat16", enforce_eager=True, max_model_len=2048, max_num_seqs=seqs,
          kv_cache_memory_bytes=2 << 30, distributed_executor_backend="uni",
          enable_prefix_caching=os.environ.get("PREFIX_CACHING") == "1",
          speculative_config={"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 5},
          additional_config={"entmtp": {}})
if "LO" in os.environ or "HI" in os.environ:  # the first n prompts of LO to HI tokens (chat template applied)
    lo, hi = int(os.environ.get("LO", 0)), int(os.environ.get("HI", 10**9))
    tokenizer = llm.get_tokenizer()
    prompts = [p for p in chat_prompts(llm, dataset, "test", None) if lo <= len(tokenizer(p).input_ids) <= hi][:n]
else:
    prompts = chat_prompts(llm, dataset, "test", n)
print("PROMPTS", dataset, len(prompts), flush=True)

if kind == "served_rate":
    A, B = "own", "served"

    def set_arm(arm: str) -> None:
        def apply(worker):
            worker.model_runner._entmtp.planner.served_rate.MIN_STEPS = 16 if arm == "served" else 10**12
        llm.collective_rpc(apply)
elif kind == "rows":
    A, B = os.environ.get("ARMS", "off,all").split(",")

    def set_arm(arm: str) -> None:
        os.environ["ENTMTP_CPU_ROWS_ATTENTION"] = arm
else:
    sys.exit(f"KIND must be served_rate or rows, got {kind!r}")

set_arm(B)
warm_up_engine(llm, prompts)  # B's code paths warm (the rows kernel built and loaded)
set_arm(A)
timed_generate(llm, prompts, warm_up=0)  # one untimed turn: the online state settles
tok_s: dict[str, list[float]] = {A: [], B: []}
for t in range(turns):
    arm = (A, B, B, A)[t % 4]
    set_arm(arm)
    run = timed_generate(llm, prompts, warm_up=0)
    stats, after = run.entmtp, run.entmtp_after
    tok_s[arm].append(run.tok_s)
    print("TURN", json.dumps({"ds": dataset, "t": t, "arm": arm, "tok_s": round(run.tok_s, 1),
                              "steps": len(run.engine_step_seconds), "step_ms": round(run.engine_step_ms, 2),
                              "drafted": stats["drafted_nodes"], "acc": stats["accepted_tokens"],
                              "gate_skips": stats["gate_skips"], "per_token_ms": after["step_cost"]["per_token_ms"],
                              "rate": after.get("served_tok_s")}), flush=True)
pairs = [b / a for a, b in zip(tok_s[A], tok_s[B])]
print("SUMMARY", dataset, f"{A} median {st.median(tok_s[A]):.1f} {B} median {st.median(tok_s[B]):.1f}; "
      f"{B}/{A} per pair median {st.median(pairs):.3f} mean {st.mean(pairs):.3f} ({' '.join(f'{p:.3f}' for p in pairs)})",
      flush=True)
