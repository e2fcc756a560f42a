"""`Source`: a vLLM source tree read with `ast`, nothing of it imported.

Modules are parsed on demand (each once); a name is resolved through imports, aliases, star
imports and lazy `__getattr__` tables to the class, function, module or value it is; a class's
vLLM bases are linearised (C3) and its members read (defs, nested classes, class-level
assignments and annotations, attributes its methods store on `self`); a class's constructor
parameters come from an `__init__` or dataclass-like fields. `installed_source()` finds the
installed vLLM without importing it.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from entmtp_vllm.vllm_plugin.compat.entries import CompatError
from entmtp_vllm.vllm_plugin.compat.syntax import (
    Param,
    decorators,
    describe,
    function_defs,
    is_static,
    params_of,
    stored_attributes,
    target_names,
    top_level,
    unparse,
)


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    bindings: dict[str, list[tuple[str, ast.AST, object]]] = field(default_factory=dict)
    stars: list[ast.ImportFrom] = field(default_factory=list)
    lazy: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class ClassRef:
    module: str
    name: str
    node: ast.ClassDef = field(compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class Ref:
    """What a name resolves to: kind class / function / module / value / external / lazy."""

    kind: str
    module: str
    node: object = field(default=None, compare=False, hash=False, repr=False)
    dotted: str = ""


_PARSED: dict[tuple[str, int, int], ast.Module | None] = {}
"""Parsed files by (real path, mtime, size): a file seen through several trees (a doctored copy made
of symlinks) is parsed once per process. The trees are only read."""


def _parse(path: Path) -> ast.Module | None:
    real = path.resolve()
    stat = real.stat()
    key = (str(real), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        try:
            _PARSED[key] = ast.parse(real.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            _PARSED[key] = None
    return _PARSED[key]


class Source:
    """A vLLM source tree, its modules parsed on demand (each once)."""

    def __init__(self, source_root: str | Path) -> None:
        root = Path(source_root).expanduser()
        if (root / "vllm" / "__init__.py").is_file():
            self.root = root
        elif root.name == "vllm" and (root / "__init__.py").is_file():
            self.root = root.parent
        else:
            raise CompatError(
                f"{root}: no vLLM source here (expected vllm/__init__.py in it, or it to be the vllm folder)")
        self._modules: dict[str, Module | None] = {}
        self._mro: dict[ClassRef, list[ClassRef]] = {}
        self._members: dict[ClassRef, dict[str, object]] = {}

    # ------------------------------------------------------------------ modules

    @property
    def version(self) -> str:
        for name in ("_version.py", "version.py"):
            path = self.root / "vllm" / name
            if not path.is_file():
                continue
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            for stmt in tree.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Constant):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    names = {n for t in targets for n in target_names(t)}
                    if names & {"__version__", "version"} and isinstance(stmt.value.value, str):
                        return stmt.value.value
        return "unknown"

    def module(self, name: str) -> Module | None:
        if name in self._modules:
            return self._modules[name]
        found = None
        if name.split(".")[0] == "vllm":
            base = self.root.joinpath(*name.split("."))
            for path, package in ((base.with_suffix(".py"), False), (base / "__init__.py", True)):
                if path.is_file():
                    tree = _parse(path)
                    if tree is None:
                        break
                    found = Module(name, path, tree, package)
                    self._index(found)
                    break
        self._modules[name] = found
        return found

    def _index(self, mod: Module) -> None:
        for stmt in top_level(mod.tree.body):
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                mod.bindings.setdefault(stmt.name, []).append(("def", stmt, None))
                if stmt.name == "__getattr__" and not isinstance(stmt, ast.ClassDef):
                    mod.lazy |= {c.value for c in ast.walk(stmt)
                                 if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    mod.bindings.setdefault(bound, []).append(("import", stmt, alias))
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if alias.name == "*":
                        mod.stars.append(stmt)
                    else:
                        mod.bindings.setdefault(alias.asname or alias.name, []).append(("from", stmt, alias))
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    for name in target_names(target):
                        mod.bindings.setdefault(name, []).append(("assign", stmt, None))
        # names a lazy module serves through tables of strings (`__all__`, MODULE_ATTRS, ...)
        if "__getattr__" in mod.bindings:
            for stmt in top_level(mod.tree.body):
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                    mod.lazy |= {c.value for c in ast.walk(stmt.value)
                                 if isinstance(c, ast.Constant) and isinstance(c.value, str)}

    def _absolute(self, mod: Module, target: str | None, level: int) -> str:
        if not level:
            return target or ""
        parts = mod.name.split(".")
        if not mod.is_package:
            parts = parts[:-1]
        if level > 1:
            parts = parts[: len(parts) - (level - 1)]
        return ".".join(parts + ([target] if target else []))

    # ------------------------------------------------------------------ names

    def resolve(self, module: str | Module, name: str, _seen: frozenset = frozenset()) -> Ref | None:
        """What `name` is in `module` (following imports, aliases and star imports)."""
        mod = module if isinstance(module, Module) else self.module(module)
        if mod is None or (mod.name, name) in _seen:
            return None
        seen = _seen | {(mod.name, name)}
        bindings = mod.bindings.get(name, [])
        order = {"def": 0, "from": 1, "import": 1, "assign": 2}
        for how, stmt, alias in sorted(bindings, key=lambda b: order[b[0]]):
            if how == "def":
                kind = "class" if isinstance(stmt, ast.ClassDef) else "function"
                return Ref(kind, mod.name, stmt)
            if how == "from":
                source = self._absolute(mod, stmt.module, stmt.level)
                if source.split(".")[0] != "vllm":
                    return Ref("external", mod.name, dotted=f"{source}.{alias.name}")
                inner = self.resolve(source, alias.name, seen)
                if inner is not None:
                    return inner
                if self.module(f"{source}.{alias.name}") is not None:
                    return Ref("module", f"{source}.{alias.name}")
                continue
            if how == "import":
                dotted = alias.name if alias.asname else alias.name.split(".")[0]
                if dotted.split(".")[0] != "vllm":
                    return Ref("external", mod.name, dotted=dotted)
                if self.module(dotted) is not None:
                    return Ref("module", dotted)
                continue
            value = stmt.value
            if value is not None:
                found = self.resolve_expr(mod, value, seen)
                if found is not None:
                    return found
            return Ref("value", mod.name, stmt)
        for star in mod.stars:
            source = self._absolute(mod, star.module, star.level)
            found = self.resolve(source, name, seen)
            if found is not None:
                return found
        if name in mod.lazy:
            return Ref("lazy", mod.name)
        return None

    def resolve_expr(self, mod: Module, expr: ast.AST, _seen: frozenset = frozenset()) -> Ref | None:
        if isinstance(expr, ast.Name):
            return self.resolve(mod, expr.id, _seen)
        if isinstance(expr, ast.Attribute):
            base = self.resolve_expr(mod, expr.value, _seen)
            if base is None:
                return None
            if base.kind == "module":
                found = self.resolve(base.module, expr.attr, _seen)
                if found is None and self.module(f"{base.module}.{expr.attr}") is not None:
                    found = Ref("module", f"{base.module}.{expr.attr}")
                return found
            if base.kind == "external":
                return Ref("external", base.module, dotted=f"{base.dotted}.{expr.attr}")
            if base.kind == "class":
                for stmt in top_level(base.node.body):
                    if isinstance(stmt, ast.ClassDef) and stmt.name == expr.attr:
                        return Ref("class", base.module, stmt)
            return None
        if isinstance(expr, ast.Subscript):
            return self.resolve_expr(mod, expr.value, _seen)
        if isinstance(expr, ast.IfExp):
            return self.resolve_expr(mod, expr.body, _seen)
        return None

    # ------------------------------------------------------------------ classes

    def class_ref(self, ref: Ref) -> ClassRef:
        return ClassRef(ref.module, ref.node.name, ref.node)

    def bases(self, cls: ClassRef) -> tuple[list[ClassRef], list[str]]:
        """(vLLM base classes, other bases as dotted names)."""
        mod = self.module(cls.module)
        ours, others = [], []
        for base in cls.node.bases:
            ref = self.resolve_expr(mod, base) if mod is not None else None
            if ref is not None and ref.kind == "class":
                ours.append(self.class_ref(ref))
            elif ref is not None and ref.kind == "external":
                others.append(ref.dotted)
            else:
                others.append(unparse(base))
        return ours, others

    def mro(self, cls: ClassRef) -> list[ClassRef]:
        """C3 linearisation over the vLLM classes (depth-first if C3 fails)."""
        if cls in self._mro:
            return self._mro[cls]
        self._mro[cls] = [cls]  # cycle guard
        bases = self.bases(cls)[0]
        sequences = [list(self.mro(b)) for b in bases] + [list(bases)]
        result = [cls]
        while True:
            sequences = [s for s in sequences if s]
            if not sequences:
                break
            for seq in sequences:
                head = seq[0]
                if not any(head in s[1:] for s in sequences):
                    break
            else:  # inconsistent: fall back to depth-first, first occurrence
                for seq in sequences:
                    for c in seq:
                        if c not in result:
                            result.append(c)
                break
            result.append(head)
            for s in sequences:
                if s and s[0] == head:
                    s.pop(0)
        self._mro[cls] = result
        return result

    def external_bases(self, cls: ClassRef) -> list[str]:
        return [name for c in self.mro(cls) for name in self.bases(c)[1]]

    def members(self, cls: ClassRef) -> dict[str, object]:
        """name -> how the class body defines it: its `def`, nested class or assignment statement,
        or "self" (stored on self in a method)."""
        if cls in self._members:
            return self._members[cls]
        found: dict[str, object] = {}
        for stmt in top_level(cls.node.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decos = decorators(stmt)
                if any(d.split(".")[-1] == "overload" or d.endswith((".setter", ".deleter")) for d in decos):
                    found.setdefault(stmt.name, stmt)
                    continue
                if not isinstance(found.get(stmt.name), (ast.FunctionDef, ast.AsyncFunctionDef)) or \
                        any(d.split(".")[-1] == "overload" for d in decorators(found[stmt.name])):
                    found[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                found.setdefault(stmt.name, stmt)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    for name in target_names(target):
                        found.setdefault(name, stmt)
        for method in function_defs(cls.node.body):
            if not method.args.args and not method.args.posonlyargs:
                continue
            self_name = (method.args.posonlyargs or method.args.args)[0].arg
            for name in stored_attributes(method, self_name):
                found.setdefault(name, "self")
        self._members[cls] = found
        return found

    def find_member(self, cls: ClassRef, name: str) -> tuple[ClassRef, object] | None:
        for klass in self.mro(cls):
            how = self.members(klass).get(name)
            if how is not None:
                return klass, how
        return None

    def is_dataclass_like(self, cls: ClassRef) -> bool:
        decos = [d.split(".")[-1] for d in decorators(cls.node)]
        if "dataclass" in decos or "config" in decos:
            return True
        others = [b.split(".")[-1] for b in self.bases(cls)[1]]
        return any(b in ("Struct", "NamedTuple", "BaseModel") for b in others)

    def constructor(self, cls: ClassRef) -> list[Param] | None:
        """The parameters of `cls(...)` (self dropped): an `__init__`, or dataclass-like fields."""
        for klass in self.mro(cls):
            init = self.members(klass).get("__init__")
            if isinstance(init, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return params_of(init)[1:]
            if self.is_dataclass_like(klass):
                return self._fields(cls)
        return None

    def _fields(self, cls: ClassRef) -> list[Param]:
        fields: dict[str, Param] = {}
        for klass in reversed(self.mro(cls)):
            if not self.is_dataclass_like(klass):
                continue
            kw_only = any(
                isinstance(d, ast.Call)
                and any(k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value for k in d.keywords)
                for d in klass.node.decorator_list
            )
            for stmt in klass.node.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                annotation = unparse(stmt.annotation)
                if annotation.split(".")[-1] == "KW_ONLY":
                    kw_only = True
                    continue
                if "ClassVar" in annotation.split("[")[0]:
                    continue
                value = stmt.value
                if isinstance(value, ast.Call) and unparse(value.func).split(".")[-1] in ("field", "Field"):
                    if any(k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                           for k in value.keywords):
                        continue
                    has_default = bool(value.args) or any(
                        k.arg in ("default", "default_factory") for k in value.keywords)
                else:
                    has_default = value is not None
                fields[stmt.target.id] = Param(stmt.target.id, "kwonly" if kw_only else "normal", has_default)
        return list(fields.values())

    def is_settable(self, cls: ClassRef) -> str | None:
        """Why instances of `cls` cannot take new attributes (None: they can)."""
        for klass in self.mro(cls):
            if "__slots__" in self.members(klass):
                return f"{klass.name} defines __slots__"
            for deco in klass.node.decorator_list:
                if isinstance(deco, ast.Call) and unparse(deco.func).split(".")[-1] == "dataclass":
                    for keyword in deco.keywords:
                        if keyword.arg in ("frozen", "slots") and isinstance(keyword.value, ast.Constant) \
                                and keyword.value.value:
                            return f"{klass.name} is a dataclass({keyword.arg}=True)"
        for base in self.external_bases(cls):
            if base.split(".")[-1] in ("Struct", "NamedTuple", "tuple"):
                return f"{cls.name} is a {base}"
        return None

    # ------------------------------------------------------------------ defs

    def function(self, module: str, target: str) -> tuple[ast.FunctionDef | None, bool, str]:
        """(the def of `target`, whether calls bind a first argument, where it was found or why not)."""
        head, _, member = target.partition(".")
        if self.module(module) is None:
            return None, False, f"no module {module}"
        ref = self.resolve(module, head)
        if ref is None:
            return None, False, f"no {head} in {module}"
        if not member:
            if ref.kind == "function":
                return ref.node, False, f"{ref.module}:{head}"
            return None, False, f"{head} is a {ref.kind}, not a function"
        if ref.kind != "class":
            return None, False, f"{head} is a {ref.kind}, not a class"
        found = self.find_member(self.class_ref(ref), member)
        if found is None:
            return None, False, f"no {member} in {head} or its vLLM bases"
        owner, how = found
        if not isinstance(how, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None, False, f"{owner.name}.{member} is not a method ({describe(how)})"
        return how, not is_static(how), f"{owner.module}:{owner.name}.{member}"


def installed_source() -> Path:
    """The folder holding the installed `vllm` package, found without importing it."""
    spec = importlib.util.find_spec("vllm")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise CompatError("no installed vLLM found; pass --vllm-source DIR")
    return Path(locations[0]).parent
