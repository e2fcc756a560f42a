"""Debiasing the frontier (the paper's Appendix B): re-measure trees with a canonical self-rollout.

The frontier's τ for size n is a one-step what-if: T_n scored on T_{n-1}'s trajectory, with
proposals read from the joint tree. Here each chosen tree runs as a static policy in the real
`ReferenceEngine` (its own drafts, attention mask and KV-cache compaction, greedy) on the same
prompts, and its mean accept length is compared with the frontier's:

    Δ = (biased - self) / self

Rows also give the tree's own teacher-forced rollout under the rank scorer (no what-if), which
separates the what-if bias (biased vs. teacher-forced) from any engine effect (teacher-forced
vs. self; at float32 they agree unless the engine's greedy output leaves the AR trajectory, which
the `AR mismatches` column counts). Trees are ranked by τ both ways; a rank change is flagged.
Outputs: `debias.json`, `debias.md` and `bank_debiased.json` (the trees with their self-rollout
τ and tok/s as `measured`) in the frontier folder, or `--out`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from entmtp_vllm.bank_file import BankFile, load_bank, save_bank
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import Tree

from tree_search.trajectories import CALIBRATION_FILE, load_calibration
from tree_search.resumable import append_jsonl, read_jsonl, resume_jsonl, rewrite_jsonl
from tree_search.frontier import (
    DEFAULT_BANK_SIZES,
    FRONTIER_LOG,
    FrontierStep,
    bank_sizes_within,
    resolve_reference,
)
from tree_search.resources import Resources
from tree_search.scoring import RankScorer


def read_frontier(folder: Path) -> tuple[dict[str, Any], list[FrontierStep]]:
    """(settings, steps) of the frontier log in `folder`."""
    path = Path(folder) / FRONTIER_LOG
    settings, records, _ = read_jsonl(path, "frontier log")
    if settings is None:
        raise EntMTPError(f"no frontier log at {path}: run `entmtp search frontier --out {folder}` first")
    steps = [FrontierStep.from_record(r) for r in records if r.get("kind") == "step"]
    if not steps:
        raise EntMTPError(f"the frontier log {path} has no step yet: run `entmtp search frontier --out {folder}`")
    return settings, steps


def parse_sizes(text: str | None) -> list[int] | None:
    """`4,8,16` -> [4, 8, 16]; None or empty -> None (the default sizes)."""
    if not text:
        return None
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise EntMTPError(f"--sizes takes comma-separated integers, e.g. 4,8,16 (got {text!r})") from None
    if not sizes or min(sizes) < 1:
        raise EntMTPError(f"--sizes must list sizes of at least 1 draft node (got {text!r})")
    return sizes


ROLLOUTS = "debias_rollouts.jsonl"


def _key(tree: Tree) -> str:
    return json.dumps(tree.choices)


def _open_rollouts(path: Path, settings: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Finished (tree name, tree, prompt id) rollouts of an earlier run with the same settings."""
    records, truncated = resume_jsonl(path, "debias rollouts", settings, "rollout", None)  # other settings: start over
    if truncated:
        rewrite_jsonl(path, settings, records)
    return {(r["tree"], json.dumps(r["choices"]), r["id"]): r for r in records if r.get("kind") == "rollout"}


def _ranks(values: list[float]) -> list[int]:
    """1 = best (largest τ); equal values share the better rank."""
    return [1 + sum(other > value for other in values) for value in values]


def run_debias(
    frontier: str | Path,
    sizes: Sequence[int] | None = None,
    out: str | Path | None = None,
    reference: str | None = None,
    threads: int = 1,
    progress: bool = True,
    resources: Resources | None = None,
    log: Callable[[str], None] | None = None,
    num_prompts: int | None = None,
) -> dict[str, Any]:
    """Self-rollout τ of the frontier trees at `sizes` (default: the bank sizes) vs. their frontier τ.

    `num_prompts` keeps the first N calibration prompts (self-rollouts are slow on a CPU); the
    biased (what-if) τ is then recomputed on those prompts with the rank scorer, so that every
    column of a row covers the same prompts. Each (tree, prompt) rollout is appended to
    `debias_rollouts.jsonl` in the output folder as soon as it is done: a rerun resumes."""
    import time

    import torch
    from tqdm import tqdm

    from entmtp_vllm.engine.reference import ReferenceEngine
    from entmtp_vllm.topology import TopologyBank

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    folder = Path(frontier)
    settings, steps = read_frontier(folder)
    by_size = {step.size: step for step in steps}
    reached = max(by_size)
    if sizes is None:
        sizes = bank_sizes_within(DEFAULT_BANK_SIZES, reached)
    missing = [s for s in sizes if s not in by_size]
    if missing:
        raise EntMTPError(f"size {missing[0]} is not on the frontier in {folder}: it has sizes 1..{reached}")
    if threads < 1:
        raise EntMTPError(f"--threads must be at least 1 (got {threads})")
    calibration = load_calibration(folder / CALIBRATION_FILE)
    subset = num_prompts is not None and num_prompts < calibration.num_prompts
    if num_prompts is not None and num_prompts < 1:
        raise EntMTPError(f"-n must be at least 1 (got {num_prompts})")
    if subset:
        calibration = replace(calibration, trajectories=calibration.trajectories[:num_prompts])
    trees: list[tuple[str, Tree, FrontierStep | None]] = [(f"n{s}", by_size[s].as_tree(), by_size[s]) for s in sorted(set(sizes))]
    if reference is not None:
        found, note = resolve_reference(reference)
        if found is None:
            raise EntMTPError(note or f"--reference {reference!r}: no such tree")
        if found[1].head_depth > calibration.rank_depth:
            raise EntMTPError(f"reference tree {found[0]!r} is {found[1].head_depth} deep but the heads draft {calibration.rank_depth}")
        trees.append((found[0], found[1], None))

    torch.set_num_threads(threads)
    resources = resources or Resources.of_frontier(settings, settings["dtype"])
    teacher = RankScorer(calibration)
    started = time.perf_counter()
    out_dir = Path(out) if out is not None else folder
    out_dir.mkdir(parents=True, exist_ok=True)
    done = _open_rollouts(out_dir / ROLLOUTS, {"frontier": str(folder), "dtype": settings["dtype"],
                                               "max_tokens": calibration.max_tokens})
    todo = sum(1 for name, tree, _ in trees for t in calibration.trajectories if (name, _key(tree), t.id) not in done)
    model = tokenizer = drafter = None
    if todo:
        model, tokenizer, drafter = resources.load()
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(trees) * calibration.num_prompts, initial=len(trees) * calibration.num_prompts - todo,
               desc="self-rollout (reference engine, greedy)", unit="gen", disable=not progress)
    for name, tree, step in trees:
        engine = ReferenceEngine(model, tokenizer, drafter, TopologyBank([tree], [name])) if todo else None
        n_steps = accepted = tokens = mismatches = 0
        seconds = 0.0
        for trajectory in calibration.trajectories:
            record = done.get((name, _key(tree), trajectory.id))
            if record is None:
                gen = engine.generate(trajectory.prompt_ids, calibration.max_tokens, acceptance="greedy")
                record = {"kind": "rollout", "tree": name, "choices": tree.choices, "id": trajectory.id,
                          "steps": len(gen.steps), "accepted": sum(gen.accept_lengths), "tokens": gen.num_tokens,
                          "time_s": gen.total_time_s,
                          "mismatch": gen.token_ids != trajectory.tokens[: calibration.max_tokens]}
                append_jsonl(out_dir / ROLLOUTS, record)
                bar.update()
            n_steps += record["steps"]
            accepted += record["accepted"]
            tokens += record["tokens"]
            seconds += record["time_s"]
            mismatches += record["mismatch"]
        tf = teacher.evaluate(tree) if max((max(p) for p in tree.paths), default=0) < calibration.rank_cap else None
        self_tau = accepted / n_steps if n_steps else 0.0
        biased = step.tau if step is not None else None
        if step is not None and subset:  # the what-if of this step, on the same prompts
            before = [p for p in map(tuple, step.tree) if p != tuple(step.added)]
            biased = teacher.score(before, [tuple(step.added)]).what_if_tau(tuple(step.added))
        rows.append({
            "name": name,
            "size": tree.num_nodes - 1,
            "depth": tree.depth,
            "frontier": step is not None,
            "biased": biased,
            "teacher_forced": tf.tau if tf is not None else None,
            "self": self_tau,
            "delta_pct": 100.0 * (biased - self_tau) / self_tau if biased is not None and self_tau else None,
            "steps": n_steps,
            "tokens": tokens,
            "time_s": seconds,
            "tokens_per_second": tokens / seconds if seconds > 0 else None,
            "ar_mismatches": mismatches,
            "choices": tree.choices,
        })
    bar.close()
    ranked = [r for r in rows if r["frontier"]]
    for row, rank_b, rank_s in zip(ranked, _ranks([r["biased"] for r in ranked]), _ranks([r["self"] for r in ranked])):
        row["rank_biased"], row["rank_self"] = rank_b, rank_s
        row["rank_changed"] = rank_b != rank_s
    deltas = [abs(r["delta_pct"]) for r in ranked if r["delta_pct"] is not None]
    results = {
        "debias": "frontier (one-step what-if) τ vs. canonical self-rollout τ, greedy",
        "frontier": str(folder),
        "settings": settings,
        "num_prompts": calibration.num_prompts,
        "prompts_subset": subset,
        "rows": rows,
        "max_abs_delta_pct": max(deltas) if deltas else None,
        "rank_changes": [r["name"] for r in ranked if r["rank_changed"]],
        "wall_time_s": time.perf_counter() - started,
    }
    results["outputs"] = write_debias_outputs(results, Path(out) if out is not None else folder)
    return results


def debias_markdown(results: dict[str, Any]) -> str:
    settings = results["settings"]
    lines = [
        f"# Frontier debiasing — {settings['dataset']}",
        "",
        f"{results['num_prompts']} prompts" + (" (the first of the frontier's calibration prompts; biased τ recomputed "
        "on them)" if results.get("prompts_subset") else "") + f", {settings['max_tokens']} new tokens, "
        f"{settings['dtype']}, greedy; "
        f"frontier scorer `{settings['scorer']}`. biased = the frontier's one-step what-if τ; teacher-forced = the "
        "tree's own rollout under the rank scorer; self = the reference engine with the tree as a static policy. "
        f"Δ = (biased − self) / self. Wall time {results['wall_time_s']:.1f} s.",
        "",
        "| tree | n | d | biased τ | teacher-forced τ | self τ | Δ | rank biased → self | AR mismatches | tok/s |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]

    def num(value: float | None, form: str = ".3f") -> str:
        return "–" if value is None else format(value, form)

    for r in results["rows"]:
        rank = "–"
        if r["frontier"]:
            rank = f"{r['rank_biased']} → {r['rank_self']}" + (" ⚠ changed" if r["rank_changed"] else "")
        delta = "–" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}%"
        lines.append(
            f"| `{r['name']}` | {r['size']} | {r['depth']} | {num(r['biased'])} | {num(r['teacher_forced'])} | "
            f"{num(r['self'])} | {delta} | {rank} | {r['ar_mismatches']} | {num(r['tokens_per_second'], '.1f')} |"
        )
    lines.append("")
    if results["max_abs_delta_pct"] is not None:
        lines.append(f"Largest |Δ| on the frontier trees: {results['max_abs_delta_pct']:.1f}%.")
    lines.append(
        "Rank order changed for: " + ", ".join(f"`{n}`" for n in results["rank_changes"])
        if results["rank_changes"] else "The ranking of the frontier trees by τ is unchanged."
    )
    return "\n".join(lines) + "\n"


def debiased_bank(results: dict[str, Any]) -> BankFile:
    settings = results["settings"]
    trees = [
        {
            "name": r["name"],
            "choices": r["choices"],
            "measured": {"accept_length": max(1.0, r["self"]), "tokens_per_second": r["tokens_per_second"],
                         "nodes": r["size"] + 1, "steps": r["steps"] or None},
        }
        for r in results["rows"] if r["frontier"]
    ]
    return BankFile.model_validate({
        "format": "entmtp-bank", "version": 1, "model": settings["model"], "task": settings["dataset"],
        "trees": trees, "policy": None,
        "metadata": {"source": "tree_search debias (self-rollout with the reference engine, greedy)",
                     "frontier": results["frontier"], "settings": settings},
    })


def write_debias_outputs(results: dict[str, Any], out: Path) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "debias.json", "markdown": out / "debias.md", "bank": out / "bank_debiased.json",
             "rollouts": out / ROLLOUTS}
    paths["markdown"].write_text(debias_markdown(results), encoding="utf-8")
    if any(r["frontier"] and r["steps"] for r in results["rows"]):
        save_bank(debiased_bank(results), paths["bank"])
        load_bank(paths["bank"])
    else:
        paths.pop("bank")
    written = {key: str(value) for key, value in paths.items()}
    paths["json"].write_text(json.dumps({**results, "outputs": written}, indent=1) + "\n", encoding="utf-8")
    return written
