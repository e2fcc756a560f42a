"""`vllm_plugin/compat/`: the ast check of the vLLM pieces the plugin relies on.

- the installed vLLM passes it, and the check itself imports neither vLLM nor torch;
- a doctored copy of the installed source fails it where it was doctored, and only there (the
  copy is a tree of symlinks: only the folders on the way to the doctored file are real);
- the manifest cannot drift from the code: every method our vLLM subclasses define that a vLLM
  base also defines is listed as an override, and every `from vllm... import` of ours as an import.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from entmtp_vllm.vllm_plugin import compat

if importlib.util.find_spec("vllm") is None:  # found, not imported: the check only reads its source
    pytest.skip("vLLM is not installed", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed() -> Path:
    return compat.installed_source() / "vllm"


def mirror(source: Path, root: Path, doctored: dict[str, str]) -> Path:
    """`root/vllm` mirroring the `source` vllm folder with symlinks, except `doctored`
    (relative path: new text); only the folders on the way to a doctored file are real."""
    real = {Path(*Path(rel).parts[:i]) for rel in doctored for i in range(len(Path(rel).parts))}

    def build(rel: Path) -> None:
        target = root / "vllm" / rel
        target.mkdir(parents=True, exist_ok=True)
        for child in sorted((source / rel).iterdir()):
            path = rel / child.name
            if path.as_posix() in doctored:
                (target / child.name).write_text(doctored[path.as_posix()], encoding="utf-8")
            elif path in real:
                build(path)
            else:
                (target / child.name).symlink_to(child)

    build(Path())
    return root


def _class_body(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)


def rename_parameter(text: str, cls: str, method: str, old: str, new: str) -> str:
    """`text` with parameter `old` of `cls.method` renamed `new` (its signature lines only)."""
    node = next(f for f in _class_body(ast.parse(text), cls).body
                if isinstance(f, ast.FunctionDef) and f.name == method)
    lines = text.splitlines(keepends=True)
    first, end = node.lineno - 1, node.body[0].lineno - 1
    signature = "".join(lines[first:end])
    assert re.search(rf"\b{old}\b", signature), signature
    lines[first:end] = [re.sub(rf"\b{old}\b", new, signature)]
    return "".join(lines)


def rename_field(text: str, cls: str, old: str, new: str) -> str:
    """`text` with the annotated field `old` of class `cls` renamed `new`."""
    node = next(s for s in _class_body(ast.parse(text), cls).body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id == old)
    lines = text.splitlines(keepends=True)
    lines[node.lineno - 1] = lines[node.lineno - 1].replace(old, new, 1)
    return "".join(lines)


# --------------------------------------------------------------------------- the installed vLLM


def test_the_installed_vllm_passes(installed: Path):
    findings = compat.check(installed.parent)
    assert findings == [], "\n".join(map(str, findings))


def test_the_check_imports_neither_vllm_nor_torch():
    code = textwrap.dedent("""
        import json, sys
        from entmtp_vllm.vllm_plugin import compat
        findings = compat.check(compat.installed_source())
        print(json.dumps([len(findings), sorted({m.split(".")[0] for m in sys.modules} & {"vllm", "torch"})]))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, []]


def test_the_root_or_the_vllm_folder_itself(installed: Path):
    assert compat.Source(installed).root == compat.Source(installed.parent).root == installed.parent


def test_manifest_covers_every_kind_and_says_who_uses_it():
    sizes = compat.manifest_sizes()
    assert set(sizes) == {"import", "override", "call", "attribute", "kwarg", "callsite", "constant", "value",
                          "returns", "expression", "settable"}
    assert all(entry.used_by.strip() for entry in compat.MANIFEST)
    labels = [entry.label for entry in compat.MANIFEST]
    assert len(labels) == len(set(labels)), sorted(label for label in labels if labels.count(label) > 1)


# --------------------------------------------------------------------------- doctored copies


def test_a_renamed_parameter_of_an_overridden_method_is_reported(installed: Path, tmp_path: Path):
    rel = "v1/worker/gpu_model_runner.py"
    text = rename_parameter((installed / rel).read_text(encoding="utf-8"), "GPUModelRunner", "_sample",
                            "spec_decode_metadata", "spec_metadata")
    root = mirror(installed, tmp_path, {rel: text})
    assert (root / "vllm" / "v1" / "worker" / "gpu_model_runner.py").is_file()
    assert (root / "vllm" / "v1" / "worker" / "cpu_model_runner.py").is_symlink()
    assert (root / "vllm" / "config").is_symlink()
    findings = compat.check(root)
    expected = {e.label for e in compat.MANIFEST if isinstance(e, compat.Override) and e.target.endswith("._sample")}
    assert expected == {f"override {compat.GMR}:GPUModelRunner._sample by TreeRunnerMixin._sample",
                        f"override {compat.CMR}:CPUModelRunner._sample by TreeRunnerMixin._sample"}
    assert {f.entry for f in findings} == expected, "\n".join(map(str, findings))
    assert all("spec_metadata" in f.found and f.kind == "override" for f in findings)


def test_a_renamed_attribute_the_plugin_reads_is_reported(installed: Path, tmp_path: Path):
    rel = "v1/core/sched/output.py"
    text = rename_field((installed / rel).read_text(encoding="utf-8"), "SchedulerOutput",
                        "scheduled_spec_decode_tokens", "scheduled_draft_tokens")
    findings = compat.check(mirror(installed, tmp_path, {rel: text}))
    assert [f.entry for f in findings] == [f"attribute {compat.SCHED}:SchedulerOutput.scheduled_spec_decode_tokens"]
    assert findings[0].used_by.startswith("tree_runner")


def test_command_line(installed: Path, tmp_path: Path, capsys):
    assert compat.main(["--vllm-source", str(installed.parent)]) == 0
    assert re.search(r"^\d+ entries, 0 differ \(vLLM ", capsys.readouterr().out, re.M)

    rel = "v1/executor/multiproc_executor.py"
    text = rename_parameter((installed / rel).read_text(encoding="utf-8"), "MultiprocExecutor", "sample_tokens",
                            "non_block", "nonblocking")
    doctored = mirror(installed, tmp_path / "doctored", {rel: text})
    assert compat.main(["--vllm-source", str(doctored / "vllm"), "--json"]) == 1  # the vllm folder itself
    report = json.loads(capsys.readouterr().out)
    assert report["differ"] == 1 and report["entries"] == len(compat.MANIFEST)
    assert [f["entry"] for f in report["findings"]] == [
        f"override {compat.MULTIPROC}:MultiprocExecutor.sample_tokens by install.sample_tokens"]
    assert compat.main(["--vllm-source", str(doctored)]) == 1
    assert capsys.readouterr().out.startswith("DIFF override ")

    empty = tmp_path / "empty"
    empty.mkdir()
    assert compat.main(["--vllm-source", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("compat: error:") and "\n" not in err


# --------------------------------------------------------------------------- no drift


_OVERRIDES = textwrap.dedent("""
    import importlib, inspect, json, pkgutil
    import entmtp_vllm.vllm_plugin as plugin

    skipped, rows, shadows = [], [], []
    for info in pkgutil.walk_packages(plugin.__path__, plugin.__name__ + "."):
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:  # an optional third-party package (ray, ...)
            if (exc.name or "").split(".")[0] in ("entmtp_vllm", "vllm"):
                raise
            skipped.append(info.name)
            continue
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            stock = [k for k in cls.__mro__ if k.__module__.split(".")[0] == "vllm"]
            if not stock:
                continue
            for ours in cls.__mro__:
                if ours.__module__.split(".")[0] != "entmtp_vllm":
                    continue
                for name, value in vars(ours).items():
                    if not any(name in vars(k) for k in stock) or name in ("__module__", "__doc__", "__dict__",
                                                                          "__weakref__", "__qualname__"):
                        continue
                    where = [cls.__qualname__, ours.__qualname__ + "." + name, stock[0].__module__,
                             stock[0].__qualname__ + "." + name]
                    if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                        rows.append(where)
                    elif not (name.startswith("__") and name.endswith("__")) and name != "_abc_impl":  # Python's own
                        shadows.append(where)
    print(json.dumps({"rows": rows, "shadows": shadows, "skipped": skipped}))
""")


@pytest.fixture(scope="module")
def our_overrides() -> dict:
    """Run in a child process: importing vLLM's CPU worker changes torch's CUDA functions for the
    whole process, which a GPU test session must not inherit."""
    out = subprocess.run([sys.executable, "-c", _OVERRIDES], cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")})
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_override_of_a_vllm_method_is_in_the_manifest(our_overrides: dict):
    rows = our_overrides["rows"]
    classes = {row[0] for row in rows}
    # the platform runners, workers and attention backends were found wherever they live now
    assert {"EntMTPCPUModelRunner", "EntMTPGPUModelRunner", "EntMTPCPUWorker", "EntMTPGPUWorker",
            "TreeCPUAttentionImpl", "TreeFlashAttentionImpl", "TreeTritonAttentionImpl"} <= classes, classes
    listed = {(e.ours, e.module, e.target) for e in compat.MANIFEST if isinstance(e, compat.Override)}
    missing = [f"{cls}: {ours} overrides {module}:{target}" for cls, ours, module, target in rows
               if (ours, module, target) not in listed]
    assert not missing, "add these to compat.MANIFEST:\n" + "\n".join(sorted(set(missing)))


def test_no_class_attribute_of_ours_shadows_one_of_vllm(our_overrides: dict):
    assert our_overrides["shadows"] == []


def _our_vllm_imports() -> set[tuple[str, str | None, str]]:
    """(module, name or None, file) of every `from vllm... import` / `import vllm...` of ours."""
    found = set()
    root = compat.package_root()
    checker = Path(compat.__file__).parent  # the check itself: vLLM's module names only as strings
    for path in sorted(root.rglob("*.py")):
        if checker in path.parents or "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = str(path.relative_to(root.parent))
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "vllm":
                found |= {(node.module, alias.name, where) for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {(alias.name, None, where) for alias in node.names
                          if alias.name.split(".")[0] == "vllm" and alias.name != "vllm"}
    return found


def test_every_vllm_import_of_ours_is_in_the_manifest():
    ours = _our_vllm_imports()
    assert any(module == compat.GMR for module, _, _ in ours)
    listed = {(e.module, e.name) for e in compat.MANIFEST if isinstance(e, compat.Import)}
    missing = sorted(f"{where}: {module}" + (f".{name}" if name else "")
                     for module, name, where in ours if (module, name) not in listed)
    assert not missing, "add these to compat.MANIFEST:\n" + "\n".join(missing)
