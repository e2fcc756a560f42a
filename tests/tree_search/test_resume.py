"""(d) A search resumed from a partial log ends with the same frontier as an uninterrupted one."""

from __future__ import annotations

import json

import pytest

from _search_parts import calibrate, random_prompts
from entmtp_vllm.errors import EntMTPError
from tree_search.frontier import open_frontier_log, search_frontier
from tree_search.scoring import RankScorer

SETTINGS = {"dataset": "synthetic", "budget": 8, "max_depth": 3, "prompt_ids": ["p0", "p1", "p2"]}


def strip(steps):
    return [{k: v for k, v in s.as_record().items() if k != "time_s"} for s in steps]


def run(scorer, path, stop_after=None):
    history = open_frontier_log(path, SETTINGS)
    return search_frontier(scorer, 8, 3, history, path, progress=False, stop_after=stop_after)


def test_resume_after_an_interruption_gives_the_same_frontier(calibration, tmp_path):
    scorer = RankScorer(calibration)
    full = run(scorer, tmp_path / "full.jsonl")
    assert len(full) == 8

    path = tmp_path / "interrupted.jsonl"
    partial = run(scorer, path, stop_after=3)
    assert len(partial) == 3
    assert len(path.read_text().splitlines()) == 1 + 3  # header + one line per step
    resumed = run(scorer, path)
    assert strip(resumed) == strip(full)
    assert strip(open_frontier_log(path, SETTINGS)) == strip(full)  # the log holds the whole history


def test_resume_drops_a_last_line_cut_short_by_a_crash(calibration, tmp_path):
    scorer = RankScorer(calibration)
    full = run(scorer, tmp_path / "full.jsonl")
    lines = (tmp_path / "full.jsonl").read_text().splitlines()
    path = tmp_path / "crashed.jsonl"
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])  # 2 steps, then half a line
    assert len(open_frontier_log(path, SETTINGS)) == 2
    assert strip(run(scorer, path)) == strip(full)


def test_resume_with_a_real_calibration_cache(tiny, tmp_path):
    """The calibration cache resumes too: a cached prompt is not recomputed, a missing one is added."""
    model, drafter = tiny
    prompts = random_prompts(3)
    cache = tmp_path / "calibration.jsonl"
    first = calibrate(model, drafter, prompts[:2], path=cache)
    loads = []

    def refuse():
        loads.append(1)
        return model, None, drafter

    from tree_search.trajectories import build_calibration

    settings = {"max_tokens": 24, "prompt_ids": [p.id for p in prompts[:2]], "rank_depth": 3, "rank_cap": 16}
    again = build_calibration(prompts[:2], max_tokens=24, rank_depth=3, rank_cap=16, settings=settings,
                              load=refuse, path=cache, progress=False)
    assert loads == []  # everything came from the cache
    assert [t.as_record() for t in again.trajectories] == [t.as_record() for t in first.trajectories]
    assert again.eos_ids == first.eos_ids


def test_other_settings_are_refused(calibration, tmp_path):
    path = tmp_path / "log.jsonl"
    run(RankScorer(calibration), path, stop_after=2)
    with pytest.raises(EntMTPError, match=r"other settings \(budget: 8 in the folder, 16 now\)"):
        open_frontier_log(path, {**SETTINGS, "budget": 16})


def test_a_corrupt_log_is_refused(calibration, tmp_path):
    path = tmp_path / "log.jsonl"
    run(RankScorer(calibration), path, stop_after=3)
    lines = path.read_text().splitlines()
    step = json.loads(lines[2])
    step["added"] = [5, 5]
    path.write_text("\n".join([lines[0], lines[1], json.dumps(step)]) + "\n")
    with pytest.raises(EntMTPError, match="not a frontier child"):
        search_frontier(RankScorer(calibration), 8, 3, open_frontier_log(path, SETTINGS), path, progress=False)
    path.write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    with pytest.raises(EntMTPError, match="line 2 is not valid JSON"):
        open_frontier_log(path, SETTINGS)


def test_a_log_without_steps_takes_the_new_settings(calibration, tmp_path):
    path = tmp_path / "log.jsonl"
    assert open_frontier_log(path, SETTINGS) == []  # header only, as after a failed start
    other = {**SETTINGS, "budget": 3}
    assert open_frontier_log(path, other) == []
    assert json.loads(path.read_text().splitlines()[0])["settings"]["budget"] == 3
