"""Offline benchmark: methods (AR, static trees, banks with policies, Medusa) on prompt sets.

Each method first runs one warm-up generation (excluded); then every prompt runs once per
method, the methods taking turns in a rotating order so that background load weighs on all
of them alike. By default (`interleave="step"`) a turn is one decode step: the methods
decode the prompt side by side, and each generation counts only its own prefill and steps.
On this shared CPU slow spells last seconds; with step turns, two runs of the same method
timed 1.001 [0.996, 1.007] against each other over 16 prompts, against ±3% with whole
generations as turns (`interleave="prompt"`). The timed region of a generation includes
its prefill (the paper's protocol). With `repeats` R > 1 every prompt runs R times per
method and a prompt's time is the fastest of its R runs: other processes only ever add
time, so the minimum is the least disturbed measurement of the same work (the repeats must
decode the same tokens; any that do not are counted). Reported per method:

- tok/s = total generated tokens / total time,
- rho = tok/s over AR's tok/s in the same run (AR is always run, first),
- tau = mean accept length (tokens emitted per decode step, over all steps),
- mean tree nodes verified per step,
- with `check_equal` (greedy only): prompts whose tokens differ from AR's,
- × baseline (AR unless `baseline` names another method): the tok/s ratio over the same
  prompts with its 95% bootstrap interval (`bench.paired`).

`run_offline` returns a JSON-ready dict; `markdown_report` and `write_report` render it. The
prompts and the turns (`decode_in_turns`, `turn_order`) come from `bench.timing`, which
tree_search's step-cost probe shares.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from entmtp_vllm.bench.offline_config import INTERLEAVE_MODES, MethodSpec, OfflineBenchConfig
from entmtp_vllm.bench.paired import paired_speed, paired_text
from entmtp_vllm.bench.timing import bench_prompts, decode_in_turns, encode_prompts, turn_order, turns_text
from entmtp_vllm.errors import EntMTPError

def resolve_baseline(methods: list[MethodSpec], value: str | None) -> str:
    """The label of the method the others are paired with: `value` is a label as given in
    --methods or a 1-based position in `methods` (AR is 1); None = AR."""
    labels = [m.label for m in methods]
    if value is None:
        return labels[0]
    if value in labels:
        return value
    if value.isdigit() and 1 <= int(value) <= len(labels):
        return labels[int(value) - 1]
    listed = ", ".join(f"{i} = {label}" for i, label in enumerate(labels, 1))
    raise EntMTPError(f"--baseline {value!r} is neither a method nor a position; the methods are: {listed}")


def machine_info(threads: int, dtype: str) -> dict[str, Any]:
    """Where and how the numbers were measured."""
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        "dtype": dtype,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _build_engines(config: OfflineBenchConfig, model, tokenizer):
    """One engine per method; the heads (Hydra / Medusa) are loaded once each, and every engine
    gets its own drafter on them (`fork`), so that engines can decode side by side."""
    from entmtp_vllm.engine.loading import load_drafter, load_trees
    from entmtp_vllm.engine.reference import ReferenceEngine

    drafters: dict[str, Any] = {}

    def drafter(kind: str):
        if kind not in drafters:
            path = config.heads if kind == "hydra" else config.medusa_heads
            drafters[kind] = load_drafter(path, model, kind=kind)
        return drafters[kind]

    engines = {}
    for method in config.methods:
        if method.kind == "ar":
            engines[method.label] = ReferenceEngine(model, tokenizer)
            continue
        if method.kind == "bank":
            bank, policy, _ = load_trees(bank=method.source, policy=method.policy)
        else:
            bank, policy, _ = load_trees(tree=method.source, name=method.name)
        kind = "medusa" if method.kind == "medusa" else "hydra"
        engines[method.label] = ReferenceEngine(model, tokenizer, drafter(kind).fork(), bank, policy)
    return engines


def run_offline(config: OfflineBenchConfig, progress: bool = True, log=print) -> dict[str, Any]:
    """Run every method over the prompts; return the results as a JSON-ready dict."""
    import torch
    from tqdm import tqdm

    from entmtp_vllm.config import SamplingParams
    from entmtp_vllm.engine.loading import load_target

    sampling = SamplingParams(temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
    if config.check_equal and not sampling.greedy:
        raise EntMTPError("--check-equal compares greedy outputs: use --temperature 0")
    if config.max_tokens < 1:
        raise EntMTPError(f"--max-tokens must be at least 1 (got {config.max_tokens})")
    if config.interleave not in INTERLEAVE_MODES:
        raise EntMTPError(f"--interleave must be one of {', '.join(INTERLEAVE_MODES)} (got {config.interleave!r})")
    if config.repeats < 1:
        raise EntMTPError(f"--repeats must be at least 1 (got {config.repeats})")
    baseline = resolve_baseline(config.methods, config.baseline)
    torch.set_num_threads(config.threads)

    prompts = bench_prompts(config)
    model, tokenizer = load_target(config.model, config.dtype, cpu_gemm=config.cpu_gemm)
    engines = _build_engines(config, model, tokenizer)
    encoded = encode_prompts(config, tokenizer, prompts)
    for prompt, ids in zip(prompts, encoded):  # fail before any timing
        engines[config.methods[0].label].check_request(ids, config.max_tokens, "ar", config.acceptance)

    def decode(label: str, ids: list[int], index: int):
        method = by_label[label]
        return engines[label].decode(
            ids,
            config.max_tokens,
            sampling=sampling,
            acceptance=config.acceptance,
            method="ar" if method.kind == "ar" else "tree",
            seed=config.sampling_seed + index,
        )

    def generate(label: str, ids: list[int], index: int):
        *_, generation = decode(label, ids, index)
        return generation

    def turns(order: list[str], ids: list[int], index: int) -> dict[str, Any]:
        """One run of the prompt per method, in `order`: whole generations one after the other
        (interleave "prompt"), or all of them advanced one decode step per turn ("step")."""
        if config.interleave == "prompt":
            return {label: generate(label, ids, index) for label in order}
        return decode_in_turns({label: decode(label, ids, index) for label in order})

    by_label = {m.label: m for m in config.methods}
    labels = [m.label for m in config.methods]
    for label in labels:
        generate(label, encoded[0], 0)  # warm-up, excluded from every number

    # Methods take turns (the order rotates from prompt to prompt), so that load from other
    # processes weighs on every method alike. With repeats, every method runs the prompt
    # `repeats` times and keeps its fastest run.
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    bars = {
        label: tqdm(total=len(prompts), desc=label, unit="prompt", position=i, disable=not progress, leave=True)
        for i, label in enumerate(labels)
    }
    for index, (prompt, ids) in enumerate(zip(prompts, encoded)):
        runs: dict[str, list] = {label: [] for label in labels}
        for _ in range(config.repeats):
            for label, gen in turns(turn_order(labels, index), ids, index).items():
                runs[label].append(gen)
        for label in labels:
            gen = min(runs[label], key=lambda g: g.total_time_s)
            row = {
                "id": prompt.id,
                "dataset": prompt.dataset,
                "prompt_tokens": gen.prompt_tokens,
                "num_tokens": gen.num_tokens,
                "time_s": gen.total_time_s,
                "prefill_time_s": gen.prefill_time_s,
                "tokens_per_second": gen.tokens_per_second,
                "steps": len(gen.steps),
                "mean_accept_length": gen.mean_accept_length,
                "mean_nodes": gen.mean_nodes,
                "accept_lengths": gen.accept_lengths,
                "trees_used": gen.trees_used,
                "tree_switches": gen.tree_switches,
                "stop_reason": gen.stop_reason,
                "token_ids": gen.token_ids,
            }
            if config.repeats > 1:
                row["times_s"] = [g.total_time_s for g in runs[label]]
                row["repeats_differ"] = sum(g.token_ids != gen.token_ids for g in runs[label])
            rows[label].append(row)
            bars[label].update()
    for bar in bars.values():
        bar.close()
    methods_out = {label: _summarise(by_label[label], rows[label]) for label in labels}
    for label, summary in methods_out.items():
        if summary.get("repeats_differ"):
            log(f"warning: {label}: {summary['repeats_differ']} repeated run(s) decoded other tokens than the kept run")

    ar_tps = methods_out[config.methods[0].label]["tokens_per_second"]
    for label, summary in methods_out.items():
        summary["speedup"] = summary["tokens_per_second"] / ar_tps if ar_tps > 0 else None
        if label != baseline:
            summary["vs_baseline"] = paired_speed(summary, methods_out[baseline])

    mismatches = []
    if config.check_equal:
        reference = methods_out[config.methods[0].label]["prompts"]
        for label, summary in methods_out.items():
            count = 0
            for ref_row, row in zip(reference, summary["prompts"]):
                diff = _first_difference(ref_row["token_ids"], row["token_ids"])
                if diff is not None:
                    count += 1
                    mismatches.append(
                        {"method": label, "id": row["id"], "dataset": row["dataset"], "first_difference": diff,
                         "ar_tokens": len(ref_row["token_ids"]), "tokens": len(row["token_ids"])}
                    )
            summary["mismatches"] = count

    config_out = asdict(config)
    config_out["methods"] = [m.label for m in config.methods]
    return {
        "benchmark": "offline",
        "config": config_out,
        "machine": {**machine_info(config.threads, config.dtype), "cpu_gemm": model.entmtp_cpu_gemm},
        "num_prompts": len(prompts),
        "baseline": baseline,
        "methods": methods_out,
        "check_equal": {"checked": config.check_equal, "mismatches": mismatches} if config.check_equal else None,
    }


def _summarise(method: MethodSpec, rows: list[dict[str, Any]]) -> dict[str, Any]:
    tokens = sum(r["num_tokens"] for r in rows)
    seconds = sum(r["time_s"] for r in rows)
    steps = sum(r["steps"] for r in rows)
    accepted = sum(sum(r["accept_lengths"]) for r in rows)
    nodes = sum(r["mean_nodes"] * r["steps"] for r in rows)
    trees: dict[str, int] = {}
    for row in rows:
        for name, count in row["trees_used"].items():
            trees[name] = trees.get(name, 0) + count
    out = {
        "kind": method.kind,
        "tokens": tokens,
        "time_s": seconds,
        "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
        "steps": steps,
        "mean_accept_length": accepted / steps if steps else 0.0,
        "mean_nodes": nodes / steps if steps else 0.0,
        "trees_used": trees,
        "prompts": rows,
    }
    if any("times_s" in r for r in rows):
        out["repeats_differ"] = sum(r["repeats_differ"] for r in rows)
    return out


def markdown_report(results: dict[str, Any]) -> str:
    """The results as a Markdown table, with the setup on top."""
    cfg, machine = results["config"], results["machine"]
    check = results.get("check_equal")
    lines = [
        f"Offline benchmark — {', '.join(cfg['datasets'])}, {results['num_prompts']} prompts, "
        f"{cfg['max_tokens']} new tokens, {machine['dtype']}, {machine.get('cpu_gemm', 'torch')} matrix multiply, "
        f"{machine['threads']} thread(s), T={cfg['temperature']}, acceptance {cfg['acceptance']}; {machine['cpu']}; {machine['date']}"
        + f"; methods taking turns {turns_text(cfg)}"
        + (f"; each prompt's time: the fastest of {cfg['repeats']} runs" if cfg.get("repeats", 1) > 1 else ""),
        "",
        "| method | tok/s | ρ vs AR | × baseline [95%] | τ (mean accept length) | nodes/step | tokens | time (s)"
        + (" | mismatches |" if check else " |"),
        "|---|---:|---:|---:|---:|---:|---:|---:" + ("|---:|" if check else "|"),
    ]
    baseline = results.get("baseline")
    for label, m in results["methods"].items():
        paired = "baseline" if label == baseline else paired_text(m.get("vs_baseline"))
        row = (
            f"| `{label}` | {m['tokens_per_second']:.2f} | {m['speedup']:.3f} | {paired} | "
            f"{m['mean_accept_length']:.3f} | {m['mean_nodes']:.1f} | {m['tokens']} | {m['time_s']:.1f}"
        )
        row += f" | {m.get('mismatches', 0)} |" if check else " |"
        lines.append(row)
    if baseline is not None:
        lines += ["", f"× baseline: tok/s over `{baseline}`'s on the same prompts (> 1: faster), with a 95% interval "
                  "from resampling the prompts (bootstrap)."]
    differ = {label: m["repeats_differ"] for label, m in results["methods"].items() if m.get("repeats_differ")}
    if differ:
        lines += ["", "**Repeated runs that decoded other tokens than the kept run:** "
                  + ", ".join(f"`{label}` {count}" for label, count in differ.items())]
    if check:
        bad = check["mismatches"]
        lines.append("")
        if bad:
            lines.append(f"**{len(bad)} prompt(s) differ from AR** (greedy):")
            lines.extend(
                f"- `{b['method']}` {b['dataset']} {b['id']}: first difference at token {b['first_difference']}"
                for b in bad
            )
        else:
            lines.append("Greedy check: every method's token ids equal AR's on every prompt.")
    return "\n".join(lines) + "\n"


def plot_report(results: dict[str, Any], path: Path) -> None:
    """A bar chart of tok/s per method, annotated with ρ and τ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(results["methods"])
    values = [results["methods"][k]["tokens_per_second"] for k in labels]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(labels)), 3.6))
    bars = ax.bar(range(len(labels)), values, color=["#888888"] + ["#3a78b5"] * (len(labels) - 1))
    for bar, label in zip(bars, labels):
        m = results["methods"][label]
        ax.annotate(
            f"ρ {m['speedup']:.2f}\nτ {m['mean_accept_length']:.2f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("tokens / s")
    machine = results["machine"]
    ax.set_title(f"{', '.join(results['config']['datasets'])} — {machine['dtype']}, {machine['threads']} thread(s)", fontsize=9)
    ax.set_ylim(0, max(values) * 1.25 if values and max(values) > 0 else 1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(results: dict[str, Any], out_dir: str | os.PathLike[str], stem: str = "offline") -> dict[str, Path]:
    """`<stem>.json`, `<stem>.md` and `<stem>.png` in `out_dir` (created)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EntMTPError(f"cannot create output folder {out}: {exc.strerror or exc}") from None
    paths = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md", "png": out / f"{stem}.png"}
    paths["json"].write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_report(results), encoding="utf-8")
    plot_report(results, paths["png"])
    return paths


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")
