"""Regime analysis (the paper's Appendix A): which per-step features predict the next accept length.

Records (`--source engine`, the default): the reference engine runs one static tree (greedy) on
the frontier's calibration prompts and logs, per decode step, `StepRecord.features` (what the policy sees *before* the step: path
value, p0, each head's top-1, entropy and its EMAs, recent accept stats) and the step's
`accept_length`. Prompt-lookup features (`lookup_match`, `lookup_tokens`: the longest n-gram
match of the context at the step and the tokens it would propose, as `PromptLookup` computes
them) are added from the context when the tree has no lookup branch (the engine logs them only
for hybrid trees). Steps go to `steps.jsonl`, one line per prompt (resumable).

`--source replay` builds the same records without running the engine: the static tree is replayed
over the frontier's calibration trajectories with the per-position features of
`tree_search.calibrate` (the features cache of `search calibrate` is reused when present). At
temperature 0 this is the engine's own run (a test checks features, trees and accept lengths step
by step on a tiny model); `--check-n K` also runs the engine on the first K prompts and reports
the largest feature difference and any accept-length mismatch against the replay.

"Next step": the features logged at step t were measured before step t ran (the scheduler
chooses step t's tree from them), so the target of row t is step t's accept length, i.e. the
next step's from the features' point of view (no leakage: the recent-accept features hold steps
< t only). The lag-1 variant (row t's features vs step t+1's accept length) is reported as well.

Per feature: Pearson r with the next accept length, and the single-feature AUROC for
"the next step accepts only the bonus token" (accept_length == 1). A logistic regression
(numpy, Newton steps with a small ridge, standardized features) on all features predicts the
same event; its AUROC is measured on held-out prompts: train/test split BY PROMPT (never by
row: adjacent steps of one generation are correlated), K folds over prompts plus one fixed
70/30 prompt split.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from entmtp_vllm.errors import EntMTPError

from tree_search.replay import output_tokens
from tree_search.report import write_stage_outputs

REGIMES_DIR = "regimes"
STEPS_FILE = "steps.jsonl"
BONUS_ONLY = "accept_length == 1"


# --------------------------------------------------------------------------- statistics


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson r; None when either side is constant or there are fewer than 3 rows."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3:
        return None
    xc, yc = x - x.mean(), y - y.mean()
    denom = math.sqrt(float((xc * xc).sum()) * float((yc * yc).sum()))
    if denom == 0.0:
        return None
    return float((xc * yc).sum() / denom)


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """Area under the ROC curve (Mann-Whitney, ties count one half); None without both classes."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=float)
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


@dataclass
class Logistic:
    """L2-regularised logistic regression on standardized features (Newton / IRLS)."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    """Bias first."""

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, ridge: float = 1e-3, iterations: int = 50) -> Logistic:
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        mean = x.mean(axis=0)
        scale = x.std(axis=0)
        scale[scale == 0] = 1.0
        z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
        w = np.zeros(z.shape[1])
        penalty = np.full(z.shape[1], ridge * len(x))
        penalty[0] = 0.0
        for _ in range(iterations):
            p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -35, 35)))
            grad = z.T @ (p - y) + penalty * w
            hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(w))
            step = np.linalg.solve(hess, grad)
            w -= step
            if float(np.abs(step).max()) < 1e-8:
                break
        return cls(mean, scale, w)

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=float) - self.mean) / self.scale
        return 1.0 / (1.0 + np.exp(-np.clip(self.weights[0] + z @ self.weights[1:], -35, 35)))


def _hash(key: str, seed: int) -> int:
    return int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:12], 16)


def split_by_prompt(prompt_ids: Sequence[str], test_fraction: float = 0.3, seed: int = 0) -> tuple[set[str], set[str]]:
    """(train prompts, test prompts): disjoint, by a seeded hash order of the distinct prompt ids;
    at least one prompt on each side when there are two or more."""
    distinct = sorted(set(prompt_ids), key=lambda p: _hash(p, seed))
    if len(distinct) < 2:
        raise EntMTPError(f"a split by prompt needs at least 2 prompts (got {len(distinct)})")
    n_test = min(max(1, round(test_fraction * len(distinct))), len(distinct) - 1)
    return set(distinct[n_test:]), set(distinct[:n_test])


def prompt_folds(prompt_ids: Sequence[str], k: int = 5, seed: int = 0) -> list[set[str]]:
    """K disjoint groups of prompts (each prompt in exactly one), by a seeded hash order."""
    distinct = sorted(set(prompt_ids), key=lambda p: _hash(p, seed))
    k = max(2, min(k, len(distinct)))
    return [set(distinct[i::k]) for i in range(k)]


# --------------------------------------------------------------------------- the analysis


def feature_names(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Feature columns present in every row, in first-row order."""
    if not rows:
        return []
    names = list(rows[0]["features"])
    return [n for n in names if all(n in r["features"] for r in rows)]


def pairs(generations: Sequence[dict[str, Any]], lag: int = 0) -> list[dict[str, Any]]:
    """Rows {prompt, features, target}: step t's features with step t+lag's accept length
    (same generation only)."""
    out = []
    for gen in generations:
        steps = gen["steps"]
        for t in range(len(steps) - lag):
            out.append({"prompt": gen["id"], "features": steps[t]["features"],
                        "target": steps[t + lag]["accept_length"]})
    return out


def analyse(generations: Sequence[dict[str, Any]], folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Per-feature r / AUROC and the logistic-regression AUROC on held-out prompts."""
    rows = pairs(generations, lag=0)
    lagged = pairs(generations, lag=1)
    names = feature_names(rows)
    if len(rows) < 3 or not names:
        raise EntMTPError(f"too few step rows to analyse ({len(rows)})")
    x = np.array([[r["features"][n] for n in names] for r in rows], dtype=float)
    target = np.array([r["target"] for r in rows], dtype=float)
    label = (target == 1).astype(int)
    xl = np.array([[r["features"][n] for n in names] for r in lagged], dtype=float) if lagged else np.zeros((0, len(names)))
    tl = np.array([r["target"] for r in lagged], dtype=float)
    per_feature = []
    for j, name in enumerate(names):
        single = auroc(x[:, j], label)
        per_feature.append({
            "feature": name,
            "r": pearson(x[:, j], target),
            "r_lag1": pearson(xl[:, j], tl) if len(tl) else None,
            "auroc": None if single is None else max(single, 1.0 - single),
            "auroc_sign": None if single is None else ("+" if single >= 0.5 else "−"),
            "mean": float(x[:, j].mean()),
        })

    prompts = [r["prompt"] for r in rows]
    prompt_arr = np.array(prompts)

    def fit_eval(train: set[str], test: set[str]) -> float | None:
        tr = np.isin(prompt_arr, list(train))
        te = np.isin(prompt_arr, list(test))
        if label[tr].min(initial=1) == label[tr].max(initial=0):
            return None
        model = Logistic.fit(x[tr], label[tr])
        return auroc(model.predict(x[te]), label[te])

    fold_scores = []
    groups = prompt_folds(prompts, folds, seed)
    for held in groups:
        score = fit_eval(set(prompts) - held, held)
        if score is not None:
            fold_scores.append(score)
    train, test = split_by_prompt(prompts, 0.3, seed)
    holdout = fit_eval(train, test)
    full = Logistic.fit(x, label) if 0 < label.sum() < len(label) else None
    return {
        "rows": len(rows),
        "prompts": len(set(prompts)),
        "features": names,
        "mean_accept_length": float(target.mean()),
        "bonus_only_rate": float(label.mean()),
        "per_feature": per_feature,
        "classifier": {
            "model": "logistic regression (standardized, ridge 1e-3·n, Newton)",
            "event": BONUS_ONLY,
            "folds": len(groups),
            "auroc_folds": fold_scores,
            "auroc_mean": float(np.mean(fold_scores)) if fold_scores else None,
            "auroc_std": float(np.std(fold_scores)) if fold_scores else None,
            "holdout": {"train_prompts": len(train), "test_prompts": len(test), "auroc": holdout},
            "weights": None if full is None else dict(zip(["bias", *names], map(float, full.weights))),
        },
    }


# --------------------------------------------------------------------------- collecting records


def lookup_features(context: Sequence[int], lookup, max_tokens: int) -> dict[str, float]:
    match = lookup.propose(list(context), max_tokens)
    return {"lookup_match": float(match.match_length), "lookup_tokens": float(len(match.tokens))}


def generation_record(trajectory_id: str, prompt_ids: Sequence[int], gen, lookup, lookup_len: int) -> dict[str, Any]:
    """One prompt's step rows: features (+ lookup features from the context), accept length."""
    steps = []
    emitted = 1  # the prefill emitted the first root
    for record in gen.steps:
        features = dict(record.features or {})
        if lookup is not None and "lookup_match" not in features:
            context = list(prompt_ids) + gen.token_ids[:emitted]
            features.update(lookup_features(context, lookup, lookup_len))
        steps.append({"features": features, "accept_length": record.accept_length, "tree": record.tree_name})
        emitted += record.accept_length
    return {"kind": "generation", "id": trajectory_id, "tokens": gen.num_tokens, "steps": steps}


def replay_records(folder: Path, settings: dict[str, Any], calibration, name: str, tree, lookup_on: bool,
                   resources, out: Path, progress: bool) -> dict[str, dict[str, Any]]:
    """Step records of `tree` (static) replayed over every calibration trajectory, by prompt id."""
    from entmtp_vllm.lookup import LookupConfig, PromptLookup

    from tree_search.calibrate import CALIBRATE_DIR
    from tree_search.position_features import FEATURES_FILE, build_features, feature_settings
    from tree_search.replay import replay
    from tree_search.resumable import read_jsonl, settings_difference

    wanted = feature_settings(folder, settings, calibration)
    cache = folder / CALIBRATE_DIR / FEATURES_FILE
    old, _, _ = read_jsonl(cache, "features cache")
    if old is None or settings_difference(old, wanted):
        cache = out / FEATURES_FILE
    features = build_features(calibration, resources.load, cache, wanted, progress)
    result = replay({"kind": "static", "tree": name}, [(name, tree)], calibration, features, detail=True)
    lookup = PromptLookup(LookupConfig()) if lookup_on and not tree.lookup_length else None
    by_prompt: dict[int, list[dict[str, Any]]] = {}
    for step in result.per_step:
        by_prompt.setdefault(step["prompt"], []).append(step)
    records = {}
    for k, trajectory in enumerate(calibration.trajectories):
        steps = []
        for step in by_prompt.get(k, []):
            row = dict(step["features"])
            if lookup is not None:
                context = trajectory.prompt_ids + trajectory.tokens[: step["position"] + 1]
                row.update(lookup_features(context, lookup, calibration.rank_depth))
            steps.append({"features": row, "accept_length": step["accept_length"], "tree": step["tree"]})
        records[trajectory.id] = {"kind": "generation", "id": trajectory.id,
                                  "tokens": output_tokens(trajectory, calibration.max_tokens, calibration.eos_ids),
                                  "steps": steps}
    return records


def check_against_engine(trajectories, replayed: dict[str, dict[str, Any]], name: str, tree, max_tokens: int,
                         lookup_on: bool, depth: int, resources) -> dict[str, Any]:
    """Run the engine on `trajectories` and compare its step records with the replayed ones."""
    from entmtp_vllm.engine.reference import ReferenceEngine
    from entmtp_vllm.lookup import LookupConfig, PromptLookup
    from entmtp_vllm.topology import TopologyBank

    model, tokenizer, drafter = resources.load()
    engine = ReferenceEngine(model, tokenizer, drafter, TopologyBank([tree], [name]), head_features=True)
    lookup = PromptLookup(LookupConfig()) if lookup_on and not tree.lookup_length else None
    steps = mismatched_steps = 0
    diff = 0.0
    for trajectory in trajectories:
        gen = engine.generate(trajectory.prompt_ids, max_tokens, acceptance="greedy")
        real = generation_record(trajectory.id, trajectory.prompt_ids, gen, lookup, depth)["steps"]
        mine = replayed[trajectory.id]["steps"]
        steps += len(real)
        mismatched_steps += abs(len(real) - len(mine))
        for a, b in zip(real, mine):
            mismatched_steps += a["accept_length"] != b["accept_length"]
            for key, value in a["features"].items():
                diff = max(diff, abs(value - b["features"].get(key, float("nan"))))
    return {"prompts": len(trajectories), "engine_steps": steps, "accept_mismatches": mismatched_steps,
            "max_abs_feature_diff": diff}


@dataclass
class RegimesConfig:
    frontier: str
    tree: str = "n16"
    """A frontier tree `n<size>`, or any tree source (`full:2,1,1`, FILE#NAME)."""
    num_prompts: int | None = 100
    max_tokens: int | None = None
    dtype: str | None = None
    """Default: the frontier's."""
    out: str | None = None
    folds: int = 5
    seed: int = 0
    threads: int = 1
    lookup: bool = True
    source: str = "engine"
    """engine: run the reference engine; replay: replay the tree over the calibration trajectories."""
    check_n: int = 3
    """With replay: prompts also run in the engine to compare (0: none)."""


def _resolve_tree(spec: str, folder: Path):
    from entmtp_vllm.bank_file import load_tree_source

    from tree_search.debias import read_frontier

    if spec.startswith("n") and spec[1:].isdigit():
        _, steps = read_frontier(folder)
        by_size = {s.size: s for s in steps}
        size = int(spec[1:])
        if size not in by_size:
            raise EntMTPError(f"--tree {spec}: size {size} is not on the frontier in {folder} (1..{max(by_size)})")
        return spec, by_size[size].as_tree()
    source, _, name = spec.partition("#")
    found = load_tree_source(source, name or None)
    if len(found) != 1:
        raise EntMTPError(f"--tree {spec!r} names {len(found)} trees; pick one with FILE#NAME")
    return found[0]


def run_regimes(config: RegimesConfig, progress: bool = True, log: Callable[[str], None] | None = None,
                resources=None) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    from entmtp_vllm.engine.reference import ReferenceEngine
    from entmtp_vllm.lookup import LookupConfig, PromptLookup
    from entmtp_vllm.topology import TopologyBank

    from tree_search.trajectories import load_calibration
    from tree_search.resumable import append_jsonl, resume_jsonl, rewrite_jsonl
    from tree_search.debias import _raw_setting, read_frontier
    from tree_search.frontier import CALIBRATION_LOG, Resources

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    started = time.perf_counter()
    folder = Path(config.frontier)
    settings, _ = read_frontier(folder)
    calibration = load_calibration(folder / CALIBRATION_LOG)
    name, tree = _resolve_tree(config.tree, folder)
    trajectories = calibration.trajectories[: config.num_prompts] if config.num_prompts else calibration.trajectories
    max_tokens = config.max_tokens or calibration.max_tokens
    dtype = config.dtype or settings["dtype"]
    out = Path(config.out) if config.out else folder / REGIMES_DIR
    out.mkdir(parents=True, exist_ok=True)
    run_settings = {"frontier": str(folder), "dataset": settings["dataset"], "tree": name, "choices": tree.choices,
                    "dtype": dtype, "max_tokens": max_tokens, "prompt_ids": [t.id for t in trajectories],
                    "lookup": config.lookup, "source": config.source}
    path = out / STEPS_FILE
    records, truncated = resume_jsonl(path, "step records", run_settings, "generation",
                                      "{path} holds records made with other settings ({diff}); use another --out")
    done: dict[str, dict[str, Any]] = {r["id"]: r for r in records if r.get("kind") == "generation"}
    if truncated:
        rewrite_jsonl(path, run_settings, list(done.values()))
    missing = [t for t in trajectories if t.id not in done]
    collect_started = time.perf_counter()
    engine_check = None
    if config.source not in ("engine", "replay"):
        raise EntMTPError(f"--source must be engine or replay (got {config.source!r})")
    resources = resources or Resources(_raw_setting(settings["model"], "embedded"),
                                       _raw_setting(settings["heads"], "shipped"), dtype)
    if config.source == "replay":
        if dtype != settings["dtype"] or max_tokens != calibration.max_tokens:
            raise EntMTPError("--source replay uses the frontier's dtype and --max-tokens (its calibration trajectories)")
        torch.set_num_threads(config.threads)
        replayed = replay_records(folder, settings, calibration, name, tree, config.lookup, resources, out, progress)
        for trajectory in missing:
            done[trajectory.id] = replayed[trajectory.id]
            append_jsonl(path, replayed[trajectory.id])
        missing = []
        if config.check_n > 0:
            engine_check = check_against_engine(trajectories[: config.check_n], replayed, name, tree, max_tokens,
                                                config.lookup, calibration.rank_depth, resources)
            log(f"engine check on {engine_check['prompts']} prompts: {engine_check['accept_mismatches']} accept-length "
                f"mismatches, largest feature difference {engine_check['max_abs_feature_diff']:.2e}")
    if missing:
        torch.set_num_threads(config.threads)
        model, tokenizer, drafter = resources.load()
        engine = ReferenceEngine(model, tokenizer, drafter, TopologyBank([tree], [name]), head_features=True)
        lookup = PromptLookup(LookupConfig()) if config.lookup and not tree.lookup_length else None
        bar = tqdm(total=len(trajectories), initial=len(trajectories) - len(missing), unit="prompt",
                   desc=f"step records ({name}, reference engine, greedy)", disable=not progress)
        for trajectory in missing:
            gen = engine.generate(trajectory.prompt_ids, max_tokens, acceptance="greedy")
            record = generation_record(trajectory.id, trajectory.prompt_ids, gen, lookup, calibration.rank_depth)
            done[trajectory.id] = record
            append_jsonl(path, record)
            bar.update()
        bar.close()
    collect_s = time.perf_counter() - collect_started
    generations = [done[t.id] for t in trajectories]
    analysis = analyse(generations, config.folds, config.seed)
    results = {
        "regimes": "per-step features vs the next step's accept length (reference engine, static tree, greedy)",
        "settings": run_settings | {"prompt_ids": None, "num_prompts": len(trajectories), "folds": config.folds,
                                    "seed": config.seed},
        **analysis,
        "engine_check": engine_check,
        "timing": {"collect_s": collect_s, "total_s": time.perf_counter() - started},
    }
    results["outputs"] = write_regimes_outputs(results, out)
    return results


# --------------------------------------------------------------------------- outputs


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
