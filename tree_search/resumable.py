"""Resumable JSONL files of a tree search (calibration and features caches, frontier logs, step
records, rollouts): a header line with the settings the file was made with, then one record per
line, appended as soon as it is done, so that an interrupted run resumes where it stopped."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from entmtp_vllm.errors import EntMTPError


def _header(settings: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "settings", "settings": settings}


def _normalised(value: Any) -> Any:
    return json.loads(json.dumps(value))


def settings_difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old -> new` for every setting that differs (after a JSON round trip)."""
    old, new = _normalised(old), _normalised(new)
    keys = sorted(set(old) | set(new))

    def show(value: Any) -> str:
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."

    return [f"{key}: {show(old.get(key))} in the folder, {show(new.get(key))} now" for key in keys if old.get(key) != new.get(key)]


def read_jsonl(path: Path, what: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]], bool]:
    """(settings, records, truncated): a JSONL file whose first line is a settings header.

    A last line cut short (a crash while writing) is dropped and reported as `truncated`;
    any other bad line is an error.
    """
    if not path.is_file():
        return None, [], False
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    truncated = False
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines) and not text.endswith("\n"):
                truncated = True  # the last line, never finished (a crash while writing it)
                break
            raise EntMTPError(f"{what} {path}: line {number} is not valid JSON; delete the file to start over") from None
    if not records:
        return None, [], truncated
    head = records[0]
    if head.get("kind") != "settings" or not isinstance(head.get("settings"), dict):
        raise EntMTPError(f"{what} {path}: the first line is not a settings header; delete the file to start over")
    return head["settings"], records[1:], truncated


def rewrite_jsonl(path: Path, settings: dict[str, Any], records: Sequence[dict[str, Any]]) -> None:
    """Write header + records (used to drop a truncated last line before appending)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for record in [_header(settings), *records]:
            handle.write(json.dumps(record) + "\n")
    tmp.replace(path)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()


def made_with(path: Path, what: str, settings: dict[str, Any]) -> bool:
    """Whether the file at `path` exists with a header of `settings` (no `settings_difference`)."""
    old, _, _ = read_jsonl(path, what)
    return old is not None and not settings_difference(old, settings)


def resume_jsonl(path: Path, what: str, settings: dict[str, Any], kind: str,
                 refusal: str | None) -> tuple[list[dict[str, Any]], bool]:
    """(records, truncated) of the file at `path`, to resume a run made with `settings`.

    A missing or empty file, or one made with other settings that holds no `kind` record yet
    (nothing computed), starts over: a header of `settings` is written and no record returned.
    A file whose `kind` records were made with other settings is refused: an `EntMTPError` of
    `refusal.format(path=path, diff=...)`, `diff` the `settings_difference` lines joined by `; `;
    with `refusal` None it starts over instead (records of other settings are dropped).
    `truncated` (see `read_jsonl`): the caller rewrites the file with the records it keeps
    before appending after them.
    """
    old, records, truncated = read_jsonl(path, what)
    if old is not None:
        diff = settings_difference(old, settings)
        if not diff:
            return records, truncated
        if refusal is not None and any(r.get("kind") == kind for r in records):
            raise EntMTPError(refusal.format(path=path, diff="; ".join(diff)))
    rewrite_jsonl(path, settings, [])
    return [], False
