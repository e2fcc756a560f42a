"""Outputs of `calibrate`: calibrate.md (the sweep table, the held-out replay and Table-1
analogue), calibrate.png (predicted tok/s against τ_on) and calibrate.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from entmtp_vllm.bench.paired import paired_text

from tree_search.policy_grid import PAPER_TAUS, best_of
from tree_search.report import finish_plot, write_stage_outputs
from tree_search.step_costs import STEP_COSTS_FILE


def _num(value: float | None, form: str = ".3f") -> str:
    return "–" if value is None else format(value, form)


def cost_text(results: dict[str, Any]) -> str:
    probe = results.get("step_costs")
    if probe:
        how = probe.get("method", "one engine drawing a random tree per step")  # an older probe's: no method
        return (f"costs from the step-cost probe (`{STEP_COSTS_FILE}`: {probe['prompts']} calibration prompts, {how}, "
                "mean ± standard error)")
    return f"costs from `{Path(results['throughput']).name}`"


def cost_error(results: dict[str, Any], name: str) -> str:
    row = (results.get("step_costs") or {}).get("trees", {}).get(name)
    return f" ± {row['se_ms']:.1f}" if row and row.get("se_ms") is not None else ""


def calibrate_markdown(results: dict[str, Any], top: int = 15) -> str:
    s = results["settings"]
    rows = results["rows"]
    lines = [
        f"# Scheduler calibration — {s['dataset']}",
        "",
        f"Replay over {s['calibration_prompts']} calibration prompts ({s['frontier_dtype']}, greedy, "
        f"{s['max_tokens']} new tokens); {cost_text(results)} ({s['engine_dtype']}): "
        + ", ".join(f"`{t['name']}` {_num(t['step_ms'], '.1f')}{cost_error(results, t['name'])} ms/step (n={t['size']})"
                    for t in results["trees"])
        + f", prefill {results['prefill_ms_per_token']:.2f} ms/prompt token. Predicted tok/s = tokens / (prefill + "
        f"Σ step times). Engine check: {s['check_prompts']} calibration prompts, `bench offline` protocol. "
        f"Selection by {s['select']} tok/s. Path value s quantiles over the best static tree's steps: "
        + ", ".join(f"q{q}={v:.3f}" for q, v in results["s_quantiles"].items()) + ".",
        "",
        f"Chosen: `{results['chosen']['policy']}` ({results['chosen']['family']}, {results['chosen']['source']}), "
        f"written to `{results['bank']}` (trees: {', '.join(results['bank_trees'])}). Sweep trees: "
        f"{s.get('candidates', 'bank')} (bank {', '.join(s.get('base_bank') or [])}"
        + ("" if s.get("candidates") != "timed" else " + the other timed frontier trees") + ").",
        "",
        "| policy | family | τ grid | τ (replay) | predicted tok/s | switches | steps per tree | measured tok/s (calib) | ρ (calib) |",
        "|---|---|---|---:|---:|---:|---|---:|---:|",
    ]
    shown = rows[:top] + [r for r in rows[top:] if r["family"] == "static" or r.get("measured_calib")]
    hyst = next((r for r in rows if r["policy"] == results["best"]["hysteresis"]), None)
    paper = [] if hyst is None else [
        r for r in rows if r["source"] == "paper τ grid" and r["config"]["tau_off"] == r["config"]["tau_on"]
        and r["config"]["conservative"] == hyst["config"]["conservative"]
        and r["config"]["aggressive"] == hyst["config"]["aggressive"]]
    shown += [r for r in paper if r not in shown]
    for r in shown:
        m = r.get("measured_calib") or {}
        used = ", ".join(f"{n}:{c}" for n, c in r["tree_steps"].items() if c)
        lines.append(
            f"| `{r['policy']}` | {r['family']} | {r['source']} | {r['tau']:.3f} | {r['predicted_tokens_per_second']:.2f} | "
            f"{r['switches']} | {used} | {_num(m.get('tokens_per_second'), '.2f')} | {_num(m.get('speedup'))} |"
        )
    lines.append("")
    lines.append(f"{len(rows)} policies replayed; the table shows the best {top}, every static tree, every policy "
                 "timed in the engine check and the paper's single-τ grid for the best hysteresis pair.")
    held = results.get("heldout_replay")
    if held:
        lines += ["", f"## Held-out replay: {held['prompts']} prompts of `{held['frontier']}`", "",
                  "The policies chosen on the calibration prompts, replayed over held-out trajectories with the same "
                  "measured step costs (every policy on the same tokens, no timing noise).", "",
                  "| method | policy | τ | predicted tok/s | × EntMTP* | predicted on the calibration prompts |",
                  "|---|---|---:|---:|---:|---:|"]
        for r in held["rows"]:
            lines.append(f"| {r['name']} | `{r['policy']}` | {r['tau']:.3f} | {r['predicted_tokens_per_second']:.2f} | "
                         f"{r['vs_static']:.4f} | {r['calibration_predicted_tokens_per_second']:.2f} |")
    t1 = results.get("table1")
    if t1:
        lines += ["", f"## Held-out (Table-1 analogue): {t1['num_prompts']} test prompts, {t1['machine']['dtype']}, "
                  f"{t1['machine']['threads']} thread(s)", "",
                  "| method | tok/s | ρ | τ | nodes/step | × EntMTP* [95%] |",
                  "|---|---:|---:|---:|---:|---|"]
        for r in t1["rows"]:
            lines.append(f"| {r['name']} | {r['tokens_per_second']:.2f} | {r['speedup']:.3f} | {r['tau']:.3f} | "
                         f"{r['mean_nodes']:.1f} | {paired_text(r.get('vs_static'))} |")
        lines += ["", "× EntMTP*: tok/s ratio to the best static tree over the same prompts (> 1: faster), with its "
                  "95% interval from resampling the prompts (bootstrap)."]
    lines += ["", f"Wall time {results['timing']['total_s']:.0f} s (features {results['timing']['features_s']:.0f} s, "
              f"replay sweep {results['timing']['sweep_s']:.1f} s)."]
    return "\n".join(lines) + "\n"


def plot_calibrate(results: dict[str, Any], path: Path, pairs_shown: int = 5) -> None:
    """Predicted tok/s against τ_on (log scale) for the best few hysteresis pairs (τ_off = τ_on);
    static trees and the best ladder as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    rows = results["rows"]
    hyst = [r for r in rows if r["family"] == "hysteresis"]
    best_per_pair: dict[tuple[str, str], float] = {}
    for r in hyst:
        pair = (r["config"]["conservative"], r["config"]["aggressive"])
        best_per_pair[pair] = max(best_per_pair.get(pair, 0.0), r["predicted_tokens_per_second"])
    pairs = sorted(best_per_pair, key=lambda p: -best_per_pair[p])[:pairs_shown]
    for k, (small, big) in enumerate(pairs):
        pts = sorted((r["config"]["tau_on"], r["predicted_tokens_per_second"]) for r in hyst
                     if (r["config"]["conservative"], r["config"]["aggressive"]) == (small, big)
                     and r["config"]["tau_off"] == r["config"]["tau_on"])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=1,
                label=f"hysteresis {small}→{big}", color=plt.get_cmap("tab10")(k % 10))
    statics = sorted((r for r in rows if r["family"] == "static"), key=lambda r: -r["predicted_tokens_per_second"])
    for k, r in enumerate(statics):
        ax.axhline(r["predicted_tokens_per_second"], linestyle=":", linewidth=1, color="#555555")
        ax.annotate(f"static {r['config']['tree']}", (1.0, r["predicted_tokens_per_second"]),
                    xycoords=("axes fraction", "data"), xytext=(-2, 2), textcoords="offset points", ha="right",
                    fontsize=6, color="#555555")
    ladder = best_of(rows, "ladder")
    if ladder is not None:
        ax.axhline(ladder["predicted_tokens_per_second"], linestyle="-.", linewidth=1, color="#9467bd",
                   label=f"best ladder ({'/'.join(ladder['config']['trees'])})")
    for x in PAPER_TAUS:
        ax.axvline(x, color="#dddddd", linewidth=0.6, zorder=0)
    ax.set_xscale("log")
    finish_plot(fig, ax, path, "τ_on = τ_off (path value threshold; grey: the paper's grid)",
                "predicted tok/s (replay × measured step costs)",
                f"Scheduler sweep — {results['settings']['dataset']}, {results['settings']['calibration_prompts']} "
                f"calibration prompts (best {len(pairs)} pairs)", 6, "lower left")


def write_calibrate_outputs(results: dict[str, Any], out: Path) -> dict[str, str]:
    return write_stage_outputs(out, "calibrate", results, calibrate_markdown, plot_calibrate)
