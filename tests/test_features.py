"""Tests for entmtp_vllm/features.py: path value, entropy, the per-request tracker."""

from __future__ import annotations

import math

import pytest
import torch

from entmtp_vllm.features import (
    DEFAULT_EMA_WINDOWS,
    POLICY_FEATURES,
    FeatureTracker,
    StepFeatures,
    best_path_value,
    entropy,
    feature_value,
    heads_read,
)


@pytest.mark.parametrize(
    ("p0", "heads", "expected"),
    [
        (0.9, [0.5, 0.9], 0.9),  # p0 alone is best
        (1.0, [1.0, 0.5], 1.0),  # depth 1 ties p0
        (0.5, [], 0.5),
        (0.2, [0.1], 0.2),
        (0.8, [0.9, 0.9, 0.1], 0.8),
    ],
)
def test_best_path_value(p0: float, heads: list[float], expected: float) -> None:
    assert best_path_value(p0, heads) == pytest.approx(expected)


def test_best_path_value_is_the_max_over_cumulative_products() -> None:
    heads = [0.9, 0.8, 0.7]
    products = [0.6, 0.6 * 0.9, 0.6 * 0.9 * 0.8, 0.6 * 0.9 * 0.8 * 0.7]
    assert best_path_value(0.6, heads) == pytest.approx(max(products))
    assert best_path_value(0.6, torch.tensor(heads)) == pytest.approx(max(products))


def test_entropy() -> None:
    assert float(entropy(torch.full((8,), 1 / 8))) == pytest.approx(math.log(8))
    assert float(entropy(torch.tensor([0.0, 1.0, 0.0]))) == 0.0
    rows = entropy(torch.tensor([[0.5, 0.5], [1.0, 0.0]]))
    assert rows.shape == (2,)
    assert rows.tolist() == pytest.approx([math.log(2), 0.0])


def test_emas_start_at_the_first_value_and_follow_the_recursion() -> None:
    tracker = FeatureTracker(ema_windows=(4, 8))
    values = [1.0, 3.0, 2.0]
    for value in values:
        tracker.observe_step(2, value)
    for window in (4, 8):
        alpha = 2 / (window + 1)
        expected = values[0]
        for value in values[1:]:
            expected = (1 - alpha) * expected + alpha * value
        assert tracker.features(0.5, [], 0.0).entropy_ema[window] == pytest.approx(expected)


def test_features_before_any_step() -> None:
    tracker = FeatureTracker()
    features = tracker.features(0.7, [0.5, 0.4], 1.25)
    assert features.entropy_ema == {window: 1.25 for window in DEFAULT_EMA_WINDOWS}
    assert features.recent_accept_mean == 0.0
    assert features.last_accept_length == 0
    assert features.path_value == pytest.approx(0.7)
    assert tracker.steps == 0


def test_recent_accept_stats_use_the_last_k_steps() -> None:
    tracker = FeatureTracker(accept_window=3)
    for length in [5, 1, 2, 4, 3]:
        tracker.observe_step(length, 1.0)
    features = tracker.features(0.5, [0.5], 1.0)
    assert features.recent_accept_mean == pytest.approx(3.0)
    assert (features.recent_accept_min, features.recent_accept_max) == (2.0, 4.0)
    assert features.last_accept_length == 3
    assert tracker.steps == 5


def test_as_row_is_flat_floats_with_extra() -> None:
    tracker = FeatureTracker(ema_windows=(4,))
    tracker.observe_step(3, 2.0)
    features = tracker.features(0.9, [0.5, 0.2], 1.5, extra={"lookup_match": 2})
    assert features.top1_probs == [0.9, 0.5, 0.2]
    row = features.as_row()
    assert row == {
        "path_value": 0.9,
        "p0": 0.9,
        "head_top1_1": 0.5,
        "head_top1_2": 0.2,
        "entropy": 1.5,
        "entropy_ema_4": 2.0,
        "recent_accept_mean": 3.0,
        "recent_accept_min": 3.0,
        "recent_accept_max": 3.0,
        "last_accept_length": 3.0,
        "lookup_match": 2.0,
    }
    assert all(isinstance(value, float) for value in row.values())


def test_as_row_refuses_extra_that_shadows_a_feature() -> None:
    features = StepFeatures(0.5, 0.5, [], 1.0, {}, 0.0, 0.0, 0.0, 0, extra={"p0": 1.0})
    with pytest.raises(ValueError, match="p0"):
        features.as_row()


def test_tracker_argument_checks() -> None:
    with pytest.raises(ValueError):
        FeatureTracker(ema_windows=())
    with pytest.raises(ValueError):
        FeatureTracker(accept_window=0)


def test_head_feature_value_is_head_ones_top1_and_needs_the_chain() -> None:
    tracker = FeatureTracker()
    assert "head_top1_1" in POLICY_FEATURES and heads_read("head_top1_1") == 1
    assert heads_read("path_value") == 0 and heads_read("lookup_match") == 0
    assert feature_value(tracker.features(0.9, [0.25, 0.5], 1.0), "head_top1_1") == 0.25
    with pytest.raises(ValueError, match="head 1"):
        feature_value(tracker.features(0.9, [], 1.0), "head_top1_1")
