"""The acceptance frontier (the paper's Algorithm 1): greedy growth of a draft tree.

    T <- {} (the root alone), H <- []
    while |T| < B:
        F <- NextChildren(T, D)            # per node of depth < D (root included): its next unused child rank
        score every T u {nu}, nu in F, in ONE rollout of T u F (see `scoring.py`)
        nu* <- argmax_nu (a(nu), -sum(nu), -|nu|), then path order
        T <- T u {nu*};  H.append((|T|, a(nu*), T))

Sizes count draft nodes, the root excluded (|T|, as in the paper; mc_sim_7b_63 has 63): a
tree of size n verifies n + 1 tokens per step. The paper starts from T = {(0)}; starting from
the root alone only adds the forced first step (F = {(0)}), so its history also has size 1.

Hybrid search (`lookup` > 0): the root and every lookup node shorter than `lookup` also offer a
prompt-lookup child (rank -1); head nodes may then grow under lookup nodes. `max_depth` bounds
head nodes (it is the number of heads used), `lookup` the copied chain.

a(nu) is the mean accept length (tokens per decode step, pooled over all steps of all
prompts, the offline benchmark's tau) of T u {nu} on T's trajectory: a one-step what-if, biased
slightly upwards; `debias.py` re-measures chosen trees with the real engine.

Every growth step is appended to `frontier.jsonl` in the run folder (a settings header, then
one line per step); a rerun with the same settings replays it and continues, other settings
are refused. Outputs: `frontier.json`, `frontier.md`, `frontier.png`, and `bank.json` (an
`entmtp-bank` with the trees at the bank sizes, named `n4`, `n8`, ...).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import LOOKUP, Tree

from tree_search.resources import Resources
from tree_search.resumable import append_jsonl, resume_jsonl, rewrite_jsonl
from tree_search.scoring import SCORERS, RolloutScore, make_scorer
from tree_search.trajectories import CALIBRATION_FILE, CALIBRATION_REFUSAL, PromptIds, build_calibration

Path_ = tuple[int, ...]

FRONTIER_LOG = "frontier.jsonl"
DEFAULT_BANK_SIZES = (4, 8, 16, 32, 64)
REFERENCE_TREE = "mc_sim_7b_63"
REFERENCE_FILE = "trees/medusa_hydra_trees.json"
MIN_RANK_CAP = 32
"""Ranks are looked for in at least the top-32 of each head (reference trees use up to ~10)."""


# --------------------------------------------------------------------------- Algorithm 1


def _order(path: Path_) -> tuple[int, Path_]:
    return (len(path), path)


def next_children(tree: Collection[Path_], max_depth: int, lookup: int = 0) -> list[Path_]:
    """F(T): for the root and every node of depth < `max_depth`, its next unused child rank
    (the number of its children when ranks are contiguous, as growth keeps them); with
    `lookup` > 0 also the next lookup node of the chain (up to `lookup` nodes). Path order."""
    tree = set(tree)
    frontier = []
    for node in [()] + sorted(tree, key=_order):
        if len(node) < max_depth:
            rank = 0
            while node + (rank,) in tree:
                rank += 1
            frontier.append(node + (rank,))
        if len(node) < lookup and all(r == LOOKUP for r in node) and node + (LOOKUP,) not in tree:
            frontier.append(node + (LOOKUP,))
    return sorted(frontier, key=_order)


def rank_sum(path: Path_) -> int:
    """Sum of a path's head ranks (a lookup node counts as rank 0: its copy is the first guess)."""
    return sum(max(r, 0) for r in path)


def choose(candidates: Sequence[Path_], gains: dict[Path_, int]) -> Path_:
    """The candidate with the best what-if score; ties: smaller child-rank sum, then shallower,
    then path order. `gains` are integers (extra tokens over the same steps), so ties are exact."""
    if not candidates:
        raise ValueError("no candidates")
    return min(candidates, key=lambda p: (-gains[p], rank_sum(p), len(p), p))


@dataclass
class FrontierStep:
    """One growth step: the tree after adding `added`, and its what-if score."""

    size: int
    """Draft nodes of the new tree (root excluded)."""
    added: Path_
    tau: float
    """What-if mean accept length of the new tree on the previous tree's trajectory."""
    base_tau: float
    """Mean accept length of the previous tree on that same rollout."""
    accepted: int
    """Tokens the new tree would have emitted over the rollout's steps (what-if)."""
    steps: int
    """Decode steps of the rollout (all prompts)."""
    depth: int
    tree: list[list[int]]
    """The new tree's paths (choices form)."""
    candidates: list[dict[str, Any]] = field(default_factory=list)
    """Every scored candidate: `{"path": [...], "tau": ...}`, in path order."""
    time_s: float = 0.0

    def as_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["added"] = list(self.added)
        return {"kind": "step", **record}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> FrontierStep:
        data = {k: v for k, v in record.items() if k != "kind"}
        data["added"] = tuple(data["added"])
        return cls(**data)

    def as_tree(self) -> Tree:
        return Tree.from_choices(self.tree)


def grow_step(scorer, tree: set[Path_], max_depth: int, lookup: int = 0) -> FrontierStep | None:
    """One iteration of Algorithm 1 on `tree` (updated in place); None when F(T) is empty."""
    candidates = next_children(tree, max_depth, lookup)
    if not candidates:
        return None
    started = time.perf_counter()
    score: RolloutScore = scorer.score(tree, candidates)
    if score.steps == 0:
        raise EntMTPError(
            "the calibration prompts give no decode step (every greedy answer ends at its first token): "
            "use other prompts or a larger --max-tokens"
        )
    best = choose(candidates, score.gains)
    tree.add(best)
    return FrontierStep(
        size=len(tree),
        added=best,
        tau=score.what_if_tau(best),
        base_tau=score.tau,
        accepted=score.accepted + score.gains[best],
        steps=score.steps,
        depth=max(len(p) for p in tree),
        tree=[list(p) for p in sorted(tree, key=_order)],
        candidates=[{"path": list(c), "tau": score.what_if_tau(c)} for c in candidates],
        time_s=time.perf_counter() - started,
    )


def replay(history: Sequence[FrontierStep], max_depth: int, lookup: int = 0) -> set[Path_]:
    """The tree at the end of a logged history, checking that the log is consistent."""
    tree: set[Path_] = set()
    for step in history:
        frontier = next_children(tree, max_depth, lookup)
        if step.added not in frontier or step.size != len(tree) + 1:
            raise EntMTPError(
                f"frontier log: step {step.size} adds {list(step.added)}, which is not a frontier child of the tree "
                "before it; the log is corrupt, delete it to start over"
            )
        tree.add(step.added)
        if sorted(map(tuple, step.tree), key=_order) != sorted(tree, key=_order):
            raise EntMTPError(f"frontier log: step {step.size} records a tree that differs from its replay; delete the log")
    return tree


def open_frontier_log(path: Path, settings: dict[str, Any]) -> list[FrontierStep]:
    """The steps already logged at `path` (empty if none); refuses a log made with other settings."""
    records, truncated = resume_jsonl(path, "frontier log", settings, "step",
                                      "{path} holds a search with other settings ({diff}): use another --out folder, "
                                      "or the same settings to resume it")
    steps = [FrontierStep.from_record(r) for r in records if r.get("kind") == "step"]
    if truncated:  # drop the unfinished last line before appending after it
        rewrite_jsonl(path, settings, [s.as_record() for s in steps])
    return steps


def search_frontier(
    scorer,
    budget: int,
    max_depth: int,
    history: list[FrontierStep] | None = None,
    log_path: Path | None = None,
    progress: bool = True,
    stop_after: int | None = None,
    lookup: int = 0,
) -> list[FrontierStep]:
    """Run Algorithm 1 up to `budget` draft nodes, continuing `history` (a replayed log).

    Each new step is appended to `log_path` as soon as it is chosen. `stop_after` stops after
    that many new steps (an interruption, for tests). `lookup`: longest prompt-lookup chain
    offered (0: heads only)."""
    from tqdm import tqdm

    check_growth_args(budget, max_depth)
    if lookup < 0:
        raise EntMTPError(f"--lookup must be at least 0 (got {lookup})")
    history = list(history or [])
    tree = replay(history, max_depth, lookup)
    bar = tqdm(total=budget, initial=len(tree), desc="frontier (one rollout per added node)", unit="node",
               disable=not progress)
    if history:
        bar.set_postfix(tau=f"{history[-1].tau:.3f}")
    new = 0
    while len(tree) < budget and (stop_after is None or new < stop_after):
        step = grow_step(scorer, tree, max_depth, lookup)
        if step is None:
            break
        history.append(step)
        new += 1
        if log_path is not None:
            append_jsonl(log_path, step.as_record())
        bar.update()
        bar.set_postfix(tau=f"{step.tau:.3f}", added=str(list(step.added)))
    bar.close()
    return history


def check_growth_args(budget: int, max_depth: int) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise EntMTPError(f"--budget must be at least 1 draft node (got {budget})")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise EntMTPError(f"--max-depth must be at least 1 (got {max_depth})")


# --------------------------------------------------------------------------- the whole run


@dataclass
class FrontierConfig:
    """Everything `entmtp search frontier` depends on."""

    dataset: str
    out: str
    num_prompts: int | None = 100
    seed: int = 123
    split: str = "calib"
    category: str | None = None
    data_path: str | None = None
    raw: bool = False
    budget: int = 64
    max_depth: int = 4
    max_tokens: int = 128
    model: str | None = None
    heads: str | None = None
    dtype: str = "float32"
    scorer: str = "rank"
    reference: str | None = REFERENCE_TREE
    """A published tree to mark on the plot: a name in the shared Medusa/Hydra trees file,
    `FILE#NAME`, or any tree source; None for none."""
    bank_sizes: tuple[int, ...] = DEFAULT_BANK_SIZES
    threads: int = 1
    lookup: int = 0
    """Longest prompt-lookup chain the growth may add (hybrid trees); 0: heads only."""


def resolve_reference(spec: str | None) -> tuple[tuple[str, Tree] | None, str | None]:
    """((name, tree) or None, note): the published tree named by `--reference`."""
    from entmtp_vllm.bank_file import load_tree_source
    from entmtp_vllm.prompts import shared_data_dir

    if spec is None or spec.lower() == "none":
        return None, None
    source, _, name = spec.partition("#")
    if not Path(source).exists() and not source.startswith(("chain:", "full:", "lookup:")):
        data = shared_data_dir()
        path = None if data is None else data / REFERENCE_FILE
        if path is None or not path.is_file():
            return None, f"reference tree {spec!r} not marked: the shared trees file ({REFERENCE_FILE}) is absent"
        source, name = str(path), spec
    trees = load_tree_source(source, name or None)
    if len(trees) != 1:
        raise EntMTPError(f"--reference {spec!r} names {len(trees)} trees; pick one with FILE#NAME")
    return trees[0], None


def bank_sizes_within(sizes: Sequence[int], reached: int) -> list[int]:
    """The bank sizes the frontier reached; the largest tree when none of them."""
    within = sorted({s for s in sizes if 1 <= s <= reached})
    return within or ([reached] if reached else [])


def _model_label(name: str | None) -> str:
    return name or "embedded (SmolLM2-135M-Instruct)"


def frontier_settings(config: FrontierConfig, prompt_ids: Sequence[str]) -> dict[str, Any]:
    """What the growth log depends on (a resume needs all of it equal)."""
    return {
        "dataset": config.dataset,
        "num_prompts": config.num_prompts,
        "seed": config.seed,
        "split": config.split,
        "category": config.category,
        "data_path": config.data_path,
        "raw": config.raw,
        "model": _model_label(config.model),
        "heads": config.heads or "shipped hydra",
        "dtype": config.dtype,
        "max_tokens": config.max_tokens,
        "budget": config.budget,
        "max_depth": config.max_depth,
        "scorer": config.scorer,
        "acceptance": "greedy",
        "prompt_ids": list(prompt_ids),
        **({"lookup": config.lookup} if config.lookup else {}),  # absent for heads-only runs (old logs resume)
    }


def calibration_settings(settings: dict[str, Any], rank_depth: int, rank_cap: int) -> dict[str, Any]:
    keep = ("dataset", "num_prompts", "seed", "split", "category", "data_path", "raw", "model", "heads", "dtype",
            "max_tokens", "prompt_ids")
    return {**{k: settings[k] for k in keep}, "rank_depth": rank_depth, "rank_cap": rank_cap}


def validate_config(config: FrontierConfig) -> None:
    check_growth_args(config.budget, config.max_depth)
    if config.max_tokens < 1:
        raise EntMTPError(f"--max-tokens must be at least 1 (got {config.max_tokens})")
    if config.scorer not in SCORERS:
        raise EntMTPError(f"unknown scorer {config.scorer!r}; use one of: {', '.join(SCORERS)}")
    if config.dtype not in ("float32", "bfloat16", "fp32", "bf16"):
        raise EntMTPError(f"unknown dtype {config.dtype!r}; use float32 or bfloat16")
    if any(s < 1 for s in config.bank_sizes):
        raise EntMTPError(f"bank sizes must be at least 1 draft node (got {list(config.bank_sizes)})")
    if config.threads < 1:
        raise EntMTPError(f"--threads must be at least 1 (got {config.threads})")
    if config.lookup < 0:
        raise EntMTPError(f"--lookup must be at least 0 (got {config.lookup})")
    if config.lookup and config.scorer != "rank":
        raise EntMTPError("--lookup needs the rank scorer (the forward scorer does not score lookup nodes)")


def run_frontier(config: FrontierConfig, resources: Resources | None = None, progress: bool = True,
                 log: Callable[[str], None] | None = None, stop_after: int | None = None) -> dict[str, Any]:
    """The whole search: prompts -> calibration (cached) -> Algorithm 1 (resumable) -> outputs."""
    import torch

    from entmtp_vllm.prompts import chat_text, load_prompts

    from tree_search import report

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    started = time.perf_counter()
    validate_config(config)
    prompts = load_prompts(config.dataset, config.num_prompts, config.seed, config.split, config.category,
                           config.data_path)
    resources = resources or Resources(config.model, config.heads, config.dtype)
    num_heads = resources.num_heads
    if config.max_depth > num_heads:
        raise EntMTPError(
            f"--max-depth {config.max_depth} is deeper than the heads: they draft {num_heads} tokens; "
            f"use --max-depth {num_heads} or less, or heads with more heads"
        )
    reference, note = resolve_reference(config.reference)
    torch.set_num_threads(config.threads)

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = frontier_settings(config, [p.id for p in prompts])
    history = open_frontier_log(out / FRONTIER_LOG, settings)
    if history:
        log(f"resuming {out / FRONTIER_LOG}: {len(history)} of {config.budget} nodes already chosen")

    rank_cap = max(config.budget, MIN_RANK_CAP)
    encoded: list[PromptIds] | None = None

    def prompt_ids() -> list[PromptIds]:
        nonlocal encoded
        if encoded is None:
            tokenizer = resources.tokenizer
            encoded = []
            for prompt in prompts:
                text = prompt.text if config.raw else chat_text(tokenizer, prompt.text)
                encoded.append(PromptIds(prompt.id, prompt.dataset, tokenizer(text, add_special_tokens=config.raw)["input_ids"]))
        return encoded

    calibration_started = time.perf_counter()
    cal_settings = calibration_settings(settings, num_heads, rank_cap)
    cal_path = out / CALIBRATION_FILE
    # refuses a cache made with other settings before any prompt is encoded (`build_calibration` resumes it)
    records, _ = resume_jsonl(cal_path, "calibration cache", cal_settings, "trajectory", CALIBRATION_REFUSAL)
    done_ids = {r["id"] for r in records if r.get("kind") == "trajectory"}
    if all(p.id in done_ids for p in prompts) and any(r.get("kind") == "eos" for r in records):
        todo = [PromptIds(p.id, p.dataset, []) for p in prompts]  # all cached: no tokenizer needed
    else:
        todo = prompt_ids()
    calibration = build_calibration(
        todo, max_tokens=config.max_tokens, rank_depth=num_heads, rank_cap=rank_cap, settings=cal_settings,
        load=resources.load, path=cal_path, progress=progress,
    )
    calibration_s = time.perf_counter() - calibration_started

    model = drafter = None
    if config.scorer == "forward":
        model, _, drafter = resources.load()
    scorer = make_scorer(config.scorer, calibration, model, drafter)
    search_started = time.perf_counter()
    resumed = len(history)
    history = search_frontier(scorer, config.budget, config.max_depth, history, out / FRONTIER_LOG, progress, stop_after,
                              config.lookup)
    search_s = time.perf_counter() - search_started

    reference_out: dict[str, Any] | None = None
    if reference is not None:
        name, tree = reference
        base = {"name": name, "size": tree.num_nodes - 1, "depth": tree.depth}
        if tree.head_depth > num_heads:
            reference_out = {**base, "skipped": f"depth {tree.head_depth} > {num_heads} heads"}
        elif tree.lookup_length:
            reference_out = {**base, "skipped": "prompt-lookup trees are not scored"}
        elif config.scorer == "rank" and max(max(p) for p in tree.paths) >= rank_cap:
            reference_out = {**base, "skipped": f"ranks beyond the top-{rank_cap} were not recorded"}
        else:
            score = scorer.evaluate(tree)
            reference_out = {**base, "tau": score.tau, "steps": score.steps,
                             "deeper_than_max_depth": tree.depth > config.max_depth}
    elif note:
        log(note)

    trajectories = calibration.trajectories
    results = {
        "search": "acceptance frontier (Algorithm 1, one-step what-if, greedy)",
        "settings": settings,
        "num_prompts": len(trajectories),
        "calibration": {
            "prompts": len(trajectories),
            "mean_prompt_tokens": sum(len(t.prompt_ids) for t in trajectories) / max(len(trajectories), 1),
            "greedy_tokens": sum(min(len(t.tokens), config.max_tokens) for t in trajectories),
            "eos_stops": sum(t.stop_reason == "eos" and len(t.tokens) <= config.max_tokens for t in trajectories),
            "heads": num_heads,
            "rank_cap": rank_cap,
        },
        "frontier": [step.as_record() for step in history],
        "complete": len(history) >= config.budget,
        "reference": reference_out,
        "reference_note": note,
        "bank_sizes": bank_sizes_within(config.bank_sizes, len(history)),
        "timing": {
            "calibration_s": calibration_s,
            "search_s": search_s,
            "total_s": time.perf_counter() - started,
            "resumed_steps": resumed,
            "new_steps": len(history) - resumed,
        },
    }
    results["outputs"] = report.write_frontier_outputs(results, out)
    return results
