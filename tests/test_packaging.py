"""Packaging: every package folder is listed in pyproject.toml (find cannot remap `kernels/`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_package_is_listed() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    renamed = {folder: name for name, folder in config["package-dir"].items()}
    found = set()
    for init in REPO.glob("*/**/__init__.py"):
        parts = init.parent.relative_to(REPO).parts
        if parts[0] in ("tests", ".venv", "build"):
            continue
        found.add(".".join((renamed.get(parts[0], parts[0]),) + parts[1:]))
    assert found == listed


def test_kernels_are_imported_as_entmtp_kernels() -> None:
    import entmtp_kernels

    assert Path(entmtp_kernels.__file__).parent == REPO / "kernels"



def test_no_library_module_imports_the_cli():
    """The CLI only parses and delegates: nothing outside `entmtp_vllm/cli/` imports it (the
    serve command builder and the command runner live outside it for that)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    cli = root / "entmtp_vllm" / "cli"
    pattern = re.compile(r"^\s*(from|import)\s+entmtp_vllm\.cli\b", re.MULTILINE)
    offenders = []
    for folder in ("entmtp_vllm", "tree_search", "kernels"):
        for path in (root / folder).rglob("*.py"):
            if cli in path.parents:
                continue
            if pattern.search(path.read_text(encoding="utf-8")):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []
