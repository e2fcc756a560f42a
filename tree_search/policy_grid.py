"""The policy grid of `calibrate` and its sweep: every scheduler policy tried (static trees,
hysteresis on the path value and on other features, ladders), each replayed over the calibration
trajectories and priced with the measured step costs (predicted tok/s)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from entmtp_vllm.policies import validate_policy_config
from entmtp_vllm.tree import Tree

from tree_search.position_features import PositionFeatures
from tree_search.replay import replay
from tree_search.step_costs import CostModel
from tree_search.trajectories import Calibration

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
