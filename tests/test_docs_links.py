"""Docs links: every relative Markdown link and image in README.md and docs/**/*.md names a file
(or folder) that exists. External links (http, https, mailto) and pure anchors are not checked;
an anchor after a path is dropped before the path is checked. Links inside code spans and fenced
code blocks are not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# [text](target "title") and ![alt](target); the target may be written <like this>.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
# [label]: target
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def markdown_files() -> list[Path]:
    return [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))


def relative_links(text: str) -> list[str]:
    """The relative link targets of a Markdown text, without anchors or queries."""
    text = CODE_SPAN.sub("", FENCE.sub("", text))
    targets = [m.group(1) for m in INLINE.finditer(text)] + [m.group(1) for m in REFERENCE.finditer(text)]
    links = []
    for target in targets:
        target = target.strip("<>").strip()
        if not target or target.startswith("#") or EXTERNAL.match(target):
            continue
        target = re.split(r"[#?]", target, maxsplit=1)[0]
        if target:
            links.append(target)
    return links


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path.read_text(encoding="utf-8")):
        base = REPO if target.startswith("/") else path.parent
        if not (base / target.lstrip("/")).exists():
            broken.append(target)
    return broken


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == [], f"{path.relative_to(REPO)}: links to missing files"


def test_the_checker_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text(
        "[ok](there.md#part) ![img](missing.png) [web](https://example.com) [a](#top)\n"
        "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n[ref]: gone/file.md\n"
    )
    assert broken_links(page) == ["missing.png", "gone/file.md"]
