"""Issue #21, item 3: what the heads cost per decode step in the reference engine, on CPU, one
torch thread, float32 — plain Hydra against Hydra++ (the prefix layer's extra work).

For every heads folder given, on the hidden states of real prompts (MT-bench test split, the
chat template applied), it times, round after round with the folders taking turns:
  draft  — `begin` (the prefix layer's cached output for Hydra++) and drafting each tree
           (mc_sim_7b_63 and the shipped default bank's trees), the way the engine calls them;
  chain  — the top-1 chain the scheduler's features read (`greedy_chain(4)`);
  observe — feeding the prefix layer two newly accepted positions (Hydra++ only; 0 otherwise);
and, as the yardstick, one base-model decode step of the same prompt (one token over its KV
cache). It prints and writes medians in ms and as a fraction of the decode step.

    .venv/bin/python docs/results/heads/head_cost/run.py --heads A B ... --out docs/results/heads/head_cost

`--shape NAME=SPEC` adds untrained heads of a shape (SPEC: `layers=N` and optionally `prefix`, the
prefix layer `train-heads --prefix-layer` trains: a 64-position window over the answer) with the
shipped heads' draft vocabulary: the cost depends on the shape only, so this times heads that
are not trained yet.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

TREES = "../shared/data/trees/medusa_hydra_trees.json"


def _ms(fn, repeat: int) -> float:
    """Median wall time of `fn()` in ms over `repeat` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def shape_folder(spec: str, folder: Path, config) -> Path:
    """Untrained Hydra heads of the shape `spec` ("layers=4,prefix") for the base model of
    `config` (its transformers config), with the shipped heads' count and draft vocabulary,
    saved in `folder`."""
    from entmtp_vllm.heads import PrefixLayerConfig, make_heads
    from entmtp_vllm.heads.checkpoint import default_heads_path, save_heads
    from entmtp_vllm.heads.draft_vocab import FILE_NAME

    parts = dict(p.split("=", 1) if "=" in p else (p, "1") for p in spec.split(","))
    if set(parts) - {"layers", "prefix"}:
        raise SystemExit(f"--shape {spec!r}: use layers=N and optionally prefix, e.g. layers=4,prefix")
    shipped_folder = default_heads_path("hydra")
    shipped = json.loads((shipped_folder / "heads.json").read_text())
    prefix = None
    if "prefix" in parts:
        prefix = PrefixLayerConfig.from_base_config(config).model_copy(update={"window": 64, "context": "answer"})
    heads = make_heads("hydra", config.hidden_size, config.vocab_size, num_heads=shipped["num_heads"],
                       num_layers=int(parts.get("layers", 1)), prefix_layer=prefix)
    save_heads(heads, folder, {"base_model": shipped["base_model"]})
    shutil.copy(shipped_folder / FILE_NAME, folder / FILE_NAME)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", nargs="*", default=[], help="heads folders (name=FOLDER or FOLDER)")
    parser.add_argument("--shape", nargs="*", default=[], help="untrained heads of a shape: NAME=SPEC, SPEC e.g. layers=4,prefix")
    parser.add_argument("-n", "--num-prompts", type=int, default=4, help="MT-bench test prompts (default: 4)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the folders taking turns (default: 5)")
    parser.add_argument("--repeat", type=int, default=5, help="calls timed per measurement (default: 5)")
    parser.add_argument("--out", help="folder for head_cost.json / head_cost.md")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from entmtp_vllm.bank_file import resolve_trees
    from entmtp_vllm.config import DEFAULT_BANK
    from entmtp_vllm.engine.loading import load_drafter, load_target, load_trees
    from entmtp_vllm.prompts import chat_text, load_prompts

    model, tokenizer = load_target(None, "float32")
    named = [h.split("=", 1) if "=" in h else (Path(h).parent.name + "/" + Path(h).name, h) for h in args.heads]
    scratch = Path(tempfile.mkdtemp(prefix="head_shapes_"))
    for i, item in enumerate(args.shape):
        name, spec = item.split("=", 1) if item.count("=") > 1 else ("shape " + item, item)
        named.append((f"{name} (untrained, {spec})", str(shape_folder(spec, scratch / str(i), model.config))))
    if not named:
        parser.error("give --heads or --shape")
    drafters = {name: load_drafter(folder, model) for name, folder in named}
    published, _ = resolve_trees(TREES, "mc_sim_7b_63", None)
    bank, _, _ = load_trees(bank=DEFAULT_BANK)
    buffers = {"mc_sim_7b_63": published.buffers(0)} | {f"bank:{name}": bank.buffers(i) for i, name in enumerate(bank.names)}

    prompts = load_prompts("mt_bench", args.num_prompts, 0, "test")
    states = []
    with torch.no_grad():
        for prompt in prompts:
            ids = tokenizer(chat_text(tokenizer, prompt.text), return_tensors="pt", add_special_tokens=False)["input_ids"]
            out = model(ids, use_cache=True, output_hidden_states=True)
            root = int(out.logits[0, -1].argmax())
            states.append((ids, out.past_key_values, out.hidden_states[-1][0], root))

    def decode_step(ids, past, root):
        with torch.no_grad():
            model(torch.tensor([[root]]), past_key_values=past, use_cache=True)
            past.crop(-1)  # back to the prompt: every call times the same step

    rows: dict[str, dict[str, list[float]]] = {name: {} for name in drafters}
    base: list[float] = []
    for r in range(-1, args.rounds):  # round -1 warms up and is dropped
        if r == 0:
            rows, base = {name: {} for name in drafters}, []
        order = list(drafters) if r % 2 == 0 else list(reversed(drafters))
        for ids, past, hidden, root in states:
            base.append(_ms(lambda: decode_step(ids, past, root), args.repeat))
            for name in order:
                drafter = drafters[name]
                drafter.reset()
                drafter.observe_prompt(hidden)
                got = rows[name]
                for label, buf in buffers.items():
                    got.setdefault(f"draft {label}", []).append(
                        _ms(lambda: drafter.begin(hidden[-1], root).draft(buf, [root] * 8), args.repeat))
                got.setdefault("chain 4", []).append(_ms(lambda: drafter.begin(hidden[-1], root).greedy_chain(4), args.repeat))
                n = hidden.shape[0]
                got.setdefault("observe 2", []).append(
                    _ms(lambda: drafter.observe(hidden[-2:], torch.arange(n - 2, n)), args.repeat))
    decode_ms = statistics.median(base)
    results = {"decode_step_ms": round(decode_ms, 3), "threads": 1, "dtype": "float32", "prompts": len(states),
               "rounds": args.rounds, "repeat": args.repeat, "heads": dict(named),
               "median_ms": {name: {k: round(statistics.median(v), 3) for k, v in got.items()} for name, got in rows.items()}}
    lines = ["# Head cost per decode step (reference engine, CPU, 1 thread, float32)", "",
             f"One base-model decode step (1 token over the prompt's KV cache): **{decode_ms:.2f} ms** (median).", "",
             "| heads | " + " | ".join(next(iter(results["median_ms"].values()))) + " |",
             "|---|" + "---:|" * len(next(iter(results["median_ms"].values())))]
    for name, got in results["median_ms"].items():
        lines.append(f"| {name} | " + " | ".join(f"{v:.2f} ms ({v / decode_ms:.2f}×)" for v in got.values()) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "head_cost.json").write_text(json.dumps(results, indent=2) + "\n")
        (out / "head_cost.md").write_text(text)


if __name__ == "__main__":
    main()
