"""Every verified draft node whose parent was accepted, logged during one in-process EntMTP run:
its head probability (negative: a prompt-lookup node), depth, whether it was accepted, and
its tree's size (one line each, to OUT). Then calibration_bins.py bins them.

    DATASET=mt_bench python calibration_collect.py PROMPTS SEQS OUT
"""
import json, os, sys
from entmtp_vllm import step_budget
from entmtp_vllm.bench.in_process import chat_prompts, in_process_engine, timed_generate

out = open(sys.argv[3], "w")
orig = step_budget.HeadCalibration.observe
def observe(self, token_probs, parents, accepted):
    on_path = set(accepted)
    depths = [0] * len(parents)
    for i in range(1, len(parents)):
        depths[i] = depths[parents[i]] + 1
        if parents[i] in on_path:
            out.write(f"{token_probs[i]:.4f} {depths[i]} {int(i in on_path)} {len(parents)}\n")
    return orig(self, token_probs, parents, accepted)
step_budget.HeadCalibration.observe = observe
n, seqs = int(sys.argv[1]), int(sys.argv[2])
settings = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
llm = in_process_engine(seqs, "entmtp", settings)
ds = os.environ.get("DATASET", "mt_bench")
run = timed_generate(llm, chat_prompts(llm, ds, "test", n))
print(json.dumps({"tok_s": run.tok_s, "drafted": run.entmtp["drafted_nodes"], "accepted": run.entmtp["accepted_tokens"],
                  "scale": run.entmtp_after.get("head_scale")}))
out.close()
