"""Outputs of a frontier search: JSON, a Markdown table, a plot and an `entmtp-bank` file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from entmtp_vllm.bank_file import BankFile, load_bank, save_bank


def _path(path: list[int] | tuple[int, ...]) -> str:
    return "[" + ", ".join(str(r) for r in path) + "]"


def describe_run(settings: dict[str, Any], num_prompts: int) -> str:
    return (
        f"{settings['dataset']}, {num_prompts} prompts ({settings['split']} split, seed {settings['seed']}), "
        f"{settings['max_tokens']} new tokens, {settings['dtype']}, model {settings['model']}, heads {settings['heads']}; "
        f"budget {settings['budget']} draft nodes, max depth {settings['max_depth']}, scorer `{settings['scorer']}`, "
        + (f"prompt-lookup chain up to {settings['lookup']} nodes (rank -1; depth counts them too), " if settings.get("lookup") else "")
        + "greedy acceptance"
    )


def _hybrid(settings: dict[str, Any]) -> str:
    """' hybrid (lookup ≤ L)' for a search with prompt-lookup nodes, '' otherwise."""
    return f" hybrid (lookup ≤ {settings['lookup']})" if settings.get("lookup") else ""


def frontier_markdown(results: dict[str, Any]) -> str:
    """The frontier as a Markdown table (size = draft nodes, root excluded)."""
    settings, timing = results["settings"], results["timing"]
    bank = {size: f"n{size}" for size in results["bank_sizes"]}
    lines = [
        f"# Acceptance frontier — {settings['dataset']}{_hybrid(settings)}",
        "",
        describe_run(settings, results["num_prompts"]) + ".",
        f"Wall time {timing['total_s']:.1f} s (calibration {timing['calibration_s']:.1f} s, growth "
        f"{timing['search_s']:.1f} s; {timing['resumed_steps']} step(s) resumed from the log).",
        "",
        "τ = mean accept length (tokens per decode step, pooled over all steps) of the tree after the step, "
        "scored one-step what-if on the previous tree's trajectory (Algorithm 1; slightly optimistic, "
        "see `entmtp search debias`). Size counts draft nodes; a step verifies size + 1 tokens.",
        "",
        "| size | depth | added node | τ (what-if) | τ before | gain | steps | bank |",
        "|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for step in results["frontier"]:
        lines.append(
            f"| {step['size']} | {step['depth']} | {_path(step['added'])} | {step['tau']:.3f} | {step['base_tau']:.3f} | "
            f"{step['tau'] - step['base_tau']:+.3f} | {step['steps']} | {bank.get(step['size'], '')} |"
        )
    ref = results.get("reference")
    if ref:
        lines.append("")
        if "tau" in ref:
            extra = f" (deeper than --max-depth {settings['max_depth']})" if ref.get("deeper_than_max_depth") else ""
            lines.append(
                f"Reference `{ref['name']}` ({ref['size']} draft nodes, depth {ref['depth']}){extra}: τ = {ref['tau']:.3f} "
                f"over {ref['steps']} steps (its own teacher-forced rollout, same trajectories and scorer)."
            )
        else:
            lines.append(f"Reference `{ref['name']}` not scored: {ref['skipped']}.")
    elif results.get("reference_note"):
        lines += ["", results["reference_note"] + "."]
    if not results.get("complete", True):
        lines += ["", f"**Incomplete**: {len(results['frontier'])} of {settings['budget']} nodes; rerun to continue."]
    return "\n".join(lines) + "\n"


def frontier_bank(results: dict[str, Any]) -> BankFile:
    """The frontier's trees at the bank sizes, named `n<size>`, with their what-if τ as `measured`."""
    by_size = {step["size"]: step for step in results["frontier"]}
    settings = results["settings"]
    trees = []
    for size in results["bank_sizes"]:
        step = by_size[size]
        trees.append({
            "name": f"n{size}",
            "choices": [list(p) for p in step["tree"]],
            "measured": {"accept_length": max(1.0, float(step["tau"])), "tokens_per_second": None,
                         "nodes": size + 1, "steps": step["steps"]},
        })
    return BankFile.model_validate({
        "format": "entmtp-bank",
        "version": 1,
        "model": settings["model"],
        "task": settings["dataset"],
        "trees": trees,
        "policy": None,
        "metadata": {
            "source": "tree_search acceptance frontier (Algorithm 1)",
            "measured": "accept_length = one-step what-if mean accept length (greedy, teacher-forced); "
                        "`entmtp search debias` re-measures it with the reference engine",
            "settings": settings,
        },
    })


def finish_plot(fig, ax, path: Path, xlabel: str, ylabel: str, title: str, legend_size: int, legend_loc: str) -> None:
    """Label the axes, title (size 9), grid and legend the plot, save it at 120 dpi and close it:
    the last lines of every tree_search figure."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, loc=legend_loc)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_frontier(results: dict[str, Any], path: Path) -> None:
    """τ against size, points coloured by depth, bank trees labelled, the reference tree starred."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = results["frontier"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    if steps:
        sizes = [s["size"] for s in steps]
        taus = [s["tau"] for s in steps]
        ax.plot(sizes, taus, color="#999999", linewidth=1, zorder=1)
        cmap = plt.get_cmap("viridis")
        depth_max = max(s["depth"] for s in steps)
        for depth in sorted({s["depth"] for s in steps}):
            xs = [s["size"] for s in steps if s["depth"] == depth]
            ys = [s["tau"] for s in steps if s["depth"] == depth]
            ax.scatter(xs, ys, s=18, color=cmap((depth - 1) / max(depth_max - 1, 1)), label=f"depth {depth}", zorder=2)
        by_size = {s["size"]: s for s in steps}
        for size in results["bank_sizes"]:
            step = by_size[size]
            ax.scatter([size], [step["tau"]], s=70, facecolors="none", edgecolors="black", zorder=3)
            ax.annotate(f"n{size}", (size, step["tau"]), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ref = results.get("reference")
    if ref and "tau" in ref:
        ax.scatter([ref["size"]], [ref["tau"]], marker="*", s=160, color="#d62728", zorder=4,
                   label=f"{ref['name']} (depth {ref['depth']})")
    settings = results["settings"]
    finish_plot(fig, ax, path, "draft nodes (root excluded)", "τ, mean accept length (what-if)",
                f"Acceptance frontier — {settings['dataset']}{_hybrid(settings)}, {results['num_prompts']} prompts, "
                f"head depth ≤ {settings['max_depth']}, {settings['dtype']}", 8, "lower right")


def write_frontier_outputs(results: dict[str, Any], out: Path) -> dict[str, str]:
    """frontier.json, frontier.md, frontier.png and bank.json (validated by loading it back)."""
    out = Path(out)
    paths = {"json": out / "frontier.json", "markdown": out / "frontier.md", "png": out / "frontier.png"}
    written = {key: str(value) for key, value in paths.items()}
    if results["bank_sizes"]:
        bank_path = out / "bank.json"
        save_bank(frontier_bank(results), bank_path)
        load_bank(bank_path)  # what the search writes must load back
        written["bank"] = str(bank_path)
    paths["markdown"].write_text(frontier_markdown(results), encoding="utf-8")
    plot_frontier(results, paths["png"])
    paths["json"].write_text(json.dumps({**results, "outputs": written}, indent=1) + "\n", encoding="utf-8")
    return written


def write_stage_outputs(out: Path, stem: str, results: dict[str, Any], markdown: Callable[[dict[str, Any]], str],
                        plot: Callable[[dict[str, Any], Path], None]) -> dict[str, str]:
    """A stage's `<stem>.md`, `<stem>.png` and `<stem>.json` (the results with their output paths)."""
    paths = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md", "png": out / f"{stem}.png"}
    paths["markdown"].write_text(markdown(results), encoding="utf-8")
    plot(results, paths["png"])
    written = {k: str(v) for k, v in paths.items()}
    paths["json"].write_text(json.dumps({**results, "outputs": written}, indent=1) + "\n", encoding="utf-8")
    return written
