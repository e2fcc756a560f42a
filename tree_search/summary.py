"""Summary of finished tree-search runs: the target checks per task, and small result files copied.

For every run folder (`runs/search/<task>` as written by `search frontier`, then `throughput`,
`calibrate`, `regimes`, `debias`), whatever stages finished:

(a) a frontier tree with τ >= the published reference's τ using at most half its nodes: the
    smallest such frontier tree (teacher-forced τ on the calibration split, the same rank
    scorer and trajectories as the reference's), and the largest frontier tree within half the
    nodes; held out: the τ both had in the throughput run (engine, test split);
(b) EntMTP* (best static bank tree) vs the reference vs AR (throughput run), and the Table-1
    analogue of `calibrate` (EntMTP^τ vs EntMTP*, held out);
(c) wall time per stage.

`entmtp search summary --runs runs/search/mt_bench runs/search/sharegpt --out docs/search` writes
`summary.md` / `summary.json` there and copies each task's small outputs (tables, figures, bank
files, each under 1 MB) into `<out>/<task>/` (`<out>/<task>/hybrid/` for a hybrid search, `--lookup`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from entmtp_vllm.bench.offline_config import parse_methods
from entmtp_vllm.bench.paired import paired_speed, paired_text
from entmtp_vllm.bench.timing import turns_text
from entmtp_vllm.tree import Tree
from tree_search.policy_grid import policy_string

COPY = [
    "frontier.md", "frontier.png", "bank.json", "debias.md", "bank_debiased.json",
    "throughput/throughput.md", "throughput/throughput.png", "throughput/bank_throughput.json",
    "throughput/offline.md", "calibrate/calibrate.md", "calibrate/calibrate.png",
    "regimes/regimes.md", "regimes/regimes.png", "regimes/regimes.json",
    "compare/offline.md", "compare/offline.png",
]
COMPARE = "compare"
"""Folder of the timed EntMTP^τ-vs-EntMTP* run: `entmtp bench offline ... --baseline 2 --out TASK/compare`
(AR, the bank's best static tree, the bank with its calibrated policy; run_search.sh's compare stage)."""
MAX_COPY_BYTES = 1_000_000


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def scheduler_overview(tasks: Sequence[dict[str, Any]]) -> list[str]:
    """EntMTP^τ and the ladder against EntMTP*, every way they were compared: replay on the
    calibration prompts (what chose them), replay on held-out trajectories (every policy on the
    same tokens, no timing noise) and timed held out (bfloat16: each method on its own greedy text)."""
    lines = ["", "### EntMTP^τ and the ladder ÷ EntMTP* (best static), every comparison", "",
             "| task | method | policy | calibration replay | held-out replay | timed held out |",
             "|---|---|---|---:|---:|---|"]

    def timed(table: dict[str, Any] | None, policy: str) -> str:
        if not table:
            return "–"
        row = next((r for r in table["rows"] if r["name"].endswith(f": {policy}")), None)
        return f"{paired_text(row.get('vs_static'))} ({table['num_prompts']} prompts)" if row else "–"

    any_row = False
    for t in tasks:
        c = t.get("calibrate")
        if not c or "calibration_replay" not in c:
            continue
        best, calib = c["best"], c["calibration_replay"]
        held = {r["policy"]: r for r in (c.get("heldout_replay") or {}).get("rows", [])}
        static = best["static"]
        for title, key in (("EntMTP^τ", "hysteresis"), ("EntMTP-l", "ladder")):
            policy = best.get(key)
            if not policy:
                continue
            any_row = True
            calib_ratio = calib[policy] / calib[static] if static in calib and policy in calib else None
            held_ratio = held[policy]["vs_static"] if policy in held else None
            held_text = _f(held_ratio, '.4f') + (f" ({c['heldout_replay']['prompts']} prompts)" if held_ratio else "")
            lines.append(f"| {t['label']} | {title} | `{policy}` | {_f(calib_ratio, '.4f')} | {held_text} | "
                         f"{timed(c.get('table1'), policy)} |")
    if not any_row:
        return []
    lines += ["", "Replays: predicted tok/s (τ per measured step cost), the calibration prompts (100; mt_bench 34) and "
              "held-out test prompts (`--heldout`). Timed: tok/s ratio over the test prompts, with its 95% interval "
              "from resampling the prompts (bootstrap)."]
    return lines


def compare_summary(offline: dict[str, Any]) -> dict[str, Any] | None:
    """The compare run: every method but AR paired with the baseline (EntMTP*) prompt by prompt."""
    baseline = offline.get("baseline")
    if not baseline or baseline not in offline["methods"] or offline["methods"][baseline]["kind"] == "ar":
        return None

    specs = {m.label: m for m in parse_methods(offline["config"]["methods"])}

    def policy_of(label: str) -> str:
        """`bank:FILE:POLICY` -> POLICY; `bank:FILE` -> the bank file's own policy (read now)."""
        spec = specs[label]
        if spec.policy:
            return spec.policy
        bank = _load(Path(spec.source)) if spec.kind == "bank" else None
        return policy_string(bank["policy"]) if bank and bank.get("policy") else label

    methods = offline["methods"]
    policies = {label: policy_of(label) for label in methods}  # each bank file read once
    method = lambda label, m: {"policy": policies[label], "tokens_per_second": m["tokens_per_second"],  # noqa: E731
                               "tau": m["mean_accept_length"], "speedup": m["speedup"]}
    statics = [label for label, m in methods.items() if m["kind"] != "ar" and policies[label].startswith("static:")]
    fastest = max(statics, key=lambda label: methods[label]["tokens_per_second"], default=None)
    rows = []
    for label, m in methods.items():
        if label == baseline or m["kind"] == "ar":
            continue
        row = {**method(label, m), "vs_baseline": m["vs_baseline"]}
        if label not in statics and fastest not in (None, baseline):  # a policy: also against the fastest static
            row["vs_fastest_static"] = {"static": policies[fastest], **paired_speed(m, methods[fastest])}
        rows.append(row)
    return {"prompts": offline["num_prompts"], "dtype": offline["machine"]["dtype"], "turns": turns_text(offline["config"]),
            "baseline": method(baseline, methods[baseline]), "rows": rows}


def compare_table(tasks: Sequence[dict[str, Any]]) -> list[str]:
    """EntMTP^τ ÷ EntMTP* from each task's compare run."""
    runs = [(t, t["compare"]) for t in tasks if t.get("compare")]
    if not runs:
        return []
    lines = ["", "### EntMTP^τ ÷ EntMTP*, timed on more held-out prompts (`compare/`)", "",
             "| task | prompts | EntMTP* (baseline) | tok/s (ρ, τ) | compared | tok/s (ρ, τ) | × baseline [95%] | prompts faster "
             "| × the run's fastest static [95%] |",
             "|---|---:|---|---|---|---|---|---:|---|"]
    cell = lambda m: f"{m['tokens_per_second']:.2f} ({m['speedup']:.3f}×, {m['tau']:.3f})"  # noqa: E731
    for t, c in runs:
        for r in c["rows"]:
            fastest = r.get("vs_fastest_static")
            versus = f"{paired_text(fastest)} (`{fastest['static']}`)" if fastest else "–"
            lines.append(f"| {t['label']} | {c['prompts']} | `{c['baseline']['policy']}` | {cell(c['baseline'])} | "
                         f"`{r['policy']}` | {cell(r)} | {paired_text(r['vs_baseline'])} | "
                         f"{r['vs_baseline']['faster_prompts']}/{r['vs_baseline']['prompts']} | {versus} |")
    lines += ["", f"{runs[0][1]['dtype']}, greedy, the methods taking turns {runs[0][1]['turns']} (`bench offline --baseline 2`). "
              "Baseline: calibrate's best static tree; compared: the bank with its calibrated policy (EntMTP^τ), each "
              "other tree the policy uses and the throughput run's best static tree, as static trees. × the run's "
              "fastest static: the policy against the static tree with the highest tok/s in the same run, when that is "
              "not the baseline. × baseline: tok/s ratio over the same prompts, "
              "95% interval from resampling the prompts (bootstrap); prompts faster: prompts on which the compared "
              "method had the higher tok/s."]
    return lines


def check_half_size(folder: Path) -> dict[str, Any] | None:
    """(a) on the calibration split: teacher-forced τ of frontier trees vs the reference's."""
    from tree_search.trajectories import CALIBRATION_FILE, load_calibration
    from tree_search.scoring import RankScorer

    frontier = _load(folder / "frontier.json")
    if frontier is None or not frontier.get("reference") or "tau" not in frontier["reference"]:
        return None
    ref = frontier["reference"]
    scorer = RankScorer(load_calibration(folder / CALIBRATION_FILE))
    half = ref["size"] // 2
    taus = {step["size"]: scorer.evaluate(Tree.from_choices(step["tree"])).tau for step in frontier["frontier"]}
    reaching = [size for size in sorted(taus) if taus[size] >= ref["tau"]]
    within = max((size for size in taus if size <= half), default=None)
    return {
        "reference": ref["name"], "reference_size": ref["size"], "reference_tau": ref["tau"], "half": half,
        "smallest_reaching": reaching[0] if reaching else None,
        "smallest_reaching_tau": taus[reaching[0]] if reaching else None,
        "largest_within_half": within, "largest_within_half_tau": taus.get(within),
        "passes": bool(reaching) and reaching[0] <= half,
        "prompts": frontier["num_prompts"],
    }


def task_summary(folder: Path) -> dict[str, Any]:
    folder = Path(folder)
    frontier = _load(folder / "frontier.json")
    throughput = _load(folder / "throughput" / "throughput.json")
    calibrate = _load(folder / "calibrate" / "calibrate.json")
    regimes = _load(folder / "regimes" / "regimes.json")
    debias = _load(folder / "debias.json")
    settings = (frontier or {}).get("settings", {})
    out: dict[str, Any] = {"folder": str(folder), "task": settings.get("dataset", folder.name),
                           "lookup": settings.get("lookup", 0)}
    out["label"] = out["task"] + (f" hybrid (lookup ≤ {out['lookup']})" if out["lookup"] else "")
    out["half_size"] = check_half_size(folder)
    if throughput is not None:
        rows = {r["name"]: r for r in throughput["rows"]}
        best = rows[throughput["best_static"]]
        ref = rows.get(throughput["reference"]) if throughput.get("reference") else None
        half = out["half_size"]["largest_within_half"] if out["half_size"] else None
        out["throughput"] = {
            "prompts": throughput["num_prompts"], "split": throughput["split"], "dtype": throughput["machine"]["dtype"],
            "ar": throughput["ar"]["tokens_per_second"],
            "best_static": {k: best[k] for k in ("name", "size", "tokens_per_second", "speedup", "tau")},
            "reference": None if ref is None else {k: ref[k] for k in ("name", "size", "tokens_per_second", "speedup", "tau")},
            "pareto": throughput["pareto"],
            "held_out_half": None if half is None or f"n{half}" not in rows or ref is None else {
                "tree": f"n{half}", "tau": rows[f"n{half}"]["tau"], "reference_tau": ref["tau"]},
        }
    if calibrate is not None:
        out["calibrate"] = {"chosen": calibrate["chosen"], "best": calibrate["best"], "table1": calibrate.get("table1"),
                            "s_quantiles": calibrate.get("s_quantiles"), "heldout_replay": calibrate.get("heldout_replay"),
                            "calibration_replay": {r["policy"]: r["predicted_tokens_per_second"] for r in calibrate["rows"]
                                                   if r["policy"] in calibrate["best"].values()}}
    if regimes is not None:
        top = sorted((f for f in regimes["per_feature"] if f["r"] is not None), key=lambda f: -abs(f["r"]))[:5]
        out["regimes"] = {"rows": regimes["rows"], "prompts": regimes["prompts"],
                          "auroc": regimes["classifier"]["auroc_mean"], "auroc_std": regimes["classifier"]["auroc_std"],
                          "top": [(f["feature"], f["r"]) for f in top]}
    timing: dict[str, float] = {}
    if frontier is not None:
        timing["frontier calibration"] = frontier["timing"]["calibration_s"]
        timing["frontier growth"] = frontier["timing"]["search_s"]
    if debias is not None:
        timing["debias"] = debias["wall_time_s"]
    if throughput is not None:
        timing["throughput"] = throughput["wall_time_s"]
    if calibrate is not None:
        # with engine runs reused from the cache: this run's time plus theirs (when they recorded it)
        timing["calibrate"] = calibrate["timing"]["total_s"] + calibrate["timing"].get("reused_engine_s", 0.0)
        if calibrate["timing"].get("reused_engine_runs_untimed"):
            timing["calibrate: untimed reused runs"] = calibrate["timing"]["reused_engine_runs_untimed"]
        timing["calibrate: features"] = calibrate["timing"]["features_s"]
    if regimes is not None:
        timing["regimes"] = regimes["timing"]["total_s"]
    out["timing"] = timing
    compare = _load(folder / COMPARE / "offline.json")
    if compare is not None:
        out["compare"] = compare_summary(compare)
    offline = _load(folder / "throughput" / "offline.json")
    if offline is not None and throughput is not None:
        names = {r["method"]: r["name"] for r in throughput["rows"]} | {"ar": "AR"}
        out["throughput_time_by_method"] = {names.get(label, label): m["time_s"] for label, m in offline["methods"].items()}
    if frontier is not None:
        out["frontier_prompts"] = frontier["num_prompts"]
    out["stages"] = {"frontier": frontier is not None and frontier.get("complete", False), "debias": debias is not None,
                     "throughput": throughput is not None, "calibrate": calibrate is not None, "regimes": regimes is not None}
    return out


def _f(value: float | None, form: str = ".3f") -> str:
    return "–" if value is None else format(value, form)


def summary_markdown(tasks: Sequence[dict[str, Any]]) -> str:
    lines = ["## Stages finished", "", "| task | frontier | throughput | calibrate | regimes | debias |",
             "|---|---|---|---|---|---|"]
    for t in tasks:
        lines.append(f"| {t['label']} | " + " | ".join("yes" if t["stages"][s] else "no" for s in
                                                     ("frontier", "throughput", "calibrate", "regimes", "debias")) + " |")
    dtypes = "/".join(sorted({t["throughput"]["dtype"] for t in tasks if t.get("throughput")})) or "no throughput run"
    lines += ["", "## (a) τ of the published tree with at most half its nodes", "",
              "Calibration split, teacher-forced τ with the rank scorer (the frontier's trajectories), the same for the "
              f"reference; held out: engine τ on the throughput run's test prompts ({dtypes}).", "",
              "| task | prompts | reference τ (n) | smallest frontier tree reaching it | largest tree within half: τ | "
              "passes | held out: tree τ vs reference τ |", "|---|---:|---|---|---|---|---|"]
    for t in tasks:
        h = t["half_size"]
        if h is None:
            continue
        reach = "none up to the budget" if h["smallest_reaching"] is None else \
            f"n{h['smallest_reaching']} (τ {h['smallest_reaching_tau']:.3f})"
        held = (t.get("throughput") or {}).get("held_out_half")
        held_s = "–" if held is None else f"`{held['tree']}` {held['tau']:.3f} vs {held['reference_tau']:.3f}"
        lines.append(f"| {t['label']} | {h['prompts']} | {h['reference_tau']:.3f} ({h['reference_size']}) | {reach} | "
                     f"n{h['largest_within_half']}: {_f(h['largest_within_half_tau'])} | {'yes' if h['passes'] else 'no'} | "
                     f"{held_s} |")
    lines += ["", "## (b) EntMTP* vs the published tree vs AR (throughput run, held out)", "",
              "| task | prompts | AR tok/s | reference tok/s (ρ, τ) | EntMTP* tree | EntMTP* tok/s (ρ, τ) | Pareto bank |",
              "|---|---:|---:|---|---|---|---|"]
    for t in tasks:
        th = t.get("throughput")
        if th is None:
            continue
        ref, best = th["reference"], th["best_static"]
        ref_s = "–" if ref is None else f"{ref['tokens_per_second']:.2f} ({ref['speedup']:.2f}×, {ref['tau']:.2f})"
        lines.append(f"| {t['label']} | {th['prompts']} {th['split']} | {th['ar']:.2f} | {ref_s} | `{best['name']}` "
                     f"(n={best['size']}) | {best['tokens_per_second']:.2f} ({best['speedup']:.2f}×, {best['tau']:.2f}) | "
                     f"{', '.join(th['pareto'])} |")
    lines += scheduler_overview(tasks)
    lines += compare_table(tasks)
    lines += ["", "### Table-1 analogue (calibrate's held-out run)", ""]
    for t in tasks:
        c = t.get("calibrate")
        if not c or not c.get("table1"):
            continue
        t1 = c["table1"]
        lines += [f"**{t['label']}** — {t1['num_prompts']} test prompts, {t1['machine']['dtype']}; chosen policy "
                  f"`{c['chosen']['policy']}`.", "", "| method | tok/s | ρ | τ | × EntMTP* [95%] |",
                  "|---|---:|---:|---:|---|"]
        for r in t1["rows"]:
            lines.append(f"| {r['name']} | {r['tokens_per_second']:.2f} | {r['speedup']:.3f} | {r['tau']:.3f} | "
                         f"{paired_text(r.get('vs_static'))} |")
        lines.append("")
    lines += ["## (c) Wall time per stage (s)", "", "| task | " + " | ".join(
        ["frontier calibration", "frontier growth", "throughput", "calibrate", "regimes", "debias"]) + " |",
        "|---|" + "---:|" * 6]
    untimed = False
    for t in tasks:
        tm = t["timing"]
        cells = [_f(tm.get(k), ".0f") for k in ("frontier calibration", "frontier growth", "throughput", "calibrate",
                                                "regimes", "debias")]
        if tm.get("calibrate: untimed reused runs"):
            cells[3] += " +"
            untimed = True
        lines.append(f"| {t['label']} | " + " | ".join(cells) + " |")
    if untimed:
        lines += ["", "+: calibrate reused engine runs (check, held-out) from an earlier run that did not record their "
                  "wall time; only the rest is counted."]
    lines += ["", "Where the time goes (timed generations only; the bench's warm-up generation per method is extra):", ""]
    for t in tasks:
        parts = []
        if "frontier calibration" in t["timing"]:
            parts.append(f"frontier: {t['timing']['frontier calibration'] / max(t.get('frontier_prompts', 1), 1):.1f} s "
                         "per calibration prompt (greedy AR generation + one teacher-forced pass for the head ranks), "
                         f"growth {t['timing']['frontier growth']:.1f} s in all")
        by_method = t.get("throughput_time_by_method")
        if by_method:
            total = sum(by_method.values())
            parts.append("throughput: " + ", ".join(f"{k} {v:.0f} s ({100 * v / total:.0f}%)" for k, v in by_method.items()))
        if parts:
            lines.append(f"- {t['label']}: " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def summarize(folders: Sequence[str | Path], out: str | Path) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [task_summary(Path(f)) for f in folders]
    copied = []
    for folder, t in zip(folders, tasks):
        target = out / t["task"] / ("hybrid" if t["lookup"] else "")
        for name in COPY:
            src = Path(folder) / name
            if src.is_file() and src.stat().st_size < MAX_COPY_BYTES:
                dst = target / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                copied.append(str(dst))
    (out / "summary.md").write_text(summary_markdown(tasks), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps({"tasks": tasks, "copied": copied}, indent=1) + "\n", encoding="utf-8")
    return {"tasks": tasks, "copied": copied}
