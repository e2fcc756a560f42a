"""Debiasing on a model whose drafts are accepted: the engine's self-rollout equals the tree's own
teacher-forced rollout, and the frontier's what-if τ is compared with it."""

from __future__ import annotations

import pytest

from _search_parts import calibrate, random_prompts
from tree_search.debias import debias_markdown, run_debias
from tree_search.frontier import open_frontier_log, search_frontier
from tree_search.resources import Resources
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


def test_a_prompt_subset_recomputes_the_biased_tau_and_resumes(tiny, tmp_path):
    model, drafter = tiny
    calibration = calibrate(model, drafter, random_prompts(3), path=tmp_path / "calibration.jsonl")
    log = tmp_path / "frontier.jsonl"
    history = search_frontier(RankScorer(calibration), 6, 3, open_frontier_log(log, SETTINGS), log, progress=False)
    results = run_debias(tmp_path, [3, 6], progress=False, num_prompts=2,
                         resources=Resources(model=model, tokenizer=None, drafter=drafter))
    assert results["num_prompts"] == 2 and results["prompts_subset"]
    sub = RankScorer(type(calibration)(calibration.trajectories[:2], calibration.max_tokens, calibration.eos_ids,
                                       calibration.rank_depth, calibration.rank_cap))
    for row in results["rows"]:
        step = history[row["size"] - 1]
        before = [p for p in map(tuple, step.tree) if p != step.added]
        assert row["biased"] == sub.score(before, [step.added]).what_if_tau(step.added)
        assert row["self"] == pytest.approx(row["teacher_forced"], abs=1e-12)
        assert row["self"] == pytest.approx(sub.evaluate(step.as_tree()).tau, abs=1e-12)
    assert "first of the frontier's calibration prompts" in debias_markdown(results)

    class NoModel(Resources):
        def load(self):
            raise AssertionError("every rollout is cached: no model needed")

    again = run_debias(tmp_path, [3, 6], progress=False, num_prompts=2, resources=NoModel())
    assert [r["self"] for r in again["rows"]] == [r["self"] for r in results["rows"]]
