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
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from entmtp_vllm.acceptance import longest_path
from entmtp_vllm.bank_file import BankFile, load_bank, save_bank
from entmtp_vllm.bench.paired import paired_speed, paired_text
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.features import entropy
from entmtp_vllm.lookup import LookupConfig, LookupMatch, PromptLookup
from entmtp_vllm.policies import make_policy, validate_policy_config
from entmtp_vllm.scheduling import TreeScheduler
from entmtp_vllm.tree import LOOKUP, Tree

from tree_search.report import write_stage_outputs
from tree_search.step_costs import STEP_COSTS_FILE, probe_step_costs
from tree_search.scoring import accepted_branches, correct_copies, lookup_proposals
from tree_search.trajectories import Calibration, Trajectory, load_calibration, walk
from tree_search.resumable import append_jsonl, resume_jsonl, rewrite_jsonl, settings_difference

CALIBRATE_DIR = "calibrate"
FEATURES_FILE = "features.jsonl"
PAPER_TAUS = (0.001, 0.005, 0.01, 0.02, 0.05)
TAU_OFF_FACTORS = (1.0, 0.5, 0.2)
S_QUANTILES = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7)
SWEPT_FEATURES = ("head_top1_1", "recent_accept_mean", "last_accept_length")
"""Further features swept with single-threshold hysteresis (the path value of `features.py` is
max(p0, p0·p1, ...), which equals p0 since every p_d <= 1): head 1's top-1 probability, which the
regime analysis finds the strongest predictor of the next accept length, and the history."""
LADDER_FEATURES = ("head_top1_1",)
"""Features laddered besides the path value (edges at their quantiles)."""
LADDER_GRIDS = {"uniform": lambda u: u, "low": lambda u: u * u, "high": lambda u: 1 - (1 - u) ** 2}


# --------------------------------------------------------------------------- per-position features


@dataclass
class PositionFeatures:
    """What a policy reads at each root position i of one trajectory (root = tokens[i])."""

    id: str
    p0: list[float]
    entropy: list[float]
    chain: list[list[float]]
    """The heads' top-1 probabilities along the greedy chain, head 1 first (all heads)."""

    def as_record(self) -> dict[str, Any]:
        return {"kind": "features", "id": self.id, "p0": self.p0, "entropy": self.entropy, "chain": self.chain}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PositionFeatures:
        return cls(record["id"], list(record["p0"]), list(record["entropy"]), [list(c) for c in record["chain"]])


@torch.inference_mode()
def trajectory_features(model, drafter, trajectory: Trajectory, positions: int, depth: int) -> PositionFeatures:
    """p0, entropy and the heads' greedy chain at root positions 0..positions-1, as the engine
    computes them: the verifier's distribution of the root (its logits at the position before),
    and `drafter.begin(hidden there, root).greedy_chain(depth)`."""
    device = next(model.parameters()).device
    num_prompt = len(trajectory.prompt_ids)
    positions = min(positions, len(trajectory.tokens))
    seq = torch.tensor(trajectory.prompt_ids + trajectory.tokens[:positions], dtype=torch.long, device=device)
    out = model(input_ids=seq[None], output_hidden_states=True, use_cache=False,
                logits_to_keep=positions + 1)  # the last positions+1 rows: P-1 .. P-1+positions
    logits = out.logits[0, :positions]  # row i: the distribution the root tokens[i] came from
    hidden = out.hidden_states[-1][0]
    probs = torch.softmax(logits.float(), dim=-1)
    p0 = probs.max(dim=-1).values.tolist()
    ent = entropy(probs).tolist()
    chain = []
    prefix = getattr(drafter.heads, "prefix", None) is not None
    if prefix:
        drafter.reset()
        drafter.observe(hidden[:num_prompt], torch.arange(num_prompt))
    for i in range(positions):
        t = num_prompt + i
        if prefix and i > 0:
            drafter.observe(hidden[t - 1 : t], torch.tensor([t - 1]))
        chain.append(drafter.begin(hidden[t - 1], trajectory.tokens[i]).greedy_chain(depth))
    return PositionFeatures(trajectory.id, p0, ent, chain)


def feature_settings(folder: Path, settings: dict[str, Any], calibration: Calibration) -> dict[str, Any]:
    """What a features cache depends on (shared by `calibrate` and `regimes --source replay`)."""
    return {"frontier": str(Path(folder).resolve()), "dtype": settings["dtype"], "prompt_ids": settings["prompt_ids"],
            "max_tokens": calibration.max_tokens, "depth": calibration.rank_depth}


def build_features(calibration: Calibration, load: Callable[[], tuple[Any, Any, Any]], path: Path | None,
                   settings: dict[str, Any], progress: bool = True) -> list[PositionFeatures]:
    """Features of every calibration trajectory, from the cache at `path` when it has them."""
    from tqdm import tqdm

    done: dict[str, PositionFeatures] = {}
    if path is not None:
        records, truncated = resume_jsonl(path, "features cache", settings, "features",
                                          "features cache {path} was made with other settings ({diff}); "
                                          "delete it to start over")
        done = {r["id"]: PositionFeatures.from_record(r) for r in records if r.get("kind") == "features"}
        if truncated:
            rewrite_jsonl(path, settings, [f.as_record() for f in done.values()])
    missing = [t for t in calibration.trajectories if t.id not in done]
    if missing:
        model, _, drafter = load()
        bar = tqdm(total=calibration.num_prompts, initial=calibration.num_prompts - len(missing),
                   desc="features (teacher-forced p0, entropy, head chain)", unit="prompt", disable=not progress)
        for trajectory in missing:
            features = trajectory_features(model, drafter, trajectory, calibration.max_tokens, calibration.rank_depth)
            done[trajectory.id] = features
            if path is not None:
                append_jsonl(path, features.as_record())
            bar.update()
        bar.close()
    return [done[t.id] for t in calibration.trajectories]


# --------------------------------------------------------------------------- replay


def accept_length(tree: frozenset, ranks: Sequence[int]) -> int:
    """Tokens a (heads-only) tree emits at a position whose oracle rank path is `ranks` (greedy)."""
    return accepted_branches(tree, ranks)[0] + 1


class HybridReplay:
    """Prompt lookup in the replay of a bank with hybrid trees, as the engines run it: each step
    the lookup drafter proposes from the context (prompt + trajectory up to the root), the policy
    reads the lookup features (the scheduler's `LookupStats`), the chosen tree's chain is cut to the tokens found,
    and the accepted path is the engine's (`accept_greedy`'s rows and tie-break) with node
    acceptance from the oracle ranks (head nodes) and the correct copies (lookup nodes)."""

    def __init__(self, bank, calibration: Calibration, config: LookupConfig | None = None) -> None:
        self.bank, self.calibration = bank, calibration
        self.config = config or LookupConfig()
        self.lookup = PromptLookup(self.config)
        self.length = bank.lookup_length
        self._matches: list[list[LookupMatch]] = [
            lookup_proposals(t.prompt_ids, t.tokens, self.lookup, self.length) for t in calibration.trajectories
        ]
        self._hits = [correct_copies(m, t.tokens) for m, t in zip(self._matches, calibration.trajectories)]

    def start(self, k: int) -> "_HybridWalk":
        return _HybridWalk(self, k)


class _HybridWalk:
    """One trajectory's lookup proposals and accepted paths during a replay (the lookup
    statistics live in the scheduler's request state)."""

    def __init__(self, owner: HybridReplay, k: int) -> None:
        self.owner, self.k = owner, k

    def match(self, i: int) -> LookupMatch:
        return self.owner._matches[self.k][i]

    def accept(self, index: int, i: int) -> tuple[int, int, int]:
        """(accept length, lookup tokens drafted, lookup tokens accepted) of tree `index` at `i`."""
        owner = self.owner
        found = len(owner._matches[self.k][i].tokens)
        buffers = owner.bank.buffers(index, "cpu", lookup_length=found)
        ranks, hits = owner.calibration.trajectories[self.k].ranks[i], owner._hits[self.k][i]
        node_ok = torch.zeros(buffers.num_nodes, dtype=torch.bool)
        for node, path in enumerate(buffers.nodes[1:], start=1):
            depth, rank = len(path), path[-1]
            node_ok[node] = hits >= depth if rank == LOOKUP else (depth <= len(ranks) and ranks[depth - 1] == rank)
        accepted = longest_path(buffers, node_ok)
        lookup = set(buffers.lookup_nodes)
        return len(accepted), len(lookup), len(lookup & set(accepted))


@dataclass
class ReplayResult:
    """One policy replayed over the calibration trajectories."""

    steps: int
    accepted: int
    tokens: int
    prompt_tokens: int
    tree_steps: dict[str, int]
    switches: int
    per_step: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def tau(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


def output_tokens(trajectory: Trajectory, max_tokens: int, eos_ids: frozenset[int]) -> int:
    """Tokens the engine returns for this prompt (greedy output = the trajectory, cut at
    max_tokens or just after the first EOS)."""
    for k, token in enumerate(trajectory.tokens[:max_tokens]):
        if token in eos_ids:
            return k + 1
    return min(len(trajectory.tokens), max_tokens)


def replay(policy_config: dict[str, Any], trees: Sequence[tuple[str, Tree]], calibration: Calibration,
           features: Sequence[PositionFeatures], detail: bool = False) -> ReplayResult:
    """Walk every trajectory with `policy_config` over the bank `trees` (greedy)."""
    from entmtp_vllm.topology import TopologyBank

    bank = TopologyBank([t for _, t in trees], [n for n, _ in trees])
    policy = make_policy(policy_config, bank)
    tree_sets = [frozenset(t.paths) for _, t in trees]
    depth = bank.head_depth
    hybrid = HybridReplay(bank, calibration) if bank.lookup_length else None
    if depth > calibration.rank_depth:
        raise EntMTPError(f"the bank drafts {depth} deep but the calibration ranked {calibration.rank_depth} heads")
    names = [n for n, _ in trees]
    counts = [0] * len(trees)
    steps = accepted = tokens = prompt_tokens = switches = 0
    per_step: list[dict[str, Any]] | None = [] if detail else None
    scheduler = TreeScheduler(policy, hybrid is not None, hybrid.config.ema_alpha if hybrid else LookupConfig().ema_alpha)
    for k, (trajectory, feats) in enumerate(zip(calibration.trajectories, features)):
        schedule = scheduler.new_request()
        lookup = hybrid.start(k) if hybrid is not None else None

        def accept_at(i: int) -> int:
            match = lookup.match(i) if lookup is not None else None
            f = scheduler.features(schedule, feats.p0[i], feats.chain[i][:depth], feats.entropy[i], match)
            index = scheduler.choose(schedule, f)
            if lookup is not None:
                a, proposed, copied = lookup.accept(index, i)
            else:
                a, proposed, copied = accept_length(tree_sets[index], trajectory.ranks[i]), 0, 0
            scheduler.observe(schedule, a, proposed, copied)
            counts[index] += 1
            if per_step is not None:
                per_step.append({"prompt": k, "position": i, "tree": names[index], "accept_length": a,
                                 "features": f.as_row()})
            return a

        for _, a in walk(trajectory, calibration.max_tokens, calibration.eos_ids, accept_at):
            steps += 1
            accepted += a
        switches += schedule.policy.switches
        tokens += output_tokens(trajectory, calibration.max_tokens, calibration.eos_ids)
        prompt_tokens += len(trajectory.prompt_ids)
    return ReplayResult(steps, accepted, tokens, prompt_tokens, dict(zip(names, counts)), switches, per_step)


@dataclass
class CostModel:
    """Measured costs: seconds per decode step of each tree, prefill seconds per prompt token."""

    step_s: dict[str, float]
    prefill_s_per_token: float
    source: str = ""

    def seconds(self, result: ReplayResult) -> float:
        missing = [name for name, n in result.tree_steps.items() if n and name not in self.step_s]
        if missing:
            raise EntMTPError(f"no measured step time for tree {missing[0]!r}: time it with `entmtp search throughput`")
        decode = sum(n * self.step_s[name] for name, n in result.tree_steps.items() if n)
        return self.prefill_s_per_token * result.prompt_tokens + decode

    def tokens_per_second(self, result: ReplayResult) -> float:
        seconds = self.seconds(result)
        return result.tokens / seconds if seconds > 0 else 0.0


def cost_model_from_throughput(throughput: dict[str, Any], trees: Sequence[tuple[str, Tree]]) -> CostModel:
    """Step times of `trees` (matched to the timed trees by shape) from a throughput.json."""
    by_shape = {tuple(map(tuple, Tree.from_choices(r["choices"]).choices)): r for r in throughput["rows"]}
    step_s = {}
    for name, tree in trees:
        row = by_shape.get(tuple(map(tuple, tree.choices)))
        if row is not None and row["step_ms"]:
            step_s[name] = row["step_ms"] / 1000.0
    rows = [throughput["ar"], *throughput["rows"]]
    prefill = sum(r["prefill_s"] for r in rows) / max(sum(r["prompt_tokens"] for r in rows), 1)
    return CostModel(step_s, prefill, throughput.get("outputs", {}).get("json", ""))


# --------------------------------------------------------------------------- the policy grid


def policy_string(config: dict[str, Any]) -> str:
    """The CLI form (`bank:FILE:<policy>` methods, `--policy`) of a policy config."""
    kind = config["kind"]
    at = f"@{config['feature']}" if config.get("feature", "path_value") != "path_value" else ""
    if kind == "static":
        return f"static:{config['tree']}"
    if kind == "ladder":
        return f"ladder{at}:{','.join(repr(float(e)) for e in config['edges'])}:{','.join(map(str, config['trees']))}"
    taus = repr(float(config["tau_on"])) + ("" if config["tau_off"] == config["tau_on"] else f",{float(config['tau_off'])!r}")
    return f"hysteresis{at}:{taus}:{config['conservative']},{config['aggressive']}"


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def policy_grid(trees: Sequence[tuple[str, Tree]], s_values: Sequence[float],
                feature_values: dict[str, Sequence[float]] | None = None) -> list[dict[str, Any]]:
    """Every policy swept: `{"config": ..., "family": ..., "source": ...}`. `feature_values` (observed
    values of other policy features, e.g. `recent_accept_mean`) add single-threshold hysteresis
    policies on those features at their quantiles (family `hysteresis@FEATURE`)."""
    sized = sorted(trees, key=lambda t: (t[1].num_nodes, t[0]))
    grid: list[dict[str, Any]] = [{"config": {"kind": "static", "tree": n}, "family": "static", "source": "bank"}
                                  for n, _ in sized]
    quantiles = [(q, _round(quantile(s_values, q))) for q in S_QUANTILES] if s_values else []
    for (small, _), (big, _) in itertools.combinations(sized, 2):
        seen: set[tuple[float, float]] = set()

        def add(on: float, off: float, source: str) -> None:
            if (on, off) in seen or off > on:
                return
            seen.add((on, off))
            grid.append({"config": {"kind": "hysteresis", "conservative": small, "aggressive": big, "tau_on": on,
                                    "tau_off": off}, "family": "hysteresis", "source": source})

        for tau in PAPER_TAUS:
            for factor in TAU_OFF_FACTORS:
                add(tau, _round(tau * factor), "paper τ grid")
        for k, (q, tau) in enumerate(quantiles):
            add(tau, tau, f"s quantile {q:g}")
            if k > 0:
                add(tau, quantiles[k - 1][1], f"s quantiles {q:g}/{quantiles[k - 1][0]:g}")
    for feature, values in (feature_values or {}).items():
        taus = sorted({_round(quantile(values, q)) for q in S_QUANTILES + (0.9,)}) if values else []
        family = f"hysteresis@{feature}"
        for (small, _), (big, _) in itertools.combinations(sized, 2):
            for tau in taus:
                grid.append({"config": {"kind": "hysteresis", "conservative": small, "aggressive": big, "tau_on": tau,
                                        "tau_off": tau, "feature": feature},
                             "family": family, "source": f"{feature} quantiles"})
    laddered = [("path_value", s_values)] + [(f, (feature_values or {}).get(f)) for f in LADDER_FEATURES]
    subsets = [list(c) for c in itertools.combinations([n for n, _ in sized], 3)]
    if len(sized) > 3:
        subsets.append([n for n, _ in sized])
    for feature, values in laddered:
        if len(sized) < 3 or not values:
            continue
        at = {} if feature == "path_value" else {"feature": feature}
        name = "s" if feature == "path_value" else feature
        for names in subsets:  # every three trees by size, and all of them
            bins = len(names)
            for label, warp in LADDER_GRIDS.items():
                edges = [_round(quantile(values, warp(k / bins))) for k in range(1, bins)]
                if all(b > a for a, b in zip(edges, edges[1:])):
                    grid.append({"config": {"kind": "ladder", "edges": edges, "trees": names, **at},
                                 "family": "ladder", "source": f"{name} quantiles ({label})"})
    for entry in grid:
        entry["config"] = validate_policy_config(entry["config"]).model_dump(mode="json")
        entry["policy"] = policy_string(entry["config"])
    return grid


def policy_trees(config: dict[str, Any]) -> list[str]:
    """Tree names a policy config refers to."""
    kind = config["kind"]
    if kind == "static":
        return [config["tree"]]
    if kind == "ladder":
        return list(config["trees"])
    return [config["conservative"], config["aggressive"]]


def final_trees(config: dict[str, Any], pool: Sequence[tuple[str, Tree]], base: Sequence[str]) -> list[tuple[str, Tree]]:
    """The bank a policy ships in: the base bank's trees, then the pool trees it refers to that the
    base lacks. Its depth sets the heads' chain in the path value, as in the engine."""
    wanted = set(base) | set(policy_trees(config))
    return [t for t in pool if t[0] in base] + [t for t in pool if t[0] in wanted and t[0] not in base]


def sweep(grid: Sequence[dict[str, Any]], trees: Sequence[tuple[str, Tree]], calibration: Calibration,
          features: Sequence[PositionFeatures], costs: CostModel, base: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Replay every policy (in the bank it would ship in: `base` + its own trees; all `trees` when
    `base` is None); rows sorted by predicted tok/s (best first)."""
    rows = []
    for entry in grid:
        bank = list(trees) if base is None else final_trees(entry["config"], trees, base)
        result = replay(entry["config"], bank, calibration, features)
        rows.append({
            **entry, "tau": result.tau, "steps": result.steps, "tokens": result.tokens,
            "predicted_tokens_per_second": costs.tokens_per_second(result), "predicted_s": costs.seconds(result),
            "tree_steps": result.tree_steps, "switches": result.switches, "bank": [n for n, _ in bank],
        })
    rows.sort(key=lambda r: -r["predicted_tokens_per_second"])
    return rows


def best_of(rows: Sequence[dict[str, Any]], family: str, key: str = "predicted_tokens_per_second") -> dict[str, Any] | None:
    candidates = [r for r in rows if r["family"] == family and r.get(key) is not None]
    return max(candidates, key=lambda r: r[key]) if candidates else None


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


def cost_model_from_probe(step_costs: dict[str, Any]) -> CostModel:
    """Step times per tree and the prefill time per prompt token from a `probe_step_costs` result."""
    return CostModel({name: row["step_ms"] / 1000.0 for name, row in step_costs["trees"].items()},
                     step_costs["prefill_ms_per_token"] / 1000.0, STEP_COSTS_FILE)


def run_calibrate(config: CalibrateConfig, progress: bool = True, log: Callable[[str], None] | None = None,
                  resources=None, bench: Callable[..., dict[str, Any]] | None = None) -> dict[str, Any]:
    from entmtp_vllm.bench.offline import run_offline

    from tree_search.debias import _raw_setting, read_frontier
    from tree_search.frontier import CALIBRATION_LOG, Resources
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
    calibration = load_calibration(folder / CALIBRATION_LOG)
    held = None  # --heldout: checked now, replayed after the sweep
    if config.heldout:
        held_folder = Path(config.heldout)
        held_settings, _ = read_frontier(held_folder)
        if settings_difference({k: settings.get(k) for k in ("model", "heads", "dtype")},
                               {k: held_settings.get(k) for k in ("model", "heads", "dtype")}):
            raise EntMTPError(f"--heldout {held_folder} was made with another model, heads or dtype than {folder}")
        held = load_calibration(held_folder / CALIBRATION_LOG)
        overlap = {t.id for t in held.trajectories} & {t.id for t in calibration.trajectories}
        if overlap:
            raise EntMTPError(f"--heldout {held_folder} shares {len(overlap)} prompts with the calibration "
                              f"(e.g. {sorted(overlap)[0]}): use another split (--split test)")
    throughput_path = Path(config.throughput or bank.metadata.get("throughput") or bank_path.parent / "throughput.json")
    if not throughput_path.is_file():
        raise EntMTPError(f"no throughput results at {throughput_path}: run `entmtp search throughput` first "
                          "or pass --throughput FILE")
    throughput = json.loads(throughput_path.read_text(encoding="utf-8"))
    out = Path(config.out) if config.out else folder / CALIBRATE_DIR
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(config.threads)

    if config.candidates not in ("bank", "timed"):
        raise EntMTPError(f"--candidates must be bank or timed (got {config.candidates!r})")
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
    if config.candidates == "timed" or len(trees) < 2:
        trees += [(name, Tree.from_choices(e["choices"])) for name, e in timed_entries.items()]
        log(f"sweep trees: bank {base} + timed frontier trees {list(timed_entries)}")
    pool_entries = {t.name: t.model_dump(mode="json") for t in base_entries} | timed_entries
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
    resources = resources or Resources(_raw_setting(settings["model"], "embedded"),
                                       _raw_setting(settings["heads"], "shipped"), settings["dtype"])
    feat_settings = feature_settings(folder, settings, calibration)
    features_started = time.perf_counter()
    features = build_features(calibration, resources.load, out / FEATURES_FILE, feat_settings, progress)
    features_s = time.perf_counter() - features_started

    # 2. replay sweep
    sweep_started = time.perf_counter()
    names = [n for n, _ in trees]
    static_rows = sweep(policy_grid(trees, [])[: len(trees)], trees, calibration, features, costs, base)
    best_static = static_rows[0]
    observed = replay(best_static["config"], final_trees(best_static["config"], trees, base), calibration, features,
                      detail=True)
    s_values = [step["features"]["path_value"] for step in observed.per_step]
    others = {f: [step["features"][f] for step in observed.per_step] for f in SWEPT_FEATURES
              if all(f in step["features"] for step in observed.per_step)}  # head_top1_1: banks with heads
    if any(tree.lookup_length for _, tree in trees):  # hybrid trees: thresholds on the lookup features too
        for f in ("lookup_match", "lookup_accept_rate"):
            others[f] = [step["features"].get(f, 0.0) for step in observed.per_step]
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
        held_features = build_features(held, resources.load, out / "heldout_features.jsonl",
                                       feature_settings(held_folder, held_settings, held), progress)
        held_rows, seen = [], set()
        for title, r in compared + [("chosen", chosen)]:
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
        heldout = {"frontier": str(held_folder), "prompts": held.num_prompts, "rows": held_rows}
        log(f"held-out replay over {held.num_prompts} prompts of {held_folder}")

    # 6. held-out Table-1 analogue
    table1 = None
    if config.test_n > 0:
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
        test = _cached_offline(out / "test_offline.json", cfg, bench, progress, log, reused_runs)
        table1 = {"num_prompts": test["num_prompts"], "machine": test["machine"], "rows": [
            {"name": named.get(m, "AR"), **method_row(m, test["methods"][m])} for m in methods]}
        static_method = method_for(best_static_sel)
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


# --------------------------------------------------------------------------- outputs


def _num(value: float | None, form: str = ".3f") -> str:
    return "–" if value is None else format(value, form)


def cost_text(results: dict[str, Any]) -> str:
    probe = results.get("step_costs")
    if probe:
        how = probe.get("method", "one engine drawing a random tree per step")  # the probe before session 16
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
    ax.set_xlabel("τ_on = τ_off (path value threshold; grey: the paper's grid)")
    ax.set_ylabel("predicted tok/s (replay × measured step costs)")
    ax.set_title(f"Scheduler sweep — {results['settings']['dataset']}, {results['settings']['calibration_prompts']} "
                 f"calibration prompts (best {len(pairs)} pairs)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_calibrate_outputs(results: dict[str, Any], out: Path) -> dict[str, str]:
    return write_stage_outputs(out, "calibrate", results, calibrate_markdown, plot_calibrate)
