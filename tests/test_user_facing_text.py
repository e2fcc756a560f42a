"""User-facing text speaks of the product, not of how it was developed, and cites only paths that
exist.

History words (`_history_words`: work sessions, issue numbers, internal dates, commit hashes) are
looked for in README.md, every docs page, the scripts and text files kept under docs/results and
docs/search, and every string and comment of the packages (docstrings, --help texts, messages),
their model cards, Serve and Kubernetes files and bank metadata. The changelog page alone may date
its entries and name commits. Every `docs/...` path that the packages' strings and comments, the
model cards and the tests' comments and docstrings cite names a file or folder of the repository.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from _history_words import history_words

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("entmtp_vllm", "tree_search", "deploy", "kernels")
CHANGELOG = REPO / "docs" / "changelog.md"
DOCS_DATA_FOLDERS = (REPO / "docs" / "results", REPO / "docs" / "search")
DOCS_TEXT_SUFFIXES = {".txt", ".sh", ".py"}  # besides .md; .json, .csv and .log there are data
PACKAGE_TEXT_SUFFIXES = {".py", ".md", ".json", ".yaml", ".yml", ".sh", ".txt", ".toml"}
DOCS_PATH = re.compile(r"(?<![\w./-])docs/[\w.*/-]*")


def python_text(source: str, *, docstrings_only: bool = False) -> str:
    """The comments of a Python source and its string constants (only its docstrings with
    `docstrings_only`), one after another."""
    tree = ast.parse(source)
    if docstrings_only:
        defs = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, defs))]
        strings = [doc for scope in scopes if (doc := ast.get_docstring(scope, clean=False))]
    else:
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = [t.string.lstrip("#") for t in tokens if t.type == tokenize.COMMENT]
    return "\n".join(strings + comments)


def json_strings(value: object) -> Iterator[str]:
    """Every string of a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)


def text_of(path: Path) -> str:
    """What a reader sees of a file: a Python file's strings and comments, a JSON file's strings,
    any other file whole."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return python_text(text)
    if path.suffix == ".json":
        return "\n".join(json_strings(json.loads(text)))
    return text


def docs_files() -> list[Path]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    kept = [p for folder in DOCS_DATA_FOLDERS for p in sorted(folder.rglob("*")) if p.suffix in DOCS_TEXT_SUFFIXES]
    return pages + [p for p in kept if "__pycache__" not in p.parts]


def package_files() -> list[Path]:
    files = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and (
                path.suffix in PACKAGE_TEXT_SUFFIXES or path.name == "Dockerfile"
            ):
                files.append(path)
    return files


def missing_docs_paths(text: str) -> list[str]:
    """The `docs/...` paths cited in `text` that name nothing in the repository (a glob: nothing
    it matches)."""
    missing = []
    for match in DOCS_PATH.finditer(text):
        path = match.group().rstrip(".,:;/-")
        found = any(REPO.glob(path)) if "*" in path else (REPO / path).exists()
        if not found:
            missing.append(path)
    return missing


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


def _findings(path: Path) -> list[str]:
    return history_words(text_of(path), allow_dates_and_commits=path == CHANGELOG)


@pytest.mark.parametrize("path", docs_files(), ids=_id)
def test_docs_speak_of_the_product_only(path: Path) -> None:
    found = _findings(path)
    assert not found, f"{_id(path)}: " + " | ".join(found)


@pytest.mark.parametrize("path", package_files(), ids=_id)
def test_package_text_speaks_of_the_product_only(path: Path) -> None:
    found = _findings(path)
    assert not found, f"{_id(path)}: " + " | ".join(found)


@pytest.mark.parametrize("path", package_files(), ids=_id)
def test_package_text_cites_docs_paths_that_exist(path: Path) -> None:
    missing = missing_docs_paths(text_of(path))
    assert not missing, f"{_id(path)} cites missing paths: {missing}"


@pytest.mark.parametrize("path", sorted((REPO / "tests").rglob("*.py")), ids=_id)
def test_test_comments_cite_docs_paths_that_exist(path: Path) -> None:
    text = python_text(path.read_text(encoding="utf-8"), docstrings_only=True)
    missing = missing_docs_paths(text)
    assert not missing, f"{_id(path)} cites missing paths: {missing}"


def test_the_history_check_sees_each_kind() -> None:
    """Negative control: one of each kind is found, and the look-alikes are not."""
    text = "measured in session 41 (#19, see issue 20) at 5ff2396 on 2026-12-03"
    found = history_words(text)
    for word in ("[session]", "[#19]", "[issue 20]", "[5ff2396]", "[2026-12-03]"):
        assert sum(word in snippet for snippet in found) == 1, (word, found)
    assert len(found) == 5, found
    assert history_words(text, allow_dates_and_commits=True) == found[:3]
    clean = (
        "an aiohttp ClientSession; session_id; measured 2026-12-07T21:40:26+00:00; [back up](#top); "
        "&#39; root #0; sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855; "
        "uuid 550e8400-e29b-41d4-a716-446655440000; seed 1234567; float32; bf16; deadbeef; #1234"
    )
    assert history_words(clean) == []


def test_the_python_reader_sees_comments_and_strings() -> None:
    """Negative control of the reader: a docstring, a comment and a help string are read; with
    `docstrings_only` the help string is not."""
    source = (
        '"""Doc from session 3."""\n'
        "x = 1  # fixed in #12\n"
        'HELP = "see issue 9"\n'
    )
    assert len(history_words(python_text(source))) == 3
    assert len(history_words(python_text(source, docstrings_only=True))) == 2  # docstring and comment


def test_the_path_check_sees_a_missing_path() -> None:
    """Negative control: an existing page, folder and glob pass; a missing path is named."""
    text = "see docs/gpu.md, docs/search/ and docs/**/*.md, not docs/results/nowhere/run.md."
    assert missing_docs_paths(text) == ["docs/results/nowhere/run.md"]
