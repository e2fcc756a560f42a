"""Share of the timed generation's samples by part of the step, from py-spy's raw stacks.

    python analyze.py OUT_DIR      (reads <mode>.json and <mode>.pyspy.txt for nospec and entmtp)

Each sample is put in the first category (in the order below) whose pattern one of its frames
matches, from the innermost frame out: EntMTP's own code wins over the vLLM code that called it,
the model's forward over the runner around it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

# (category, substrings of a frame "function (path:line)"), innermost match first
CATEGORIES = [
    # EntMTP's packed matrix multiply runs the model's linear layers (entmtp_vllm/cpu_gemm).
    ("model forward: linear layers (packed kernel)", ["entmtp_vllm/cpu_gemm/"]),
    ("EntMTP: drafting", ["entmtp_vllm/heads/", "propose_trees", "entmtp_vllm/step_budget", "entmtp_vllm/step_cost"]),
    ("EntMTP: tree attention / compaction", ["entmtp_vllm/vllm_plugin/attention", "entmtp_vllm/vllm_plugin/tree_step",
                                             "entmtp_vllm/vllm_plugin/compaction", "_entmtp_compact"]),
    ("EntMTP: plan / verify", ["entmtp_vllm/"]),
    ("model forward: attention", ["v1/attention/", "cpu_attn", "attention/layer"]),
    ("model forward: other layers", ["model_executor/models/", "model_executor/layers/"]),
    ("logits + sampler", ["compute_logits", "v1/sample/", "logits_processor"]),
    ("runner: input prep / metadata", ["_prepare_inputs", "_update_states", "_build_attention_metadata",
                                       "_calc_spec_decode_metadata", "prepare_inputs", "_prepare_input_ids"]),
    ("runner: other", ["v1/worker/"]),
    ("scheduler", ["v1/core/"]),
    ("engine / output processing", ["v1/engine/", "detokenizer", "output_processor"]),
]


def classify(stack: str) -> str:
    frames = stack.split(";")[::-1]  # innermost first
    for frame in frames:
        for name, patterns in CATEGORIES:
            if any(p in frame for p in patterns):
                return name
    return "other"


def read(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        if "generate (" not in stack and "_run_engine" not in stack:
            continue  # only the timed generate (warm-up finished before py-spy attached)
        key = classify(stack)
        counts[key] = counts.get(key, 0) + int(n)
    return counts


def main() -> None:
    out = Path(sys.argv[1])
    runs = {}
    for mode in ("nospec", "entmtp"):
        result = json.loads((out / f"{mode}.json").read_text())
        counts = read(out / f"{mode}.pyspy.txt")
        total = sum(counts.values())
        # ms per engine step in each category: the samples' share of the step's wall time
        runs[mode] = (result, {k: v / total * result["ms_per_step"] for k, v in counts.items()}, total)
    names = [n for n, _ in CATEGORIES] + ["other"]
    lines = ["| part of the step | no speculation, ms/step | EntMTP, ms/step | difference |", "|---|---:|---:|---:|"]
    for name in names:
        a, b = runs["nospec"][1].get(name, 0.0), runs["entmtp"][1].get(name, 0.0)
        if a or b:
            lines.append(f"| {name} | {a:.1f} | {b:.1f} | {b - a:+.1f} |")
    a, b = runs["nospec"][0], runs["entmtp"][0]
    lines.append(f"| **whole step** | **{a['ms_per_step']:.1f}** | **{b['ms_per_step']:.1f}** | **{b['ms_per_step'] - a['ms_per_step']:+.1f}** |")
    tau = (b["output_tokens"] / b["engine_steps"]) / (a["output_tokens"] / a["engine_steps"])
    lines += ["", f"- no speculation: {a['output_tokens']} tokens in {a['engine_steps']} engine steps, {a['tokens_per_s']:.1f} tok/s "
              f"({runs['nospec'][2]} samples)",
              f"- EntMTP: {b['output_tokens']} tokens in {b['engine_steps']} engine steps, {b['tokens_per_s']:.1f} tok/s "
              f"({runs['entmtp'][2]} samples); tokens per engine step {tau:.2f}× no speculation's; "
              f"{b.get('drafted_nodes', 0)} drafted nodes, {b.get('accepted_tokens', 0)} accepted",
              f"- EntMTP / no speculation: {b['tokens_per_s'] / a['tokens_per_s']:.3f}× tok/s, "
              f"{b['ms_per_step'] / a['ms_per_step']:.3f}× ms per step"]
    text = "\n".join(lines) + "\n"
    (out / "profile.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
