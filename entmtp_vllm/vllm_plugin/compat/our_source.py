"""`OurSource`: the plugin's own definitions, read with `ast` by qualified name (`Class.method`,
`outer.inner`) anywhere under `entmtp_vllm/`, so that an `Override` entry compares our parameters
with vLLM's wherever our class lives now (files move; names stay).
"""

from __future__ import annotations

import ast
from pathlib import Path


def package_root() -> Path:
    """The `entmtp_vllm` folder this module belongs to."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if parent.name == "entmtp_vllm":
            return parent
    return here.parents[2]


class OurSource:
    """Our definitions by qualified name (`Class.method`, `outer.inner`), anywhere under
    `entmtp_vllm/`."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or package_root()
        self._index: dict[str, list[tuple[Path, ast.AST]]] | None = None

    def _build(self) -> dict[str, list[tuple[Path, ast.AST]]]:
        index: dict[str, list[tuple[Path, ast.AST]]] = {}

        def visit(body, prefix: str, path: Path) -> None:
            for stmt in body:
                if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    qualname = f"{prefix}{stmt.name}"
                    index.setdefault(qualname, []).append((path, stmt))
                    visit(stmt.body, qualname + ".", path)
                elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                    visit(stmt.body, prefix, path)
                    visit(getattr(stmt, "orelse", []), prefix, path)

        for path in sorted(self.root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            except (SyntaxError, UnicodeDecodeError, OSError):
                continue
            visit(tree.body, "", path)
        return index

    def defs(self, qualname: str) -> list[tuple[Path, ast.AST]]:
        if self._index is None:
            self._index = self._build()
        return [(path, node) for path, node in self._index.get(qualname, [])
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def where(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root.parent))
        except ValueError:
            return str(path)
