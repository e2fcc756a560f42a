"""The docs tree holds a product's docs, not a notebook: `docs/` stays under 15 MB, holds no
`.patch` files, no logs and no per-turn benchmark files, and every run folder under
`docs/results/` is cited by a page of the site (a folder no page links to has no reader).
Checked over the files git tracks (the working tree when git is absent)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MAX_DOCS_BYTES = 15 * 1024 * 1024


def tracked_files(root: Path, folder: str) -> list[Path]:
    """The files under `root/folder` that git tracks, else every file there."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", folder], cwd=root, capture_output=True,
                             check=True, text=True).stdout
        files = [root / name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        files = []
    return [f for f in files if f.is_file()] or [p for p in (root / folder).rglob("*") if p.is_file()]


def notebook_files(files: list[Path]) -> list[Path]:
    """Files that belong to a lab notebook, not to docs: patches, logs, per-turn raw results."""
    return [f for f in files if f.suffix in {".patch", ".diff", ".log"} or f.name.startswith("vllm-bench-")]


def site_pages(docs: Path) -> list[Path]:
    """Every page mkdocs.yml's nav lists."""
    def walk(entries: list) -> list[str]:
        names = []
        for entry in entries:
            for value in (entry.values() if isinstance(entry, dict) else [entry]):
                names += walk(value) if isinstance(value, list) else [value]
        return names
    nav = yaml.safe_load((docs.parent / "mkdocs.yml").read_text())["nav"]
    return [docs / name for name in walk(nav)]


def uncited_runs(results: Path, pages: list[Path]) -> list[str]:
    """Run folders directly under `results` whose path no page mentions."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    return sorted(p.name for p in results.iterdir() if p.is_dir() and f"results/{p.name}/" not in text)


def test_docs_is_small() -> None:
    size = sum(f.stat().st_size for f in tracked_files(REPO, "docs"))
    assert size < MAX_DOCS_BYTES, f"docs/ holds {size / 2**20:.1f} MB (limit 15 MB)"


def test_docs_hold_no_notebook_files() -> None:
    assert notebook_files(tracked_files(REPO, "docs")) == []


def test_every_run_folder_is_cited_by_a_page() -> None:
    assert uncited_runs(REPO / "docs" / "results", site_pages(REPO / "docs")) == []


def test_the_checks_find_notebook_files_and_uncited_runs(tmp_path: Path) -> None:
    files = [tmp_path / n for n in ("a.patch", "server-vllm.log", "vllm-bench-r1-c1-t1.json", "compare.md")]
    assert notebook_files(files) == files[:3]
    (tmp_path / "results" / "cited").mkdir(parents=True)
    (tmp_path / "results" / "forgotten").mkdir()
    page = tmp_path / "page.md"
    page.write_text("[run](results/cited/compare.md)")
    assert uncited_runs(tmp_path / "results", [page]) == ["forgotten"]
