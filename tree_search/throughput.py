"""The throughput frontier (the paper's second stage): frontier trees re-ranked by measured tok/s.

Chosen trees of an acceptance frontier (sizes on its growth path), the published reference
tree and AR run end to end in the reference engine with the timed protocol of
`entmtp bench offline` (its `run_offline` itself: one warm-up generation per method excluded,
prefill included in the timed region, methods taking turns step by step). The trees are
handed to it as methods `tree:<candidates.json>#n<size>`, where `candidates.json` is an
`entmtp-bank` with every measured tree.

Prompts: by default the held-out `test` split of the frontier's data set (the frontier itself
calibrates on `calib`), greedy, the frontier's `--max-tokens`.

The throughput-Pareto trees (no other frontier tree is at most as large and at least as fast,
one of the two strictly) form the task's bank, `bank_throughput.json`, with `measured`
(self-rollout τ, tok/s, nodes, steps) filled and a static policy on the fastest tree
(EntMTP*); `entmtp search calibrate` replaces that policy by a calibrated scheduler.
Outputs in `<frontier>/throughput` (or `--out`): throughput.json / .md / .png, the bench's own
offline.json / .md / .png, candidates.json and bank_throughput.json.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from entmtp_vllm.bank_file import BankFile, load_bank, save_bank
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import Tree

from tree_search.frontier import DEFAULT_BANK_SIZES, REFERENCE_TREE, bank_sizes_within, resolve_reference
from tree_search.resources import frontier_model_heads
from tree_search.report import finish_plot

THROUGHPUT_DIR = "throughput"
CANDIDATES = "candidates.json"
BANK_THROUGHPUT = "bank_throughput.json"


# --------------------------------------------------------------------------- Pareto set


def pareto_front(points: Sequence[tuple[str, int, float]]) -> list[str]:
    """Names of the (name, size, tok/s) points that no other point dominates, smallest first.

    q dominates p when q.size <= p.size and q.tps >= p.tps, one of them strictly; equal points
    keep the first one listed. Along the result sizes and tok/s both increase strictly."""
    kept: list[tuple[str, int, float]] = []
    for name, size, tps in sorted(points, key=lambda p: (p[1], -p[2])):
        if kept and tps <= kept[-1][2]:
            continue  # a tree at most as large is at least as fast
        kept.append((name, size, tps))
    return [name for name, _, _ in kept]


# --------------------------------------------------------------------------- the run


@dataclass
class ThroughputConfig:
    """Everything `entmtp search throughput` depends on."""

    frontier: str
    sizes: Sequence[int] | None = None
    """Frontier sizes to time (default: the bank sizes the frontier reached)."""
    reference: str | None = REFERENCE_TREE
    out: str | None = None
    """Default: `<frontier>/throughput`."""
    dtype: str = "bfloat16"
    num_prompts: int | None = 10
    split: str = "test"
    seed: int | None = None
    """Default: the frontier's seed."""
    max_tokens: int | None = None
    """Default: the frontier's --max-tokens."""
    threads: int = 1


def bench_config(settings: dict[str, Any], methods: Sequence[str], *, dtype: str, num_prompts: int | None,
                 split: str, seed: int | None, max_tokens: int | None, threads: int):
    """An `OfflineBenchConfig` for the frontier's model, heads and data set (greedy)."""
    from entmtp_vllm.bench.offline_config import OfflineBenchConfig, parse_methods

    model, heads = frontier_model_heads(settings)
    return OfflineBenchConfig(
        datasets=[settings["dataset"]], methods=parse_methods(list(methods)), num_prompts=num_prompts,
        seed=settings["seed"] if seed is None else seed, split=split, category=settings.get("category"),
        data_path=settings.get("data_path"), max_tokens=settings["max_tokens"] if max_tokens is None else max_tokens,
        model=model, dtype=dtype, threads=threads, temperature=0.0,
        acceptance="greedy", heads=heads, raw=bool(settings.get("raw", False)),
    )


def method_row(label: str, summary: dict[str, Any]) -> dict[str, Any]:
    """tok/s, ρ, τ and the per-step cost of one method of a `run_offline` result."""
    prompts = summary["prompts"]
    decode_s = sum(r["time_s"] - r["prefill_time_s"] for r in prompts)
    return {
        "method": label,
        "tokens_per_second": summary["tokens_per_second"],
        "speedup": summary.get("speedup"),
        "tau": summary["mean_accept_length"],
        "mean_nodes": summary["mean_nodes"],
        "tokens": summary["tokens"],
        "steps": summary["steps"],
        "time_s": summary["time_s"],
        "prefill_s": sum(r["prefill_time_s"] for r in prompts),
        "prompt_tokens": sum(r["prompt_tokens"] for r in prompts),
        "step_ms": 1000.0 * decode_s / summary["steps"] if summary["steps"] else None,
    }


def run_throughput(config: ThroughputConfig, progress: bool = True, log: Callable[[str], None] | None = None,
                   bench: Callable[..., dict[str, Any]] | None = None) -> dict[str, Any]:
    """Time the frontier trees, the reference and AR; write the outputs and the Pareto bank."""
    from entmtp_vllm.bench.offline import run_offline, write_report

    from tree_search.debias import read_frontier

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    bench = bench or run_offline
    started = time.perf_counter()
    folder = Path(config.frontier)
    settings, steps = read_frontier(folder)
    by_size = {step.size: step for step in steps}
    reached = max(by_size)
    sizes = sorted(set(config.sizes)) if config.sizes else bank_sizes_within(DEFAULT_BANK_SIZES, reached)
    missing = [s for s in sizes if s not in by_size]
    if missing:
        raise EntMTPError(f"size {missing[0]} is not on the frontier in {folder}: it has sizes 1..{reached}")
    if config.threads < 1:
        raise EntMTPError(f"--threads must be at least 1 (got {config.threads})")
    out = Path(config.out) if config.out else folder / THROUGHPUT_DIR
    out.mkdir(parents=True, exist_ok=True)

    entries: list[dict[str, Any]] = [
        {"name": f"n{s}", "choices": [list(p) for p in by_size[s].tree], "measured": None} for s in sizes
    ]
    frontier_tau = {f"n{s}": by_size[s].tau for s in sizes}
    reference_name = None
    if config.reference:
        found, note = resolve_reference(config.reference)
        if found is None:
            log(note or f"reference {config.reference!r} not found; timing without it")
        else:
            reference_name, tree = found
            if reference_name in frontier_tau:
                raise EntMTPError(f"reference tree name {reference_name!r} clashes with a frontier tree name")
            entries.append({"name": reference_name, "choices": tree.choices, "measured": None})
    candidates = out / CANDIDATES
    save_bank(BankFile.model_validate({
        "model": settings["model"], "task": settings["dataset"], "trees": entries, "policy": None,
        "metadata": {"source": "tree_search throughput: the trees timed", "frontier": str(folder)},
    }), candidates)

    methods = ["ar"] + [f"tree:{candidates}#{e['name']}" for e in entries]
    bench_cfg = bench_config(settings, methods, dtype=config.dtype, num_prompts=config.num_prompts,
                             split=config.split, seed=config.seed, max_tokens=config.max_tokens,
                             threads=config.threads)
    log(f"timing {len(methods)} methods on {config.num_prompts} {settings['dataset']} prompts ({config.split} split), "
        f"{bench_cfg.max_tokens} new tokens, {config.dtype}, {config.threads} thread(s)")
    offline = bench(bench_cfg, progress=progress, log=log)
    offline_paths = write_report(offline, out, stem="offline")

    by_label = offline["methods"]
    ar = method_row("ar", by_label["ar"])
    rows = []
    for entry, label in zip(entries, methods[1:]):
        tree = Tree.from_choices(entry["choices"])
        row = method_row(label, by_label[label])
        row.update({
            "name": entry["name"], "size": tree.num_nodes - 1, "depth": tree.depth,
            "frontier": entry["name"] in frontier_tau, "frontier_tau": frontier_tau.get(entry["name"]),
            "choices": entry["choices"],
        })
        rows.append(row)
    frontier_rows = [r for r in rows if r["frontier"]]
    pareto = pareto_front([(r["name"], r["size"], r["tokens_per_second"]) for r in frontier_rows])
    pareto_all = pareto_front([(r["name"], r["size"], r["tokens_per_second"]) for r in rows])
    for row in rows:
        row["pareto"] = row["name"] in pareto
        row["pareto_with_reference"] = row["name"] in pareto_all
    best = max(frontier_rows, key=lambda r: r["tokens_per_second"])
    results = {
        "throughput": "frontier trees timed end to end (reference engine, `bench offline` protocol, greedy)",
        "frontier": str(folder),
        "settings": settings,
        "bench": offline["config"],
        "machine": offline["machine"],
        "split": config.split,
        "num_prompts": offline["num_prompts"],
        "ar": ar,
        "rows": rows,
        "pareto": pareto,
        "best_static": best["name"],
        "reference": reference_name,
        "wall_time_s": time.perf_counter() - started,
    }
    results["outputs"] = write_throughput_outputs(results, out, {k: str(v) for k, v in offline_paths.items()})
    return results


# --------------------------------------------------------------------------- outputs


def throughput_bank(results: dict[str, Any], bank_path: Path) -> BankFile:
    """The Pareto trees, smallest first, with their measurements; static policy on the fastest."""
    rows = {r["name"]: r for r in results["rows"]}
    trees = []
    for name in results["pareto"]:
        r = rows[name]
        trees.append({
            "name": name, "choices": r["choices"],
            "measured": {"accept_length": max(1.0, r["tau"]), "tokens_per_second": r["tokens_per_second"],
                         "nodes": r["size"] + 1, "steps": r["steps"] or None},
        })
    settings = results["settings"]
    return BankFile.model_validate({
        "model": settings["model"], "task": settings["dataset"], "trees": trees,
        "policy": {"kind": "static", "tree": results["best_static"]},
        "metadata": {
            "source": "tree_search throughput: throughput-Pareto trees of the acceptance frontier",
            "measured": f"self-rollout τ and tok/s in the reference engine, {results['bench']['dtype']}, "
                        f"{results['num_prompts']} {settings['dataset']} prompts ({results['split']} split), greedy",
            "policy": "static on the fastest tree (EntMTP*) until `entmtp search calibrate` writes a scheduler",
            "best_static": results["best_static"],
            "throughput": str(bank_path.parent / "throughput.json"),
            "frontier": results["frontier"],
            "ar_tokens_per_second": results["ar"]["tokens_per_second"],
            "reference": {"name": results["reference"], **{k: rows[results["reference"]][k] for k in
                          ("tokens_per_second", "tau", "size")}} if results["reference"] else None,
        },
    })


def throughput_markdown(results: dict[str, Any]) -> str:
    from entmtp_vllm.bench.timing import turns_text

    settings, machine = results["settings"], results["machine"]
    ar = results["ar"]
    lines = [
        f"# Throughput frontier — {settings['dataset']}",
        "",
        f"{results['num_prompts']} {settings['dataset']} prompts ({results['split']} split, seed {results['bench']['seed']}), "
        f"{results['bench']['max_tokens']} new tokens, {machine['dtype']}, {machine['threads']} thread(s), greedy; "
        f"{machine['cpu']}; `entmtp bench offline` protocol (warm-up excluded, prefill timed, methods taking turns "
        f"{turns_text(results['bench'])}). Wall time {results['wall_time_s']:.0f} s.",
        "",
        "ρ = tok/s over AR's in the same run; τ = self-rollout mean accept length; frontier τ = the acceptance "
        "frontier's what-if τ (calibration split, float32); step = mean decode-step time (prefill excluded). "
        "★ = throughput-Pareto among the frontier trees (kept in bank_throughput.json).",
        "",
        "| tree | n | d | tok/s | ρ | τ | frontier τ | nodes/step | step (ms) | Pareto |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| AR | 0 | 0 | {ar['tokens_per_second']:.2f} | 1.000 | 1.000 | – | 1.0 | {ar['step_ms']:.1f} | |",
    ]
    for r in sorted(results["rows"], key=lambda r: (r["size"], r["name"])):
        mark = "★" if r["pareto"] else ("(★ with reference)" if r["pareto_with_reference"] else "")
        if r["name"] == results["best_static"]:
            mark += " fastest (EntMTP*)"
        ftau = "–" if r["frontier_tau"] is None else f"{r['frontier_tau']:.3f}"
        lines.append(
            f"| `{r['name']}` | {r['size']} | {r['depth']} | {r['tokens_per_second']:.2f} | {r['speedup']:.3f} | "
            f"{r['tau']:.3f} | {ftau} | {r['mean_nodes']:.1f} | {r['step_ms']:.1f} | {mark.strip()} |"
        )
    lines += ["", f"Bank (Pareto, smallest first): {', '.join(f'`{n}`' for n in results['pareto'])}; "
              f"EntMTP* = `{results['best_static']}`."]
    if results["reference"]:
        ref = next(r for r in results["rows"] if r["name"] == results["reference"])
        best = next(r for r in results["rows"] if r["name"] == results["best_static"])
        lines.append(
            f"EntMTP* vs `{ref['name']}`: {best['tokens_per_second'] / ref['tokens_per_second']:.3f}× tok/s with "
            f"{best['size']} vs {ref['size']} draft nodes (τ {best['tau']:.3f} vs {ref['tau']:.3f})."
        )
    return "\n".join(lines) + "\n"


def plot_throughput(results: dict[str, Any], path: Path) -> None:
    """tok/s against size: every timed tree, the Pareto set joined and marked, the reference starred, AR dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rows"]
    frontier = sorted((r for r in rows if r["frontier"]), key=lambda r: r["size"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot([r["size"] for r in frontier], [r["tokens_per_second"] for r in frontier], color="#999999",
            linewidth=1, marker="o", markersize=5, label="frontier trees", zorder=2)
    pareto = [r for r in frontier if r["pareto"]]
    ax.step([r["size"] for r in pareto], [r["tokens_per_second"] for r in pareto], where="post", color="#1f77b4",
            linewidth=1, alpha=0.6, zorder=1)
    ax.scatter([r["size"] for r in pareto], [r["tokens_per_second"] for r in pareto], s=70, facecolors="none",
               edgecolors="#1f77b4", linewidths=1.5, label="throughput-Pareto (bank)", zorder=3)
    for r in frontier:
        ax.annotate(f"{r['name']}\nτ {r['tau']:.2f}", (r["size"], r["tokens_per_second"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=7)
    for r in rows:
        if not r["frontier"]:
            ax.scatter([r["size"]], [r["tokens_per_second"]], marker="*", s=160, color="#d62728", zorder=4,
                       label=f"{r['name']} (τ {r['tau']:.2f})")
    ax.axhline(results["ar"]["tokens_per_second"], color="black", linestyle="--", linewidth=1, label="AR")
    settings, machine = results["settings"], results["machine"]
    ax.set_xscale("log", base=2)
    finish_plot(fig, ax, path, "draft nodes (root excluded, log scale)", "tokens / s (prefill included)",
                f"Throughput frontier — {settings['dataset']}, {results['num_prompts']} {results['split']} prompts, "
                f"{machine['dtype']}, {machine['threads']} thread(s)", 7, "best")


def write_throughput_outputs(results: dict[str, Any], out: Path, offline_paths: dict[str, str]) -> dict[str, str]:
    paths = {"json": out / "throughput.json", "markdown": out / "throughput.md", "png": out / "throughput.png",
             "bank": out / BANK_THROUGHPUT}
    save_bank(throughput_bank(results, paths["bank"]), paths["bank"])
    load_bank(paths["bank"])  # what the search writes must load back
    paths["markdown"].write_text(throughput_markdown(results), encoding="utf-8")
    plot_throughput(results, paths["png"])
    written = {key: str(value) for key, value in paths.items()}
    written.update({f"offline_{k}": v for k, v in offline_paths.items()})
    written["candidates"] = str(out / CANDIDATES)
    paths["json"].write_text(json.dumps({**results, "outputs": written}, indent=1) + "\n", encoding="utf-8")
    return written
