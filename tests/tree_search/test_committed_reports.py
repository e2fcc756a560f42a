"""The committed regime reports re-render byte for byte from their committed JSON with today's
code: a refactor of tree_search's report code that changed what it writes fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tree_search.regimes_report import combine, regimes_markdown

SEARCH = Path(__file__).resolve().parents[2] / "docs" / "search"
TASKS = ("mt_bench", "sharegpt", "humaneval", "gsm8k")


@pytest.mark.parametrize("task", TASKS)
def test_regimes_report_rerenders_identically(task: str) -> None:
    results = SEARCH / task / "regimes" / "regimes.json"
    assert regimes_markdown(json.loads(results.read_text())) == results.with_suffix(".md").read_text()


def test_combined_regimes_rerender_identically(tmp_path: Path) -> None:
    combine([SEARCH / task / "regimes" / "regimes.json" for task in TASKS], tmp_path)
    assert (tmp_path / "regimes_tasks.md").read_text() == (SEARCH / "regimes_tasks.md").read_text()
    assert (tmp_path / "regimes_tasks.png").stat().st_size > 0  # the figure's bytes depend on matplotlib's version
