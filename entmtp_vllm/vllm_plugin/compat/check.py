"""Checking the manifest's entries against a vLLM source tree: one check per entry kind, each
giving the entry's `Finding`s (none: vLLM still has what the plugin relies on).

`check(source_root)` lists every difference; `check_entries` gives each entry with its findings
(the command line prints both the matches and the differences).
"""

from __future__ import annotations

import ast
from pathlib import Path

from entmtp_vllm.vllm_plugin.compat.entries import (
    Attribute,
    Call,
    CallSite,
    Constant,
    Entry,
    Expression,
    Finding,
    Import,
    KwargRead,
    Override,
    Returns,
    Settable,
    Value,
)
from entmtp_vllm.vllm_plugin.compat.manifest import MANIFEST
from entmtp_vllm.vllm_plugin.compat.our_source import OurSource
from entmtp_vllm.vllm_plugin.compat.syntax import (
    POSITIONAL,
    Param,
    calls_in,
    describe,
    ends_with,
    param_names,
    params_of,
    return_statements,
    signature_text,
    stored_attributes,
    unparse,
)
from entmtp_vllm.vllm_plugin.compat.vllm_source import Source


def _finding(entry: Entry, expected: str, found: str) -> Finding:
    return Finding(entry.label, entry.kind, entry.used_by, expected, found)


def _check_import(src: Source, entry: Import, ours: OurSource) -> list[Finding]:
    if src.module(entry.module) is None:
        return [_finding(entry, f"module {entry.module}", "no such module (or it does not parse)")]
    if entry.name is None:
        return []
    ref = src.resolve(entry.module, entry.name)
    if ref is None and src.module(f"{entry.module}.{entry.name}") is None:
        return [_finding(entry, f"{entry.name} defined or imported in {entry.module}", "not there")]
    return []


def _check_override(src: Source, entry: Override, ours: OurSource) -> list[Finding]:
    node, _, where = src.function(entry.module, entry.target)
    if node is None:
        return [_finding(entry, f"{entry.target} in vLLM", where)]
    theirs = params_of(node)
    mine = ours.defs(entry.ours)
    if not mine:
        return [_finding(entry, f"our {entry.ours} under {ours.root}", "not found in our source")]
    findings = []
    for path, our_node in mine:
        our_params = params_of(our_node)
        names, their_names = param_names(our_params), param_names(theirs)
        forwards = any(p.kind in ("varargs", "varkw") for p in our_params)
        ok = names == their_names[: len(names)] if forwards else names == their_names
        if not ok:
            rule = "vLLM's to start with ours (ours forwards the rest)" if forwards else "the same parameters"
            findings.append(_finding(
                entry, f"{rule}: ours {signature_text(our_params)} ({ours.where(path)})",
                f"{where}{signature_text(theirs)}"))
    return findings


def _check_call(src: Source, entry: Call, ours: OurSource) -> list[Finding]:
    head, _, member = entry.target.partition(".")
    if member:
        node, bound, where = src.function(entry.module, entry.target)
        if node is None:
            return [_finding(entry, f"{entry.target} in vLLM", where)]
        params = params_of(node)[1:] if bound else params_of(node)
    else:
        if src.module(entry.module) is None:
            return [_finding(entry, f"{entry.target} in vLLM", f"no module {entry.module}")]
        ref = src.resolve(entry.module, head)
        if ref is None or ref.kind not in ("function", "class"):
            return [_finding(entry, f"{entry.target} in {entry.module}", "not there" if ref is None else ref.kind)]
        if ref.kind == "function":
            params, where = params_of(ref.node), f"{ref.module}:{head}"
        else:
            params = src.constructor(src.class_ref(ref))
            where = f"{ref.module}:{head}(...)"
            if params is None:
                return [_finding(entry, f"a constructor of {head}", "no __init__ or fields found in vLLM")]
    problems = []
    positional = [p for p in params if p.kind in POSITIONAL]
    varargs = any(p.kind == "varargs" for p in params)
    varkw = any(p.kind == "varkw" for p in params)
    count = entry.positional or 0
    if entry.positional is not None and count > len(positional) and not varargs:
        problems.append(f"takes {len(positional)} positional arguments, we pass {count}")
    keywordable = {p.name for p in params if p.kind in ("normal", "kwonly")}
    taken = {p.name for p in positional[:count]}
    for keyword in entry.keywords:
        if keyword not in keywordable and not varkw:
            problems.append(f"no parameter {keyword}")
        elif keyword in taken:
            problems.append(f"{keyword} is now positional argument {[p.name for p in positional].index(keyword) + 1}")
    if entry.positional is not None:
        covered = taken | set(entry.keywords)
        missing = [p.name for p in params if not p.default and p.kind in ("posonly", "normal", "kwonly")
                   and p.name not in covered]
        if missing:
            problems.append(f"requires {', '.join(missing)}, which we do not pass")
    if problems:
        return [_finding(entry, "a call as we make it", f"{where}{signature_text(params)}: {'; '.join(problems)}")]
    return []


def _check_attribute(src: Source, entry: Attribute, ours: OurSource) -> list[Finding]:
    if src.module(entry.module) is None:
        return [_finding(entry, f"{entry.owner}.{entry.name}", f"no module {entry.module}")]
    head, _, member = entry.owner.partition(".")
    ref = src.resolve(entry.module, head)
    if ref is None:
        return [_finding(entry, f"{entry.owner} in {entry.module}", "not there")]
    if ref.kind == "class" and not member:
        cls = src.class_ref(ref)
        if src.find_member(cls, entry.name) is None:
            chain = " < ".join(c.name for c in src.mro(cls))
            return [_finding(entry, f"{entry.name} defined on {entry.owner} or a vLLM base",
                             f"not in {chain}")]
        return []
    if member:
        node, _, where = src.function(entry.module, entry.owner)
    else:
        node, where = (ref.node, f"{ref.module}:{head}") if ref.kind == "function" else (None, ref.kind)
    if node is None:
        return [_finding(entry, f"{entry.owner} in vLLM", where)]
    if entry.name not in set(stored_attributes(node, None)):
        return [_finding(entry, f"{where} to store .{entry.name} on an object", "no such store")]
    return []


def _call_args(call: ast.Call) -> tuple[int | None, set[str], bool]:
    """(positional arguments, or None with a *starred one; keywords; whether it passes **kwargs)."""
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    keywords = {k.arg for k in call.keywords if k.arg is not None}
    return (None if starred else len(call.args)), keywords, any(k.arg is None for k in call.keywords)


def _caller_bodies(src: Source, module: str, caller: str) -> tuple[list[ast.AST], str]:
    head, _, member = caller.partition(".")
    if src.module(module) is None:
        return [], f"no module {module}"
    ref = src.resolve(module, head)
    if ref is None:
        return [], f"no {head} in {module}"
    if member:
        node, _, where = src.function(module, caller)
        return ([node] if node is not None else []), where
    if ref.kind == "class":
        return [ref.node], f"{ref.module}:{head}"
    if ref.kind == "function":
        return [ref.node], f"{ref.module}:{head}"
    return [], f"{head} is a {ref.kind}"


def _positional_misuse(calls: list[tuple[str, ast.Call]], params: list[Param], keyword: str) -> list[str]:
    """Calls that pass `keyword` by position (or may: a starred argument)."""
    names = [p.name for p in params if p.kind in POSITIONAL]
    index = names.index(keyword) if keyword in names else None
    bad = []
    for where, call in calls:
        count, _, _ = _call_args(call)
        if count is None:
            bad.append(f"{where}:{call.lineno} passes *args")
        elif index is not None and count > index:
            bad.append(f"{where}:{call.lineno} passes it by position")
    return bad


def _check_kwarg(src: Source, entry: KwargRead, ours: OurSource) -> list[Finding]:
    node, bound, where = src.function(entry.module, entry.target)
    if node is None:
        return [_finding(entry, f"{entry.target} in vLLM", where)]
    params = params_of(node)[1:] if bound else params_of(node)
    findings = []
    if entry.keyword not in {p.name for p in params if p.kind in ("normal", "kwonly")}:
        findings.append(_finding(entry, f"parameter {entry.keyword} of {where}", signature_text(params)))
    method = entry.target.rpartition(".")[2]
    folder = src.module(entry.module).path.parent
    calls = []
    for path in sorted(folder.glob("*.py")):
        mod = src.module(f"{entry.module.rpartition('.')[0]}.{path.stem}")
        if mod is None:
            continue
        for call in calls_in(mod.tree):
            if isinstance(call.func, ast.Attribute) and call.func.attr == method:
                calls.append((mod.name, call))
    by_keyword = [c for c in calls if entry.keyword in _call_args(c[1])[1]]
    if not by_keyword:
        findings.append(_finding(entry, f"a vLLM call of {method}(..., {entry.keyword}=...) in {folder.name}/",
                                 f"none of {len(calls)} calls passes it by keyword (our kwargs never see it)"))
    bad = _positional_misuse(calls, params, entry.keyword)
    if bad:
        findings.append(_finding(entry, f"{entry.keyword} passed by keyword only", "; ".join(bad)))
    return findings


def _check_callsite(src: Source, entry: CallSite, ours: OurSource) -> list[Finding]:
    bodies, where = _caller_bodies(src, entry.module, entry.caller)
    if not bodies:
        return [_finding(entry, f"{entry.caller} in vLLM", where)]
    calls = [(entry.module, call) for body in bodies for call in calls_in(body)
             if ends_with(unparse(call.func), entry.callee)]
    if not calls:
        return [_finding(entry, f"{where} to call {entry.callee}(...)", "no such call")]
    findings = []
    params = None
    if entry.callee_def:
        module, _, target = entry.callee_def.partition(":")
        node, bound, _ = src.function(module, target)
        params = (params_of(node)[1:] if bound else params_of(node)) if node is not None else None
    for keyword in entry.keywords:
        if not any(keyword in _call_args(c)[1] for _, c in calls):
            findings.append(_finding(entry, f"{keyword}= in a call of {entry.callee} in {where}",
                                     "not passed by keyword"))
        if params is not None:
            bad = _positional_misuse(calls, params, keyword)
            if bad:
                findings.append(_finding(entry, f"{keyword} passed by keyword only", "; ".join(bad)))
    return findings


def _check_constant(src: Source, entry: Constant, ours: OurSource) -> list[Finding]:
    mod = src.module(entry.module)
    if mod is None:
        return [_finding(entry, f"module {entry.module}", "no such module")]
    scope, where = mod.tree, entry.module
    if entry.within:
        head, _, member = entry.within.partition(".")
        if member:
            scope, _, where = src.function(entry.module, entry.within)
        else:  # a def or assignment of this module itself
            own = [stmt for how, stmt, _ in mod.bindings.get(head, []) if how in ("def", "assign")]
            scope = own[0] if own else None
            where = f"{entry.module}:{entry.within}"
        if scope is None:
            return [_finding(entry, f"{entry.within} in {entry.module}", where if member else "not there")]
    if not any(isinstance(n, ast.Constant) and n.value == entry.value for n in ast.walk(scope)):
        return [_finding(entry, f"{entry.value!r} in {where}", "not there")]
    return []


def _entry_class(src: Source, entry: Value | Settable):
    """The vLLM class `entry` names (a `ClassRef`), or None when it is not there."""
    ref = src.resolve(entry.module, entry.cls) if src.module(entry.module) is not None else None
    return src.class_ref(ref) if ref is not None and ref.kind == "class" else None


def _check_value(src: Source, entry: Value, ours: OurSource) -> list[Finding]:
    cls = _entry_class(src, entry)
    if cls is None:
        return [_finding(entry, f"class {entry.cls} in {entry.module}", "not there")]
    for klass in src.mro(cls):
        stmt = src.members(klass).get(entry.name)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            value = stmt.value
            literal = isinstance(value, ast.Constant) and type(value.value) is type(entry.value)
            if literal and value.value == entry.value:
                return []
            written = unparse(value) if value is not None else "(annotation only)"
            return [_finding(entry, f"{entry.cls}.{entry.name} = {entry.value!r}",
                             f"{klass.module}:{klass.name}.{entry.name} = {written}")]
        if stmt is not None:
            return [_finding(entry, f"{entry.cls}.{entry.name} = {entry.value!r}",
                             f"{klass.name}.{entry.name} is {describe(stmt)}")]
    return [_finding(entry, f"{entry.cls}.{entry.name} = {entry.value!r}", "not assigned in the class or a vLLM base")]


def _check_returns(src: Source, entry: Returns, ours: OurSource) -> list[Finding]:
    node, _, where = src.function(entry.module, entry.target)
    if node is None:
        return [_finding(entry, f"{entry.target} in vLLM", where)]
    returns = list(return_statements(node))
    bad = []
    for ret in returns:
        value = ret.value
        if not (isinstance(value, ast.Tuple) and len(value.elts) == entry.arity
                and (entry.first is None or unparse(value.elts[0]) == entry.first)):
            bad.append(f"line {ret.lineno}: return {unparse(value) if value is not None else ''}")
    if not returns:
        bad.append("no return statement")
    return [_finding(entry, f"{where} to return a {entry.arity}-tuple", "; ".join(bad))] if bad else []


def _check_expression(src: Source, entry: Expression, ours: OurSource) -> list[Finding]:
    if "." in entry.within:
        node, _, where = src.function(entry.module, entry.within)
    else:
        ref = src.resolve(entry.module, entry.within) if src.module(entry.module) is not None else None
        node = ref.node if ref is not None and ref.kind == "function" else None
        where = f"{entry.module}:{entry.within}" if node is not None else f"no function {entry.within} there"
    if node is None:
        return [_finding(entry, f"{entry.within} in vLLM", where)]
    wanted = ast.parse(entry.text, mode="eval").body
    text = ast.unparse(wanted)
    if not any(type(n) is type(wanted) and ast.unparse(n) == text for n in ast.walk(node)):
        return [_finding(entry, f"{text} in {where}", "not there (vLLM changed how it does this)")]
    return []


def _check_settable(src: Source, entry: Settable, ours: OurSource) -> list[Finding]:
    cls = _entry_class(src, entry)
    if cls is None:
        return [_finding(entry, f"class {entry.cls} in {entry.module}", "not there")]
    why = src.is_settable(cls)
    return [_finding(entry, "instances that take new attributes", why)] if why else []


_CHECKS = {
    Import: _check_import,
    Override: _check_override,
    Call: _check_call,
    Attribute: _check_attribute,
    KwargRead: _check_kwarg,
    CallSite: _check_callsite,
    Constant: _check_constant,
    Value: _check_value,
    Returns: _check_returns,
    Expression: _check_expression,
    Settable: _check_settable,
}


def check_entries(source_root: str | Path, entries=MANIFEST, ours: OurSource | None = None):
    """[(entry, its findings)] for every entry, against the vLLM source at `source_root`."""
    src = Source(source_root)
    ours = ours or OurSource()
    return src, [(entry, _CHECKS[type(entry)](src, entry, ours)) for entry in entries]


def check(source_root: str | Path, entries=MANIFEST) -> list[Finding]:
    """Every difference between `entries` (default: the plugin's manifest) and the vLLM source at
    `source_root` (the folder holding the `vllm` package folder, or that folder itself)."""
    return [finding for _, findings in check_entries(source_root, entries)[1] for finding in findings]
