"""The regimes stage: `--source replay` gives the engine's own step records and the same analysis."""

from __future__ import annotations

import pytest


def test_replayed_records_equal_the_engine_records(tiny, tmp_path):
    """`regimes --source replay` gives the engine's own step records (tiny model whose drafts are accepted)."""
    import json

    from _search_parts import calibrate, random_prompts
    from tree_search.frontier import open_frontier_log, search_frontier
    from tree_search.resources import Resources
    from tree_search.regimes import RegimesConfig, run_regimes
    from tree_search.scoring import RankScorer

    model, drafter = tiny
    prompts = random_prompts(4)
    calibration = calibrate(model, drafter, prompts, path=tmp_path / "calibration.jsonl")
    settings = {"dataset": "synthetic", "split": "all", "seed": 0, "max_tokens": 24, "dtype": "float32",
                "scorer": "rank", "model": "tiny", "heads": "tiny", "budget": 8, "max_depth": 3,
                "prompt_ids": [p.id for p in prompts]}
    log = tmp_path / "frontier.jsonl"
    search_frontier(RankScorer(calibration), 8, 3, open_frontier_log(log, settings), log, progress=False)
    resources = Resources(model=model, tokenizer=None, drafter=drafter)
    engine = run_regimes(RegimesConfig(str(tmp_path), tree="n8", out=str(tmp_path / "engine"), folds=2), False,
                         resources=resources)
    replay = run_regimes(RegimesConfig(str(tmp_path), tree="n8", out=str(tmp_path / "replay"), folds=2,
                                       source="replay", check_n=2), False, resources=resources)
    assert replay["engine_check"]["accept_mismatches"] == 0
    assert replay["engine_check"]["max_abs_feature_diff"] < 1e-4

    def records(folder):
        return [json.loads(line) for line in (tmp_path / folder / "steps.jsonl").read_text().splitlines()[1:]]

    real, mine = records("engine"), records("replay")
    assert [r["id"] for r in real] == [r["id"] for r in mine] == [p.id for p in prompts]
    for a, b in zip(real, mine):
        assert a["tokens"] == b["tokens"]
        assert [s["accept_length"] for s in a["steps"]] == [s["accept_length"] for s in b["steps"]]
        assert max(s["accept_length"] for s in a["steps"]) > 1
        for x, y in zip(a["steps"], b["steps"]):
            assert x["features"].keys() == y["features"].keys()
            assert x["features"] == pytest.approx(y["features"], rel=1e-4, abs=1e-5)
    assert replay["rows"] == engine["rows"]
    for f, g in zip(engine["per_feature"], replay["per_feature"]):
        assert f["feature"] == g["feature"]
        if f["r"] is not None:
            assert g["r"] == pytest.approx(f["r"], abs=1e-3)
