"""Packaging and the import graph: every package folder is listed in pyproject.toml (find cannot
remap `kernels/`), nothing outside the CLI imports it, and no first-party import circle exists."""

from __future__ import annotations

import ast
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



PACKAGES = {"entmtp_vllm": "entmtp_vllm", "tree_search": "tree_search", "entmtp_kernels": "kernels"}


def _modules(root: Path, packages: dict[str, str]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the first-party packages."""
    found = {}
    for name, folder in packages.items():
        for path in (root / folder).rglob("*.py"):
            parts = (name,) + path.relative_to(root / folder).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path, packages: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the first-party modules it imports, at any depth of the code (function-level
    imports and `if TYPE_CHECKING:` blocks included: a type a module only annotates with still ties
    it to the module that defines it), plus every dotted first-party name given as a string in a
    module that calls `importlib.import_module` (the lazy re-exports)."""
    modules = _modules(root, packages)

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        lazy = "import_module" in path.read_text(encoding="utf-8")
        targets: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:  # a submodule if there is one, else the module itself
                    targets.append(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            elif lazy and isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.split(".")[0] in packages and " " not in node.value:
                    targets.append(node.value)
        graph[module] = {target for t in targets if (target := owner(t)) and target != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circle() -> None:
    """No first-party import circle, lazy imports and `importlib.import_module` names included."""
    assert import_circles(import_graph(REPO, PACKAGES)) == []


def test_import_circle_check_finds_hidden_circles(tmp_path: Path) -> None:
    """Negative control: circles closed by a function-level import, through
    `importlib.import_module` and by an import under `if TYPE_CHECKING:` are all found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text("import importlib\nNAME = 'pkg.d'\ndef g():\n    return importlib.import_module(NAME)\n")
    (pkg / "d.py").write_text("from pkg.c import g\n")
    (pkg / "e.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.f import y\n")
    (pkg / "f.py").write_text("from pkg.e import z\n")
    assert sorted(import_circles(import_graph(tmp_path, {"pkg": "pkg"}))) == [
        ["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"], ["pkg.e", "pkg.f"]]


MAX_LINES = 500
LONG_FILE_REASON = "# over 500 lines:"


def test_no_long_module_without_a_reason() -> None:
    """No module of `entmtp_vllm/`, `tree_search/` or `kernels/` is over 500 lines unless one of
    its first five lines says why (`# over 500 lines: <reason>`)."""
    offenders = []
    for folder in PACKAGES.values():
        for path in (REPO / folder).rglob("*.py"):
            lines = path.read_text(encoding="utf-8").splitlines()
            if len(lines) > MAX_LINES and not any(line.startswith(LONG_FILE_REASON) for line in lines[:5]):
                offenders.append(f"{path.relative_to(REPO)} ({len(lines)} lines)")
    assert offenders == []


def test_no_library_module_imports_the_cli():
    """The CLI only parses and delegates: no module outside `entmtp_vllm/cli/` imports it, at
    any depth of the code (the serve command builder and the command runner live outside it)."""
    graph = import_graph(REPO, PACKAGES)
    offenders = sorted(
        f"{module} -> {target}" for module, targets in graph.items() if not module.startswith("entmtp_vllm.cli")
        for target in targets if target == "entmtp_vllm.cli" or target.startswith("entmtp_vllm.cli.")
    )
    assert offenders == []
    assert any(t.startswith("entmtp_vllm.cli.") for t in graph["entmtp_vllm.cli.main"])  # the graph sees the CLI's own imports

