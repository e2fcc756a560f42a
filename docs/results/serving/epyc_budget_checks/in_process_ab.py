"""In-process tok/s of one fresh engine (none, or EntMTP with a JSON of settings) at SEQS requests on
PROMPTS prompts of $DATASET's test split: one RESULT line (drafted, accepted, gate skips, the
fitted step cost, EntMTP's phases). Used by ab_rotating.sh."""
import json, os, sys
from entmtp_vllm.bench.in_process import chat_prompts, in_process_engine, timed_generate
method, n, seqs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
settings = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
llm = in_process_engine(seqs, method, settings or None)
run = timed_generate(llm, chat_prompts(llm, os.environ.get("DATASET", "mt_bench"), "test", n))
r = {"m": method, "s": settings, "tok_s": round(run.tok_s, 1), "steps": len(run.engine_step_seconds), "step_ms": round(run.engine_step_ms, 2)}
if run.entmtp:
    e = run.entmtp
    r.update(drafted=e["drafted_nodes"], acc=e["accepted_tokens"], lk=e["lookup_proposed"], lka=e["lookup_accepted"],
             gate_skips=e["gate_skips"], empty=e["budget_empty"], timed=e["steps_timed"], usage=e["tree_usage"],
             own={k: round(v, 2) for k, v in run.phase_ms().items()},
             cost={k: round(v, 3) for k, v in run.entmtp_after["step_cost"].items()}, scale=round(run.entmtp_after["head_scale"], 3), rate=run.entmtp_after.get("served_tok_s"))
print("RESULT " + json.dumps(r), flush=True)
