"""Offline benchmark: method parsing, a tiny end-to-end run, the report files."""

from __future__ import annotations

import json

import pytest

from entmtp_vllm.bench.offline import markdown_report, resolve_baseline, write_report
from entmtp_vllm.bench.offline_config import MethodSpec, parse_methods
from entmtp_vllm.errors import EntMTPError


def test_parse_methods_keeps_commas_inside_tree_specs():
    methods = parse_methods("tree:full:2,1,1,ar,bank:b.json:ladder:0.1,0.3:a,b,c,medusa:chain:3")
    assert [m.label for m in methods] == ["ar", "tree:full:2,1,1", "bank:b.json:ladder:0.1,0.3:a,b,c", "medusa:chain:3"]
    assert methods[1] == MethodSpec("tree:full:2,1,1", "tree", "full:2,1,1")
    assert methods[2].source == "b.json" and methods[2].policy == "ladder:0.1,0.3:a,b,c"


def test_parse_methods_adds_ar_first_and_reads_names():
    methods = parse_methods(["tree:trees.json#mc_sim_7b_63", "bank:b.json"])
    assert methods[0] == MethodSpec("ar", "ar")
    assert methods[1].source == "trees.json" and methods[1].name == "mc_sim_7b_63"
    assert methods[2].policy is None


@pytest.mark.parametrize("text", ["tree", "tree:", "beam:3", "ar,ar", "bank"])
def test_parse_methods_rejects_bad_forms(text):
    with pytest.raises(EntMTPError):
        parse_methods(text)


def test_resolve_baseline_by_label_or_position():
    methods = parse_methods("bank:b.json:static:n4,bank:b.json")
    assert resolve_baseline(methods, None) == "ar"
    assert resolve_baseline(methods, "2") == resolve_baseline(methods, "bank:b.json:static:n4") == "bank:b.json:static:n4"
    for bad in ("4", "0", "bank:c.json"):
        with pytest.raises(EntMTPError, match="1 = ar, 2 = bank:b.json:static:n4, 3 = bank:b.json"):
            resolve_baseline(methods, bad)


def _results(mismatches):
    method = lambda tps, tau, nodes: {"tokens_per_second": tps, "speedup": tps / 10.0, "mean_accept_length": tau,
                                      "mean_nodes": nodes, "tokens": 100, "time_s": 100 / tps, "mismatches": len(mismatches)}
    return {
        "config": {"datasets": ["mt_bench"], "max_tokens": 32, "temperature": 0.0, "acceptance": "typical"},
        "machine": {"dtype": "bfloat16", "threads": 1, "cpu": "test cpu", "date": "2026-01-01T00:00:00+00:00"},
        "num_prompts": 2,
        "baseline": "ar",
        "methods": {"ar": method(10.0, 1.0, 1.0), "tree:chain:2": {
            **method(12.5, 1.6, 3.0), "vs_baseline": {"ratio": 1.25, "ratio_ci95": [1.1, 1.4]}}},
        "check_equal": {"checked": True, "mismatches": mismatches},
    }


def test_markdown_report_lists_methods_and_mismatches(tmp_path):
    clean = markdown_report(_results([]))
    assert "| `tree:chain:2` | 12.50 | 1.250 | 1.250 [1.100, 1.400] | 1.600 | 3.0 |" in clean
    assert "| `ar` | 10.00 | 1.000 | baseline |" in clean and "over `ar`'s on the same prompts" in clean
    assert "equal AR's on every prompt" in clean
    bad = markdown_report(_results([{"method": "tree:chain:2", "id": "81", "dataset": "mt_bench", "first_difference": 7}]))
    assert "1 prompt(s) differ from AR" in bad and "first difference at token 7" in bad
    paths = write_report(_results([]), tmp_path / "out", stem="x")
    assert json.loads(paths["json"].read_text())["num_prompts"] == 2
    assert paths["png"].stat().st_size > 1000 and paths["markdown"].read_text() == clean
