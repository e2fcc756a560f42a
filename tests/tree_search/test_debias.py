"""Debiasing on a model whose drafts are accepted: the engine's self-rollout equals the tree's own
teacher-forced rollout, and the frontier's what-if τ is compared with it."""

from __future__ import annotations

import pytest

from _search_parts import calibrate, random_prompts
from tree_search.debias import debias_markdown, run_debias
from tree_search.frontier import Resources, open_frontier_log, search_frontier
from tree_search.scoring import RankScorer

SETTINGS = {"dataset": "synthetic", "split": "all", "seed": 0, "max_tokens": 24, "dtype": "float32",
            "scorer": "rank", "model": "tiny", "heads": "tiny", "budget": 8, "max_depth": 3}


def test_self_rollout_matches_the_teacher_forced_rollout(tiny, tmp_path):
    model, drafter = tiny
    calibration = calibrate(model, drafter, random_prompts(3), path=tmp_path / "calibration.jsonl")
    log = tmp_path / "frontier.jsonl"
    history = search_frontier(RankScorer(calibration), 8, 3, open_frontier_log(log, SETTINGS), log, progress=False)
    results = run_debias(tmp_path, [2, 4, 8], reference="full:2,1", progress=False,
                         resources=Resources(model=model, tokenizer=None, drafter=drafter))
    rows = {r["name"]: r for r in results["rows"]}
    assert list(rows) == ["n2", "n4", "n8", "full:2,1"]
    for size in (2, 4, 8):
        row = rows[f"n{size}"]
        assert row["biased"] == history[size - 1].tau
        assert row["ar_mismatches"] == 0
        assert row["self"] == pytest.approx(row["teacher_forced"], abs=1e-12)  # engine == scorer's own rollout
        assert row["delta_pct"] == pytest.approx(100 * (row["biased"] - row["self"]) / row["self"])
    assert rows["n8"]["self"] > 1.2  # drafts are accepted: a real comparison
    assert rows["full:2,1"]["biased"] is None and rows["full:2,1"]["self"] >= 1.0
    table = debias_markdown(results)
    assert "| `n8` | 8 | " in table and ("unchanged" in table or "changed" in table)
