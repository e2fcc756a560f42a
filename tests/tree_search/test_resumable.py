"""Resumable JSONL files: `resume_jsonl` resumes, starts over or refuses, by settings and records;
`made_with` only compares the header."""

from __future__ import annotations

import json

import pytest

from entmtp_vllm.errors import EntMTPError
from tree_search.resumable import append_jsonl, made_with, read_jsonl, resume_jsonl, rewrite_jsonl

SETTINGS = {"budget": 8, "prompt_ids": ["p0", "p1"]}
REFUSAL = "{path} was made with other settings ({diff}); start over"


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_missing_file_starts_with_a_header(tmp_path):
    path = tmp_path / "log.jsonl"
    assert resume_jsonl(path, "log", SETTINGS, "step", REFUSAL) == ([], False)
    assert lines(path) == [{"kind": "settings", "settings": SETTINGS}]


def test_the_same_settings_resume_every_record(tmp_path):
    path = tmp_path / "log.jsonl"
    rewrite_jsonl(path, SETTINGS, [{"kind": "eos", "eos_ids": [2]}])
    append_jsonl(path, {"kind": "step", "id": "p0"})
    before = path.read_text()
    records, truncated = resume_jsonl(path, "log", dict(SETTINGS), "step", REFUSAL)
    assert records == [{"kind": "eos", "eos_ids": [2]}, {"kind": "step", "id": "p0"}] and not truncated
    assert path.read_text() == before  # left as it is: the caller appends


def test_a_last_line_cut_short_is_reported_not_dropped(tmp_path):
    path = tmp_path / "log.jsonl"
    rewrite_jsonl(path, SETTINGS, [{"kind": "step", "id": "p0"}])
    with path.open("a") as handle:
        handle.write('{"kind": "step", "id"')
    records, truncated = resume_jsonl(path, "log", SETTINGS, "step", REFUSAL)
    assert records == [{"kind": "step", "id": "p0"}] and truncated
    assert read_jsonl(path, "log")[2]  # the caller rewrites it with the records it keeps


def test_other_settings_without_records_start_over(tmp_path):
    path = tmp_path / "log.jsonl"
    rewrite_jsonl(path, {**SETTINGS, "budget": 4}, [{"kind": "eos", "eos_ids": [2]}])
    assert resume_jsonl(path, "log", SETTINGS, "step", REFUSAL) == ([], False)
    assert lines(path) == [{"kind": "settings", "settings": SETTINGS}]


def test_other_settings_with_records_are_refused(tmp_path):
    path = tmp_path / "log.jsonl"
    rewrite_jsonl(path, {**SETTINGS, "budget": 4}, [{"kind": "step", "id": "p0"}])
    before = path.read_text()
    with pytest.raises(EntMTPError) as error:
        resume_jsonl(path, "log", SETTINGS, "step", REFUSAL)
    assert str(error.value) == f"{path} was made with other settings (budget: 4 in the folder, 8 now); start over"
    assert path.read_text() == before


def test_without_a_refusal_other_settings_with_records_start_over(tmp_path):
    path = tmp_path / "log.jsonl"
    rewrite_jsonl(path, {**SETTINGS, "budget": 4}, [{"kind": "step", "id": "p0"}])
    assert resume_jsonl(path, "log", SETTINGS, "step", None) == ([], False)
    assert lines(path) == [{"kind": "settings", "settings": SETTINGS}]


def test_made_with_compares_the_header(tmp_path):
    path = tmp_path / "log.jsonl"
    assert not made_with(path, "log", SETTINGS)
    rewrite_jsonl(path, SETTINGS, [{"kind": "step", "id": "p0"}])
    assert made_with(path, "log", dict(SETTINGS)) and not made_with(path, "log", {**SETTINGS, "budget": 4})
    assert lines(path)[1] == {"kind": "step", "id": "p0"}  # only read
