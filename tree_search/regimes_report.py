"""Outputs of `regimes`: regimes.md (the per-feature table, the classifier), regimes.png (r per
feature) and regimes.json; `combine` merges several tasks' regimes.json into one heatmap + table."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from entmtp_vllm.errors import EntMTPError

from tree_search.regimes_statistics import BONUS_ONLY
from tree_search.report import write_stage_outputs


def _num(value: float | None, form: str = "+.3f") -> str:
    return "–" if value is None else format(value, form)


def regimes_markdown(results: dict[str, Any]) -> str:
    s, c = results["settings"], results["classifier"]
    lines = [
        f"# Regimes — {s['dataset']}",
        "",
        ("Reference engine" if s.get("source", "engine") == "engine" else "Replay of the reference engine's greedy run "
         "(calibration trajectories, per-position features)") + f", static tree `{s['tree']}`, greedy, {s['dtype']}, "
        f"{s['max_tokens']} new tokens, "
        f"{results['prompts']} calibration prompts, {results['rows']} step rows; mean accept length "
        f"{results['mean_accept_length']:.3f}, bonus-only steps ({BONUS_ONLY}) {100 * results['bonus_only_rate']:.1f}%.",
        "",
        "r = Pearson r with the next step's accept length (the step the features precede); r lag 1 = with the "
        "step after it; AUROC = that feature alone for the bonus-only event "
        "(+: higher values mean more bonus-only steps; −: fewer).",
        "",
        "| feature | r | r lag 1 | AUROC (alone) | mean |",
        "|---|---:|---:|---:|---:|",
    ]
    for f in sorted(results["per_feature"], key=lambda f: -abs(f["r"] or 0.0)):
        auc = "–" if f["auroc"] is None else f"{f['auroc']:.3f} ({f['auroc_sign']})"
        lines.append(f"| `{f['feature']}` | {_num(f['r'])} | {_num(f['r_lag1'])} | {auc} | {f['mean']:.3f} |")
    holdout = c["holdout"]
    check = results.get("engine_check")
    if check:
        lines += ["", f"Replay vs engine on the first {check['prompts']} prompts ({check['engine_steps']} engine steps): "
                  f"{check['accept_mismatches']} accept-length mismatches, largest feature difference "
                  f"{check['max_abs_feature_diff']:.2e}."]
    lines += [
        "",
        f"Classifier ({c['model']}, all features) for {BONUS_ONLY}, split by prompt: AUROC "
        f"{_num(c['auroc_mean'], '.3f')} ± {_num(c['auroc_std'], '.3f')} over {c['folds']} prompt folds; "
        f"fixed split {holdout['train_prompts']}/{holdout['test_prompts']} prompts: {_num(holdout['auroc'], '.3f')}.",
        "",
        f"Wall time {results['timing']['total_s']:.0f} s (records {results['timing']['collect_s']:.0f} s).",
    ]
    return "\n".join(lines) + "\n"


def plot_regimes(results: dict[str, Any], path: Path) -> None:
    """Pearson r per feature (bars, sorted by |r|) and the classifier's AUROC in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    feats = sorted((f for f in results["per_feature"] if f["r"] is not None), key=lambda f: abs(f["r"]))
    fig, ax = plt.subplots(figsize=(6.4, max(3.0, 0.28 * len(feats) + 1.2)))
    colors = ["#1f77b4" if f["r"] >= 0 else "#d62728" for f in feats]
    ax.barh([f["feature"] for f in feats], [f["r"] for f in feats], color=colors)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("Pearson r with the next step's accept length")
    c = results["classifier"]
    auc = "–" if c["auroc_mean"] is None else f"{c['auroc_mean']:.3f}"
    ax.set_title(f"Regimes — {results['settings']['dataset']} ({results['settings']['tree']}, {results['rows']} steps, "
                 f"{results['prompts']} prompts); bonus-only AUROC {auc} (by-prompt CV)", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_regimes_outputs(results: dict[str, Any], out: Path) -> dict[str, str]:
    return write_stage_outputs(out, "regimes", results, regimes_markdown, plot_regimes)


def combine(results_files: Sequence[str | Path], out: str | Path) -> dict[str, str]:
    """Several tasks' regimes.json → one heatmap of r (features × tasks) with the AUROC per task,
    and a Markdown table (regimes_tasks.png / .md in `out`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loaded = [json.loads(Path(p).read_text(encoding="utf-8")) for p in results_files]
    if not loaded:
        raise EntMTPError("no regimes.json given")
    tasks = [r["settings"]["dataset"] for r in loaded]
    names: list[str] = []
    for r in loaded:
        names += [f["feature"] for f in r["per_feature"] if f["feature"] not in names]
    grid = np.full((len(names), len(tasks)), np.nan)
    for j, r in enumerate(loaded):
        for f in r["per_feature"]:
            if f["r"] is not None:
                grid[names.index(f["feature"]), j] = f["r"]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(3.2 + 1.1 * len(tasks) + 3, 0.3 * len(names) + 1.6),
                                 gridspec_kw={"width_ratios": [len(tasks) + 1, 3]})
    im = ax.imshow(grid, cmap="RdBu", vmin=-0.6, vmax=0.6, aspect="auto")
    ax.set_xticks(range(len(tasks)), tasks, fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    for i in range(len(names)):
        for j in range(len(tasks)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:+.2f}", ha="center", va="center", fontsize=6)
    ax.set_title("(a) Pearson r with the next accept length", fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.04)
    aucs = [r["classifier"]["auroc_mean"] or 0.0 for r in loaded]
    errs = [r["classifier"]["auroc_std"] or 0.0 for r in loaded]
    bx.bar(range(len(tasks)), aucs, yerr=errs, color="#1f77b4")
    bx.set_xticks(range(len(tasks)), tasks, fontsize=7, rotation=30)
    bx.set_ylim(0.5, 1.0)
    bx.set_title("(b) AUROC, bonus-only next step\n(logistic, CV by prompt)", fontsize=8)
    fig.tight_layout()
    png = out / "regimes_tasks.png"
    fig.savefig(png, dpi=120)
    plt.close(fig)
    lines = ["| feature | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
    for i, name in enumerate(names):
        lines.append(f"| `{name}` | " + " | ".join("–" if np.isnan(v) else f"{v:+.3f}" for v in grid[i]) + " |")
    lines.append("| **AUROC (bonus-only)** | " + " | ".join(
        f"{a:.3f} ± {e:.3f}" for a, e in zip(aucs, errs)) + " |")
    lines.append("| steps / prompts | " + " | ".join(f"{r['rows']} / {r['prompts']}" for r in loaded) + " |")
    md = out / "regimes_tasks.md"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"png": str(png), "markdown": str(md)}
