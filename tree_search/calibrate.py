"""Scheduler calibration: EntMTP^τ (hysteresis on the path value) and the ladder, chosen on the
calibration split, written into the bank file's `policy`.

The sweep is cheap because at temperature 0 it can be *replayed*: every policy walks the same
greedy trajectory (tree decoding is lossless), and everything a policy reads at a step is either
a function of the position alone (p0, entropy, the heads' top-1 chain, hence the path value s),
or of the accept lengths so far (entropy EMAs, recent accept stats; `FeatureTracker` recomputes
them). So, per calibration prompt of the frontier (its `calibration.jsonl`):

1. features once: one teacher-forced target forward gives p0 and the entropy at every root
   position, and the engine's own `TreeDrafter.begin(...).greedy_chain(D)` gives the heads'
   top-1 chain there (cached in `features.jsonl`, resumable);
2. replay per policy: the real `Policy` object chooses a tree from real `StepFeatures`; the
   tree's accept length at that position comes from the oracle rank path (as in the frontier's
   `RankScorer`), and the walk moves on. This is exactly the engine's greedy run at the
   frontier's dtype (a test checks it against `ReferenceEngine` records);
3. cost: per-tree decode-step time and prefill time per prompt token, measured by the step-cost
   probe (`step_costs`: every tree decodes `--cost-prompts` calibration prompts as a static tree,
   the trees taking turns step by step, so that every tree is timed under the same load; the
   trees of a bank differ by a few ms per step, about what separately timed runs drift by), or with
   `--cost-prompts 0` from `entmtp search throughput`'s runs; predicted tok/s = tokens / (prefill +
   Σ steps × step time of the tree chosen). This is τ per cost, with the costs measured.

The policy with the best predicted tok/s over all calibration prompts is chosen (timing noise on
a shared CPU over a few prompts is larger than most differences between thresholds, the replay
has none); `--select measured` chooses by the engine check instead. The engine check times the
best few policies, the best static tree and AR with the `bench offline` protocol on `--num-prompts`
calibration prompts. Finally a held-out run (`--test-n` test-split prompts) gives the Table-1
analogue: AR, the published reference tree, EntMTP* (the best static tree), EntMTP^τ (the best
hysteresis policy, on whichever feature), the best hysteresis on the paper's path value s when that
is another policy, and the ladder when the bank has three trees or more.

Policies swept: static (each tree); hysteresis for every (conservative, aggressive) pair with
τ_on ∈ {0.001, 0.005, 0.01, 0.02, 0.05} (the paper's grid) with τ_off = τ_on, τ_on/2, τ_on/5,
plus τ_on at quantiles of the observed s (the paper's grid sits in the far lower tail of s for a
well-calibrated small model) with τ_off = τ_on or the next lower quantile; single-threshold
hysteresis at their quantiles (family `hysteresis@FEATURE`) on head 1's top-1 probability
`head_top1_1` (the drafter's own confidence: the regime analysis finds it the strongest predictor
of the next accept length, while the path value max(p0, p0·p1, ...) equals p0 and is nearly blind)
and on the history features `recent_accept_mean` and `last_accept_length`, and, for banks with
hybrid trees, on the lookup features `lookup_match` and `lookup_accept_rate` (`HybridReplay`
replays the lookup drafter, its features and the cut chains exactly as the engines run them; a
test checks it against `ReferenceEngine`); ladders over the bank sorted by size (every three of
them, and all) with edges at quantiles of s and of `head_top1_1` (uniform, low- and high-skewed).

Files: `position_features.py` (step 1), `replay.py` (step 2), `step_costs.py` (step 3: the probe and
`CostModel`), `policy_grid.py` (the policies swept, the sweep), `calibrate_report.py` (outputs);
this module runs the stage and writes the chosen policy into the bank.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from entmtp_vllm.bank_file import BankFile, load_bank, save_bank
from entmtp_vllm.bench.paired import paired_speed
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.policies import validate_policy_config
from entmtp_vllm.tree import Tree

from tree_search.calibrate_report import write_calibrate_outputs
from tree_search.policy_grid import SWEPT_FEATURES, best_of, final_trees, policy_grid, quantile, sweep
from tree_search.position_features import FEATURES_FILE, PositionFeatures, build_features, feature_settings
from tree_search.replay import replay
from tree_search.resumable import settings_difference
from tree_search.step_costs import (
    STEP_COSTS_FILE,
    CostModel,
    cost_model_from_probe,
    cost_model_from_throughput,
    probe_step_costs,
)
from tree_search.trajectories import CALIBRATION_FILE, Calibration, load_calibration

CALIBRATE_DIR = "calibrate"


def write_policy(bank_path: Path, policy: dict[str, Any], extra_trees: Sequence[dict[str, Any]],
                 metadata: dict[str, Any], base: Sequence[str] | None = None) -> BankFile:
    """Put `policy` into the bank file, with the trees it needs that the bank lacks (`extra_trees`,
    recorded in `metadata.calibration_added_trees`); validated by loading it back. `base` keeps only
    those trees of the file (dropping trees an earlier calibration added)."""
    bank = load_bank(bank_path)
    data = bank.model_dump(mode="json")
    if base is not None:
        data["trees"] = [t for t in data["trees"] if t["name"] in base]
    have = {t["name"] for t in data["trees"]}
    added = [t for t in extra_trees if t["name"] not in have]
    data["trees"] += added
    data["policy"] = validate_policy_config(policy).model_dump(mode="json")
    data["metadata"] = {**data.get("metadata", {}), **metadata, "calibration_added_trees": [t["name"] for t in added]}
    updated = BankFile.model_validate(data)
    save_bank(updated, bank_path)
    return load_bank(bank_path)


# --------------------------------------------------------------------------- the whole run


@dataclass
class CalibrateConfig:
    """Everything `entmtp search calibrate` depends on."""

    bank: str
    frontier: str
    throughput: str | None = None
    """throughput.json with the step costs (default: the bank's `metadata.throughput`)."""
    out: str | None = None
    """Default: `<frontier>/calibrate`."""
    dtype: str = "bfloat16"
    """Precision of the engine runs (the replay uses the frontier's)."""
    num_prompts: int = 10
    """Calibration prompts of the engine check."""
    test_n: int = 10
    """Test prompts of the held-out Table-1 run (0: none)."""
    check_top: int = 3
    """Scheduler policies (best predicted) timed in the engine check."""
    select: str = "predicted"
    max_tokens: int | None = None
    threads: int = 1
    reference: str | None = None
    """Published tree for the Table-1 run (default: the throughput run's)."""
    candidates: str = "timed"
    """bank: the bank's trees only; timed: also every frontier tree the throughput run timed (a tree
    that is not throughput-Pareto as a static tree can still pay off as the aggressive one)."""
    cost_prompts: int = 8
    """Calibration prompts of the step-cost probe (`step_costs`: every tree decodes them statically,
    the trees taking turns step by step); 0: take the step costs from the throughput run instead."""
    heldout: str | None = None
    """A frontier folder over other prompts (e.g. `entmtp search frontier --split test`): the best
    policies, chosen here, are also replayed over its trajectories (held-out replay: no timing
    noise, and every policy on the same tokens)."""


def _cached_run(path: Path, wanted: dict[str, Any], run: Callable[[], dict[str, Any]], log,
                reused: list[float | None]) -> dict[str, Any]:
    """`run()`'s result, reused from `path` when its `config` equals `wanted` (then its recorded wall
    time, or None, is appended to `reused`); a fresh result gets `config` and its wall time (`wall_s`)."""
    wanted = json.loads(json.dumps(wanted))
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if json.loads(json.dumps(old.get("config"))) == wanted:
            log(f"reusing {path}")
            reused.append(old.get("wall_s"))
            return old
    started = time.perf_counter()
    result = run()
    result["config"], result["wall_s"] = wanted, time.perf_counter() - started
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def _cached_offline(path: Path, bench_cfg, run, progress, log, reused: list[float | None]) -> dict[str, Any]:
    """A `run_offline` result, reused from `path` when it was made with the same methods and prompts."""
    from dataclasses import asdict

    wanted = asdict(bench_cfg) | {"methods": [m.label for m in bench_cfg.methods]}
    return _cached_run(path, wanted, lambda: run(bench_cfg, progress=progress, log=log), log, reused)


def _cached_probe(path: Path, probe_cfg, trees: Sequence[tuple[str, Tree]], progress, log,
                  reused: list[float | None]) -> dict[str, Any]:
    """`probe_step_costs` of `trees`, reused from `path` when made with the same trees and settings."""
    from dataclasses import asdict

    wanted = {"bench": asdict(probe_cfg) | {"methods": []}, "trees": {name: tree.choices for name, tree in trees}}
    return _cached_run(path, wanted, lambda: probe_step_costs(probe_cfg, trees, progress=progress, log=log), log,
                       reused)


def _load_heldout(heldout: str, folder: Path, settings: dict[str, Any],
                  calibration: Calibration) -> tuple[Path, dict[str, Any], Calibration]:
    """(folder, settings, calibration) of `--heldout`: the same model, heads and dtype as the frontier
    folder, over other prompts."""
    from tree_search.debias import read_frontier

    held_folder = Path(heldout)
    held_settings, _ = read_frontier(held_folder)
    if settings_difference({k: settings.get(k) for k in ("model", "heads", "dtype")},
                           {k: held_settings.get(k) for k in ("model", "heads", "dtype")}):
        raise EntMTPError(f"--heldout {held_folder} was made with another model, heads or dtype than {folder}")
    held = load_calibration(held_folder / CALIBRATION_FILE)
    overlap = {t.id for t in held.trajectories} & {t.id for t in calibration.trajectories}
    if overlap:
        raise EntMTPError(f"--heldout {held_folder} shares {len(overlap)} prompts with the calibration "
                          f"(e.g. {sorted(overlap)[0]}): use another split (--split test)")
    return held_folder, held_settings, held


def _sweep_trees(bank: BankFile, throughput: dict[str, Any], candidates: str,
                 log: Callable[[str], None]) -> tuple[list[str], list[tuple[str, Tree]], dict[str, dict[str, Any]]]:
    """(base, trees, pool entries): the bank's own trees (without those an earlier calibration added),
    the trees the sweep may use (`--candidates timed`: also the timed frontier trees), and every one of
    them as a bank-file tree entry (the timed ones with their measured τ and tok/s)."""
    if candidates not in ("bank", "timed"):
        raise EntMTPError(f"--candidates must be bank or timed (got {candidates!r})")
    added_before = set(bank.metadata.get("calibration_added_trees") or [])
    base_entries = [t for t in bank.trees if t.name not in added_before]
    base = [t.name for t in base_entries]
    trees = [(t.name, t.tree()) for t in base_entries]
    timed_entries: dict[str, dict[str, Any]] = {}
    for row in throughput["rows"]:
        if row["frontier"] and row["name"] not in base:
            timed_entries[row["name"]] = {"name": row["name"], "choices": row["choices"], "measured": {
                "accept_length": max(1.0, row["tau"]), "tokens_per_second": row["tokens_per_second"],
                "nodes": row["size"] + 1, "steps": row["steps"] or None}}
    if candidates == "timed" or len(trees) < 2:
        trees += [(name, Tree.from_choices(e["choices"])) for name, e in timed_entries.items()]
        log(f"sweep trees: bank {base} + timed frontier trees {list(timed_entries)}")
    pool_entries = {t.name: t.model_dump(mode="json") for t in base_entries} | timed_entries
    return base, trees, pool_entries


def _swept_feature_values(per_step: Sequence[dict[str, Any]], trees: Sequence[tuple[str, Tree]]) -> dict[str, list]:
    """Observed values of the features swept besides the path value (`SWEPT_FEATURES` present at every
    step, e.g. head_top1_1 in banks with heads; with hybrid trees the lookup features too)."""
    others = {f: [step["features"][f] for step in per_step] for f in SWEPT_FEATURES
              if all(f in step["features"] for step in per_step)}  # head_top1_1: banks with heads
    if any(tree.lookup_length for _, tree in trees):  # hybrid trees: thresholds on the lookup features too
        for f in ("lookup_match", "lookup_accept_rate"):
            others[f] = [step["features"].get(f, 0.0) for step in per_step]
    return others


def _heldout_replay(compared: Sequence[tuple[str, dict[str, Any] | None]], trees: Sequence[tuple[str, Tree]],
                    base: Sequence[str], costs: CostModel, held_folder: Path, held: Calibration,
                    held_features: Sequence[PositionFeatures]) -> dict[str, Any]:
    """The `compared` policies (the first one: EntMTP*) replayed over the held-out trajectories."""
    held_rows, seen = [], set()
    for title, r in compared:
        if r is None or r["policy"] in seen:
            continue
        seen.add(r["policy"])
        result = replay(r["config"], final_trees(r["config"], trees, base), held, held_features)
        held_rows.append({"name": title, "policy": r["policy"], "tau": result.tau,
                          "predicted_tokens_per_second": costs.tokens_per_second(result),
                          "calibration_predicted_tokens_per_second": r["predicted_tokens_per_second"]})
    static_tps = held_rows[0]["predicted_tokens_per_second"]
    for row in held_rows:
        row["vs_static"] = row["predicted_tokens_per_second"] / static_tps
    return {"frontier": str(held_folder), "prompts": held.num_prompts, "rows": held_rows}


def _table1(config: CalibrateConfig, settings: dict[str, Any], throughput: dict[str, Any],
            compared: Sequence[tuple[str, dict[str, Any] | None]], static: dict[str, Any],
            method_for: Callable[[dict[str, Any]], str], run: Callable[[Any], dict[str, Any]],
            log: Callable[[str], None]) -> dict[str, Any]:
    """The held-out Table-1 analogue: AR, the published reference tree and the `compared` policies
    (`method_for`: their `bank:FILE` methods) on `--test-n` test prompts (`run`: the offline bench,
    cached), each paired with EntMTP* (`static`)."""
    from tree_search.throughput import bench_config, method_row

    reference = config.reference or throughput.get("reference")
    if reference and reference.lower() == "none":
        reference = None
    methods = ["ar"]
    named = {}
    if reference:
        cand = throughput["outputs"].get("candidates")
        methods.append(f"tree:{cand}#{reference}")
        named[methods[-1]] = f"{reference} (published)"
    for title, r in compared:
        if r is not None and method_for(r) not in methods:
            methods.append(method_for(r))
            named[methods[-1]] = f"{title}: {r['policy']}"
    cfg = bench_config(settings, methods, dtype=config.dtype, num_prompts=config.test_n, split="test", seed=None,
                       max_tokens=config.max_tokens, threads=config.threads)
    cfg.extra = {"policies": {m: named[m] for m in methods[1:]}}
    log(f"held-out run: {len(methods)} methods on {config.test_n} test prompts, {config.dtype}")
    test = run(cfg)
    table1 = {"num_prompts": test["num_prompts"], "machine": test["machine"], "rows": [
        {"name": named.get(m, "AR"), **method_row(m, test["methods"][m])} for m in methods]}
    static_method = method_for(static)
    for m, row in zip(methods, table1["rows"]):
        if m not in ("ar", static_method):
            row["vs_static"] = paired_speed(test["methods"][m], test["methods"][static_method])
    same_prompts = (throughput["split"] == "test" and throughput["num_prompts"] == test["num_prompts"]
                    and throughput["bench"]["seed"] == test["config"]["seed"])
    if reference is None and throughput.get("reference") and same_prompts:
        ref = next(r for r in throughput["rows"] if r["name"] == throughput["reference"])
        table1["rows"].insert(1, {"name": f"{ref['name']} (published; from the throughput run, same prompts)",
                                  "from_throughput_run": True, **{k: ref[k] for k in (
                                      "method", "tokens_per_second", "speedup", "tau", "mean_nodes")}})
    return table1


def run_calibrate(config: CalibrateConfig, progress: bool = True, log: Callable[[str], None] | None = None,
                  resources=None, bench: Callable[..., dict[str, Any]] | None = None) -> dict[str, Any]:
    from entmtp_vllm.bench.offline import run_offline

    from tree_search.debias import read_frontier
    from tree_search.resources import Resources
    from tree_search.throughput import bench_config, method_row

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    bench = bench or run_offline
    started = time.perf_counter()
    if config.cost_prompts < 0:
        raise EntMTPError(f"--cost-prompts must be 0 or more (got {config.cost_prompts})")
    if config.select not in ("predicted", "measured"):
        raise EntMTPError(f"--select must be predicted or measured (got {config.select!r})")
    bank_path = Path(config.bank)
    bank = load_bank(bank_path)
    folder = Path(config.frontier)
    settings, _ = read_frontier(folder)
    calibration = load_calibration(folder / CALIBRATION_FILE)
    held = _load_heldout(config.heldout, folder, settings, calibration) if config.heldout else None  # replayed later
    throughput_path = Path(config.throughput or bank.metadata.get("throughput") or bank_path.parent / "throughput.json")
    if not throughput_path.is_file():
        raise EntMTPError(f"no throughput results at {throughput_path}: run `entmtp search throughput` first "
                          "or pass --throughput FILE")
    throughput = json.loads(throughput_path.read_text(encoding="utf-8"))
    out = Path(config.out) if config.out else folder / CALIBRATE_DIR
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(config.threads)

    base, trees, pool_entries = _sweep_trees(bank, throughput, config.candidates, log)
    reused_runs: list[float | None] = []  # wall times of engine runs reused from the cache (None: not recorded)
    step_costs = None
    if config.cost_prompts > 0:
        probe_cfg = bench_config(settings, ["ar"], dtype=config.dtype, num_prompts=config.cost_prompts, split="calib",
                                 seed=None, max_tokens=config.max_tokens, threads=config.threads)
        step_costs = _cached_probe(out / STEP_COSTS_FILE, probe_cfg, trees, progress, log, reused_runs)
        costs = cost_model_from_probe(step_costs)
    else:
        costs = cost_model_from_throughput(throughput, trees)

    # 1. features along the calibration trajectories (the frontier's dtype)
    resources = resources or Resources.of_frontier(settings, settings["dtype"])
    feat_settings = feature_settings(folder, settings, calibration)
    features_started = time.perf_counter()
    features = build_features(calibration, resources.load, out / FEATURES_FILE, feat_settings, progress)
    features_s = time.perf_counter() - features_started

    # 2. replay sweep
    sweep_started = time.perf_counter()
    static_rows = sweep(policy_grid(trees, [])[: len(trees)], trees, calibration, features, costs, base)
    best_static = static_rows[0]
    observed = replay(best_static["config"], final_trees(best_static["config"], trees, base), calibration, features,
                      detail=True)
    s_values = [step["features"]["path_value"] for step in observed.per_step]
    others = _swept_feature_values(observed.per_step, trees)
    rows = sweep(policy_grid(trees, s_values, others), trees, calibration, features, costs, base)
    sweep_s = time.perf_counter() - sweep_started
    best_static = best_of(rows, "static")
    best_hyst = best_of(rows, "hysteresis")
    best_ladder = best_of(rows, "ladder")

    # 3. engine check on calibration prompts
    check_rows = [best_static] + [r for r in rows if r["family"] != "static"][: config.check_top]
    if best_ladder is not None and best_ladder not in check_rows:
        check_rows.append(best_ladder)
    policy_dir = out / "policy_banks"
    policy_dir.mkdir(exist_ok=True)
    label: dict[str, str] = {}

    def method_for(r: dict[str, Any]) -> str:
        """`bank:FILE` of a bank file holding exactly the bank this policy ships in, and the policy."""
        if r["policy"] not in label:
            path = policy_dir / f"policy{len(label):02d}.json"
            save_bank(BankFile.model_validate({
                "model": bank.model, "task": bank.task, "policy": r["config"],
                "trees": [pool_entries[name] for name in r["bank"]],
                "metadata": {"source": "tree_search calibrate: a policy timed in the engine", "policy": r["policy"]},
            }), path)
            label[r["policy"]] = f"bank:{path}"
        return label[r["policy"]]

    check = None
    if config.num_prompts > 0:
        cfg = bench_config(settings, ["ar"] + [method_for(r) for r in check_rows], dtype=config.dtype,
                           num_prompts=config.num_prompts, split="calib", seed=None, max_tokens=config.max_tokens,
                           threads=config.threads)
        cfg.extra = {"policies": {label[r["policy"]]: r["policy"] for r in check_rows}}
        log(f"engine check: {len(check_rows)} policies + AR on {config.num_prompts} calibration prompts, {config.dtype}")
        check = _cached_offline(out / "check_offline.json", cfg, bench, progress, log, reused_runs)
        for r in rows:
            m = check["methods"].get(label.get(r["policy"], ""))
            if m is not None:
                row = method_row(label[r["policy"]], m)
                r["measured_calib"] = {k: row[k] for k in ("tokens_per_second", "speedup", "tau", "mean_nodes")}
                r["measured_tokens_per_second"] = row["tokens_per_second"]
    key = "predicted_tokens_per_second" if config.select == "predicted" else "measured_tokens_per_second"
    if config.select == "measured" and check is None:
        raise EntMTPError("--select measured needs the engine check (--num-prompts > 0)")
    chosen = max((r for r in rows if r.get(key) is not None), key=lambda r: r[key])
    # EntMTP^τ: the best hysteresis policy on any feature; and the best on the paper's path value
    best_paper = best_of(rows, "hysteresis", key) or best_hyst
    best_hyst_sel = max((r for r in rows if r["family"].partition("@")[0] == "hysteresis" and r.get(key) is not None),
                        key=lambda r: r[key], default=best_paper)
    best_static_sel = best_of(rows, "static", key) or best_static
    # the policies held out against each other (replay and Table 1), EntMTP* first
    compared = [("EntMTP* (best static)", best_static_sel), ("EntMTP^τ (hysteresis)", best_hyst_sel),
                ("EntMTP^τ on the path value s (the paper's feature)", best_paper), ("EntMTP-l (ladder)", best_ladder)]

    # 4. the chosen policy into the bank
    summary = {k: chosen[k] for k in ("policy", "family", "source", "tau", "predicted_tokens_per_second")}
    extra_trees = [pool_entries[name] for name in chosen["bank"] if name not in base]
    updated = write_policy(bank_path, chosen["config"], extra_trees, base=base, metadata={"calibration": {
        "chosen": summary, "select": config.select, "calibration_prompts": calibration.num_prompts,
        "engine_check_prompts": config.num_prompts, "results": str(out / "calibrate.json"),
        "best_static": best_static_sel["policy"], "best_hysteresis": best_hyst_sel["policy"] if best_hyst_sel else None,
    }})

    # 5. held-out replay: the policies chosen above, over another folder's trajectories
    heldout = None
    if held is not None:
        held_folder, held_settings, held_calibration = held
        held_features = build_features(held_calibration, resources.load, out / "heldout_features.jsonl",
                                       feature_settings(held_folder, held_settings, held_calibration), progress)
        heldout = _heldout_replay(compared + [("chosen", chosen)], trees, base, costs, held_folder, held_calibration,
                                  held_features)
        log(f"held-out replay over {held_calibration.num_prompts} prompts of {held_folder}")

    # 6. held-out Table-1 analogue
    table1 = None
    if config.test_n > 0:
        table1 = _table1(config, settings, throughput, compared, best_static_sel, method_for,
                         lambda cfg: _cached_offline(out / "test_offline.json", cfg, bench, progress, log, reused_runs),
                         log)

    results = {
        "calibrate": "scheduler calibration by replay over the calibration trajectories (greedy)",
        "bank": str(bank_path),
        "frontier": str(folder),
        "throughput": str(throughput_path),
        "settings": {"dataset": settings["dataset"], "frontier_dtype": settings["dtype"], "engine_dtype": config.dtype,
                     "max_tokens": calibration.max_tokens, "calibration_prompts": calibration.num_prompts,
                     "check_prompts": config.num_prompts, "test_prompts": config.test_n, "select": config.select,
                     "candidates": config.candidates, "base_bank": base},
        "methods": {policy: method for policy, method in label.items()},
        "trees": [{"name": n, "size": t.num_nodes - 1, "depth": t.depth,
                   "step_ms": 1000 * costs.step_s[n] if n in costs.step_s else None} for n, t in trees],
        "prefill_ms_per_token": 1000 * costs.prefill_s_per_token,
        "costs_from": costs.source, "step_costs": step_costs,
        "s_quantiles": {f"{q:g}": quantile(s_values, q) for q in (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9)},
        "rows": rows,
        "chosen": summary,
        "best": {"static": best_static_sel["policy"], "hysteresis": best_hyst_sel["policy"] if best_hyst_sel else None,
                 "ladder": best_ladder["policy"] if best_ladder else None,
                 "hysteresis_path_value": best_paper["policy"] if best_paper else None},
        "bank_policy": updated.policy,
        "bank_trees": [t.name for t in updated.trees],
        "table1": table1,
        "heldout_replay": heldout,
        "timing": {"features_s": features_s, "sweep_s": sweep_s, "total_s": time.perf_counter() - started,
                   "reused_engine_s": sum(t for t in reused_runs if t is not None),
                   "reused_engine_runs_untimed": sum(t is None for t in reused_runs)},
    }
    results["outputs"] = write_calibrate_outputs(results, out)
    return results
