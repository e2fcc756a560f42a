"""Words that tell how the project was developed rather than what it does: work sessions, issue
numbers, internal dates and commit hashes standing in for versions. One place for the patterns,
shared by the test modules (imported by this unique name)."""

from __future__ import annotations

import re

# "session" or "sessions" as a word of its own: "ClientSession" and "session_id" are names.
SESSION = re.compile(r"\bsessions?\b", re.IGNORECASE)
# "#18", "(#20)", "issue 20", "issue #20", "issues #18-#21"; not "#top", "&#39;", "#1234" or "#0"
# (no issue has number 0: "root #0" numbers a tree's nodes).
ISSUE = re.compile(r"(?<![\w&])#[1-9]\d{0,2}\b|\bissues?\s+#?\d+", re.IGNORECASE)
# A day written as 2026-12-03; a timestamp's day (2026-12-07T21:40:26) is joined to its time.
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# A lone lowercase hex word of 7-40 characters with a digit and a letter: an abbreviated or full
# commit. Hex joined to other hex by "-" (a UUID) or longer than 40 (a sha256) is data.
COMMIT = re.compile(r"(?<![\w-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")

CONTEXT = 30  # characters shown on each side of a finding


def _snippet(text: str, match: re.Match[str]) -> str:
    start, end = max(0, match.start() - CONTEXT), min(len(text), match.end() + CONTEXT)
    return " ".join(f"{text[start:match.start()]}[{match.group()}]{text[match.end():end]}".split())


def history_words(text: str, *, allow_dates_and_commits: bool = False) -> list[str]:
    """The findings in `text`, each with a little context and the finding in [brackets], in the
    order of the text. `allow_dates_and_commits` (a changelog) lets dates and commits stand."""
    patterns = [SESSION, ISSUE] if allow_dates_and_commits else [SESSION, ISSUE, DATE, COMMIT]
    matches = sorted((m for pattern in patterns for m in pattern.finditer(text)), key=lambda m: m.start())
    return [_snippet(text, m) for m in matches]
