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
`tree_search.position_features` (the features cache of `search calibrate` is reused when present). At
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

Files: `regimes_records.py` (collecting the step records), `regimes_statistics.py` (the analysis),
`regimes_report.py` (outputs, `--combine`); this module runs the stage.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from entmtp_vllm.errors import EntMTPError

from tree_search.regimes_records import check_against_engine, generation_record, replay_records
from tree_search.regimes_report import write_regimes_outputs
from tree_search.regimes_statistics import analyse

REGIMES_DIR = "regimes"
STEPS_FILE = "steps.jsonl"


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

    from tree_search.trajectories import CALIBRATION_FILE, load_calibration
    from tree_search.resumable import append_jsonl, resume_jsonl, rewrite_jsonl
    from tree_search.debias import read_frontier
    from tree_search.resources import Resources

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    started = time.perf_counter()
    folder = Path(config.frontier)
    settings, _ = read_frontier(folder)
    calibration = load_calibration(folder / CALIBRATION_FILE)
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
    resources = resources or Resources.of_frontier(settings, dtype)
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
