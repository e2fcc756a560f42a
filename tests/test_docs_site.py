"""The docs site: `mkdocs build --strict` (mkdocs.yml) passes, and the configuration page holds
the reference generated from the pydantic models' field docstrings."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs / mkdocs-material not installed (pip install -e '.[docs]'; make setup installs them)",
)


@needs_mkdocs
@pytest.mark.timeout(300)
def test_site_builds_strict(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "site" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "config-reference" not in page  # the marker was replaced
    assert "draft_vocab_size" in page and "max_lookup_tokens" in page and "share_of_available" in page
    assert (tmp_path / "site" / "performance" / "index.html").exists()
    built = [p.suffix for p in (tmp_path / "site").rglob("*") if p.is_file()]
    assert not {".log", ".sh", ".csv"} & set(built)  # pages and their figures, not run folders


def test_reference_uses_every_field_docstring() -> None:
    """Every field of the listed models appears with its own docstring, nothing retyped."""
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        import config_reference
    finally:
        sys.path.remove(str(REPO / "docs" / "hooks"))
    text = config_reference.render()
    for _, _, models in config_reference._sections():
        for model in models:
            for name, field in model.model_fields.items():
                assert f"| `{name}` |" in text
                assert " ".join(field.description.split()) in text, f"{model.__name__}.{name}"
