"""Statistics of the regime analysis: per feature, Pearson r with the next accept length and the
single-feature AUROC for the bonus-only event; a logistic regression (numpy, Newton steps with a
small ridge, standardized features) on all features, its AUROC on held-out prompts (split BY
PROMPT, never by row: K folds over prompts plus one fixed 70/30 prompt split)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from entmtp_vllm.errors import EntMTPError

BONUS_ONLY = "accept_length == 1"


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
