"""What a piece of Python source says, read with `ast`: a def's parameters, a body's top-level
statements, the attributes a function stores, its `return` statements and calls. Shared by the
reader of vLLM's source (`vllm_source.py`) and the checks (`check.py`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

POSITIONAL = ("posonly", "normal")


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    """posonly, normal, varargs, kwonly, varkw"""
    default: bool


def params_of(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Param]:
    """The parameters of a `def`, in order."""
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    first_default = len(positional) - len(a.defaults)
    out = [
        Param(arg.arg, "posonly" if i < len(a.posonlyargs) else "normal", i >= first_default)
        for i, arg in enumerate(positional)
    ]
    if a.vararg:
        out.append(Param(a.vararg.arg, "varargs", True))
    out += [Param(arg.arg, "kwonly", d is not None) for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append(Param(a.kwarg.arg, "varkw", True))
    return out


def param_names(params: list[Param]) -> list[str]:
    return [p.name for p in params if p.kind not in ("varargs", "varkw")]


def decorators(node: ast.AST) -> list[str]:
    names = []
    for deco in getattr(node, "decorator_list", ()):
        target = deco.func if isinstance(deco, ast.Call) else deco
        names.append(ast.unparse(target))
    return names


def is_static(node: ast.AST) -> bool:
    return any(d.split(".")[-1] == "staticmethod" for d in decorators(node))


def signature_text(params: list[Param]) -> str:
    parts, star = [], False
    for p in params:
        if p.kind == "kwonly" and not star:
            parts.append("*")
            star = True
        prefix = {"varargs": "*", "varkw": "**"}.get(p.kind, "")
        star = star or p.kind == "varargs"
        parts.append(prefix + p.name + ("=" if p.default and p.kind not in ("varargs", "varkw") else ""))
    return "(" + ", ".join(parts) + ")"


def top_level(body: list[ast.stmt]):
    """Module-level statements, inside if / try / with blocks too (not inside defs)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.With, ast.AsyncWith, ast.For)):
            yield from top_level(stmt.body)
            yield from top_level(getattr(stmt, "orelse", []))
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from top_level(stmt.body)
            for handler in stmt.handlers:
                yield from top_level(handler.body)
            yield from top_level(stmt.orelse)
            yield from top_level(stmt.finalbody)


def target_names(target: ast.AST):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_names(element)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)


def store_targets(node: ast.AST):
    """The targets a statement stores into."""
    if isinstance(node, ast.Assign):
        yield from node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        yield node.target
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        yield node.target
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            if item.optional_vars is not None:
                yield item.optional_vars


def flatten(target: ast.AST):
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from flatten(element)
    elif isinstance(target, ast.Starred):
        yield from flatten(target.value)
    else:
        yield target


def function_defs(body: list[ast.stmt]):
    """`def`s directly in a class body (inside if / try blocks too)."""
    for stmt in top_level(body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt


def calls_in(node: ast.AST):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            yield sub


def unparse(expr: ast.AST) -> str:
    try:
        return ast.unparse(expr)
    except Exception:  # pragma: no cover - unparse handles every expression
        return ""


def ends_with(text: str, suffix: str) -> bool:
    return text == suffix or text.endswith("." + suffix)


def describe(how: object) -> str:
    if isinstance(how, ast.ClassDef):
        return "a nested class"
    if isinstance(how, (ast.Assign, ast.AnnAssign)):
        return f"assigned at line {how.lineno}"
    return "an attribute set on self" if how == "self" else str(how)


def return_statements(func: ast.AST):
    """The `return` statements of a def (not those of defs nested in it)."""
    for child in ast.iter_child_nodes(func):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(child, ast.Return):
            yield child
        yield from return_statements(child)


def stored_attributes(func: ast.AST, self_name: str | None):
    """Attributes stored on `self_name` (any name when None) inside `func`."""
    for node in ast.walk(func):
        for target in store_targets(node):
            for leaf in flatten(target):
                if isinstance(leaf, ast.Attribute) and (
                    self_name is None or (isinstance(leaf.value, ast.Name) and leaf.value.id == self_name)
                ):
                    yield leaf.attr
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            first = node.args[0]
            if self_name is None or (isinstance(first, ast.Name) and first.id == self_name):
                yield node.args[1].value
