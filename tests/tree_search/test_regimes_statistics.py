"""Regime statistics on synthetic step rows with a known answer, and splits by prompt."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from entmtp_vllm.errors import EntMTPError
from tree_search.regimes_statistics import Logistic, analyse, auroc, pairs, pearson, prompt_folds, split_by_prompt


def synthetic_generations(prompts: int = 60, steps: int = 80, noise: float = 1.0, seed: int = 0):
    """Accept lengths in 1..4; `signal` = accept length + N(0, noise²), seen before the step;
    `junk` is independent noise; `last` is the previous accept length (a lag feature)."""
    rng = np.random.default_rng(seed)
    generations = []
    for p in range(prompts):
        accepts = rng.integers(1, 5, size=steps)
        rows, last = [], 0
        for a in accepts:
            rows.append({"features": {"signal": float(a + rng.normal(0, noise)), "junk": float(rng.normal()),
                                      "last": float(last)}, "accept_length": int(a)})
            last = int(a)
        generations.append({"id": f"prompt-{p}", "steps": rows})
    return generations


def test_pearson_and_auroc_against_direct_formulas():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=200), rng.normal(size=200)
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
    assert pearson([1, 1, 1, 1], [1, 2, 3, 4]) is None and pearson([1, 2], [2, 1]) is None
    scores = [0.1, 0.4, 0.4, 0.8, 0.3, 0.4, 0.9]
    labels = [0, 0, 1, 1, 0, 1, 1]
    pos = [s for s, l in zip(scores, labels) if l]
    neg = [s for s, l in zip(scores, labels) if not l]
    brute = sum((a > b) + 0.5 * (a == b) for a, b in itertools.product(pos, neg)) / (len(pos) * len(neg))
    assert auroc(scores, labels) == pytest.approx(brute)
    assert auroc([1, 2, 3], [1, 1, 1]) is None
    assert auroc([1, 2, 3, 4], [0, 0, 1, 1]) == 1.0 and auroc([1, 2, 3, 4], [1, 1, 0, 0]) == 0.0


def test_known_correlation_and_classifier_auroc():
    noise = 1.0
    results = analyse(synthetic_generations(noise=noise), folds=5)
    by = {f["feature"]: f for f in results["per_feature"]}
    expected = math.sqrt(1.25 / (1.25 + noise**2))  # var of uniform{1..4} = 1.25
    assert by["signal"]["r"] == pytest.approx(expected, abs=0.03)
    assert abs(by["junk"]["r"]) < 0.05 and abs(by["last"]["r"]) < 0.05  # independent steps
    assert by["signal"]["auroc_sign"] == "−"  # a higher signal means fewer bonus-only steps
    assert results["bonus_only_rate"] == pytest.approx(0.25, abs=0.02)
    c = results["classifier"]
    assert c["folds"] == 5 and len(c["auroc_folds"]) == 5
    # the best possible score for "accept == 1" given signal alone: P(a=1 | signal) is monotone in
    # -signal, so the classifier's AUROC should match the signal's own
    assert c["auroc_mean"] == pytest.approx(by["signal"]["auroc"], abs=0.03)
    assert c["auroc_mean"] > 0.8
    assert c["holdout"]["auroc"] > 0.8

    pure_noise = analyse(synthetic_generations(noise=1e6, seed=3), folds=5)["classifier"]
    assert abs(pure_noise["auroc_mean"] - 0.5) < 0.05


def test_lag_one_pairs_stay_inside_a_generation():
    gens = [{"id": "a", "steps": [{"features": {"f": 1.0}, "accept_length": 2},
                                  {"features": {"f": 2.0}, "accept_length": 3}]},
            {"id": "b", "steps": [{"features": {"f": 5.0}, "accept_length": 1}]}]
    assert [(r["prompt"], r["features"]["f"], r["target"]) for r in pairs(gens, 0)] == [
        ("a", 1.0, 2), ("a", 2.0, 3), ("b", 5.0, 1)]
    assert [(r["prompt"], r["features"]["f"], r["target"]) for r in pairs(gens, 1)] == [("a", 1.0, 3)]


def test_splits_are_by_prompt():
    ids = [f"p{i // 7}" for i in range(7 * 23)]  # 23 prompts, 7 rows each
    train, test = split_by_prompt(ids, 0.3, seed=4)
    assert train.isdisjoint(test) and train | test == set(ids)
    assert len(test) == round(0.3 * 23)
    assert split_by_prompt(ids, 0.3, seed=4) == (train, test)  # deterministic
    assert split_by_prompt(ids, 0.3, seed=5) != (train, test)
    rows_train = [i for i in ids if i in train]
    rows_test = [i for i in ids if i in test]
    assert len(rows_train) + len(rows_test) == len(ids) and not set(rows_train) & set(rows_test)

    folds = prompt_folds(ids, 5, seed=1)
    assert len(folds) == 5 and set().union(*folds) == set(ids)
    assert sum(len(f) for f in folds) == 23  # each prompt in exactly one fold
    assert split_by_prompt(["a", "a", "b"], 0.9) in [({"a"}, {"b"}), ({"b"}, {"a"})]  # one each side
    with pytest.raises(EntMTPError, match="at least 2 prompts"):
        split_by_prompt(["a", "a"], 0.3)


def test_logistic_regression_recovers_a_separating_direction():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2000, 3))
    y = (rng.random(2000) < 1 / (1 + np.exp(-(2 * x[:, 0] - x[:, 2])))).astype(int)
    model = Logistic.fit(x, y)
    w = model.weights[1:] / model.scale  # back to raw feature units
    assert w[0] == pytest.approx(2.0, abs=0.3) and w[2] == pytest.approx(-1.0, abs=0.25) and abs(w[1]) < 0.2
    assert auroc(model.predict(x), y) > 0.8
