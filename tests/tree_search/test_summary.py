"""The summary's compare table: the policy against the baseline and against the run's fastest static tree."""

from __future__ import annotations

import pytest

from tree_search.summary import compare_summary, compare_table


def _method(kind: str, seconds: list[float]) -> dict:
    rows = [{"id": f"p{i}", "num_tokens": 100, "time_s": s} for i, s in enumerate(seconds)]
    tps = 100 * len(seconds) / sum(seconds)
    return {"kind": kind, "tokens_per_second": tps, "mean_accept_length": 1.5, "speedup": 1.0, "prompts": rows}


def _offline(policy_seconds: list[float]) -> dict:
    labels = ["ar", "bank:b.json:static:n2", "bank:b.json:static:n4", "bank:b.json:hysteresis:0.5:n2,n4"]
    methods = {
        labels[0]: _method("ar", [8.0, 8.0, 8.0, 8.0]),
        labels[1]: _method("bank", [6.0, 6.2, 5.8, 6.0]),  # the baseline
        labels[2]: _method("bank", [5.8, 6.0, 5.6, 5.8]),  # the fastest static
        labels[3]: _method("bank", policy_seconds),
    }
    from entmtp_vllm.bench.paired import paired_speed

    for label in labels[2:]:
        methods[label]["vs_baseline"] = paired_speed(methods[label], methods[labels[1]])
    return {"baseline": labels[1], "methods": methods, "num_prompts": 4, "machine": {"dtype": "bfloat16"},
            "config": {"methods": labels, "interleave": "step"}}


def test_policy_is_also_paired_with_the_fastest_static_tree():
    summary = compare_summary(_offline([5.9, 6.1, 5.7, 5.9]))
    static_row, policy_row = summary["rows"]
    assert static_row["policy"] == "static:n4" and "vs_fastest_static" not in static_row
    versus = policy_row["vs_fastest_static"]
    assert versus["static"] == "static:n4" and versus["prompts"] == 4
    assert versus["ratio"] == pytest.approx((5.8 + 6.0 + 5.6 + 5.8) / (5.9 + 6.1 + 5.7 + 5.9))
    assert versus["ratio"] < 1 < policy_row["vs_baseline"]["ratio"]
    line = next(line for line in compare_table([{"label": "gsm8k", "compare": summary}]) if "hysteresis" in line)
    assert line.endswith("(`static:n4`) |") and "taking turns step by step" in compare_table(
        [{"label": "gsm8k", "compare": summary}])[-1]


def test_no_second_comparison_when_the_baseline_is_the_fastest_static():
    offline = _offline([6.0, 6.0, 6.0, 6.0])
    offline["methods"]["bank:b.json:static:n4"]["tokens_per_second"] = 1.0
    summary = compare_summary(offline)
    assert all("vs_fastest_static" not in row for row in summary["rows"])
    table = compare_table([{"label": "gsm8k", "compare": summary}])
    assert all(line.endswith("| – |") for line in table if line.startswith("| gsm8k |"))


def test_summary_names_the_throughput_runs_dtype():
    from tree_search.summary import summary_markdown

    def task(label: str, dtype: str) -> dict:
        row = {"name": "n4", "size": 4, "tokens_per_second": 15.0, "speedup": 0.85, "tau": 1.7}
        return {"label": label, "stages": dict.fromkeys(("frontier", "throughput", "calibrate", "regimes", "debias"), False),
                "half_size": None, "timing": {},
                "throughput": {"prompts": 8, "split": "test", "dtype": dtype, "ar": 18.0, "best_static": row,
                               "reference": None, "pareto": ["n4"], "held_out_half": None}}

    assert "test prompts (float32)" in summary_markdown([task("mt_bench", "float32")])
    assert "test prompts (bfloat16/float32)" in summary_markdown([task("a", "float32"), task("b", "bfloat16")])
