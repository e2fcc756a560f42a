"""Paired speed of two methods over the same prompts: ratio, bootstrap interval, per-prompt mean."""

from __future__ import annotations

import pytest

from entmtp_vllm.bench.paired import paired_speed, paired_text
from entmtp_vllm.errors import EntMTPError


def run(*rows):
    return {"prompts": [{"id": i, "num_tokens": n, "time_s": t} for i, n, t in rows]}


def test_paired_speed_pairs_prompts_by_id():
    """Per-prompt tok/s ratios (matched by id, in any order; a prompt may end at another length):
    the ratio over all prompts, the per-prompt mean and a 95% interval that vanishes with agreement."""
    baseline = run(("a", 10, 2.0), ("b", 10, 4.0), ("c", 12, 3.0))
    method = run(("c", 12, 3.0), ("a", 10, 1.0), ("b", 20, 8.0))
    vs = paired_speed(method, baseline)
    assert vs["prompts"] == 3 and vs["ratio"] == pytest.approx((42 / 12) / (32 / 9))
    assert vs["per_prompt_mean"] == pytest.approx((1 + 2 + 1) / 3)
    assert vs["per_prompt_ci95"] == pytest.approx(1.96 * (1 / 3) ** 0.5 / 3 ** 0.5)
    assert vs["faster_prompts"] == 1
    same = paired_speed(baseline, baseline)
    assert same["ratio"] == same["per_prompt_mean"] == 1.0 and same["per_prompt_ci95"] == 0.0
    assert same["ratio_ci95"] == pytest.approx([1.0, 1.0])
    with pytest.raises(EntMTPError, match="no timed prompt"):
        paired_speed(run(("z", 1, 1.0)), baseline)


def test_bootstrap_interval_brackets_the_ratio_and_narrows_with_more_prompts():
    """The interval holds the ratio, is reproducible, and shrinks about as 1/sqrt(prompts) when the
    same spread of per-prompt speeds is seen on more prompts; one prompt has no interval."""
    speeds = [0.9, 1.1, 1.0, 0.95, 1.05, 1.2, 0.8, 1.0]
    def pair(copies):
        rows = [(f"{k}-{i}", 100, 1.0) for k in range(copies) for i in range(len(speeds))]
        faster = [(f"{k}-{i}", 100, 1.0 / s) for k in range(copies) for i, s in enumerate(speeds)]
        return paired_speed(run(*faster), run(*rows))
    few, many = pair(1), pair(16)
    for vs in (few, many):
        low, high = vs["ratio_ci95"]
        assert low < vs["ratio"] < high
    assert pair(1) == few  # fixed seed
    width = lambda vs: vs["ratio_ci95"][1] - vs["ratio_ci95"][0]  # noqa: E731
    assert 2.5 < width(few) / width(many) < 6  # sqrt(16) = 4
    one = paired_speed(run(("a", 10, 1.0)), run(("a", 10, 2.0)))
    assert one["ratio"] == 2.0 and one["ratio_ci95"] is None
    assert paired_text(one) == "2.000" and paired_text(None) == "–"
    assert paired_text(few) == f"{few['ratio']:.3f} [{few['ratio_ci95'][0]:.3f}, {few['ratio_ci95'][1]:.3f}]"
