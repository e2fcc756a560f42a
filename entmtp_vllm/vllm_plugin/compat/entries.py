"""The manifest's entry kinds, and what the check reports.

One frozen dataclass per kind of reliance on vLLM (what each kind checks is in the package
docstring, `compat/__init__.py`), each with the `label` the command line prints; `Entry` is any of
them. `Finding` is one difference between an entry and a vLLM source tree; `CompatError` is bad
input (no vLLM source at the path given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class Import:
    """`from MODULE import NAME` (NAME None: `import MODULE`)."""

    module: str
    name: str | None
    used_by: str
    kind = "import"

    @property
    def label(self) -> str:
        return f"import {self.module}" + (f".{self.name}" if self.name else "")


@dataclass(frozen=True)
class Override:
    """Our `ours` (a qualified name: `Class.method`, or `outer.inner` for a wrapper defined inside
    a function) replaces vLLM's `target` (`Class.method` or a module-level function) of `module`."""

    module: str
    target: str
    ours: str
    used_by: str
    kind = "override"

    @property
    def label(self) -> str:
        return f"override {self.module}:{self.target} by {self.ours}"


@dataclass(frozen=True)
class Call:
    """We call `target` (`function`, `Class.method`, or `Class`: its constructor) with `positional`
    positional arguments (None: not checked) and these keywords."""

    module: str
    target: str
    used_by: str
    positional: int | None = None
    keywords: tuple[str, ...] = ()
    kind = "call"

    @property
    def label(self) -> str:
        args = [] if self.positional is None else ["_"] * self.positional
        args += [f"{k}=" for k in self.keywords]
        return f"call {self.module}:{self.target}({', '.join(args)})"


@dataclass(frozen=True)
class Attribute:
    """`owner.name` exists (owner: a class, or a function that stores `.name` on an object)."""

    module: str
    owner: str
    name: str
    used_by: str
    kind = "attribute"

    @property
    def label(self) -> str:
        return f"attribute {self.module}:{self.owner}.{self.name}"


@dataclass(frozen=True)
class KwargRead:
    """Our override of `target` reads `keyword` from the `**kwargs` vLLM's callers pass."""

    module: str
    target: str
    keyword: str
    used_by: str
    kind = "kwarg"

    @property
    def label(self) -> str:
        return f"kwarg {self.module}:{self.target}(**{{{self.keyword!r}}})"


@dataclass(frozen=True)
class CallSite:
    """vLLM's `caller` (`Class.method`, `Class`: any of its methods, or a function) calls something
    whose dotted expression ends with `callee`; each of `keywords` is passed by keyword in some such
    call and, where `callee_def` (`module:target`) says which parameters it has, by position in none."""

    module: str
    caller: str
    callee: str
    used_by: str
    keywords: tuple[str, ...] = ()
    callee_def: str | None = None
    kind = "callsite"

    @property
    def label(self) -> str:
        keys = "".join(f", {k}=" for k in self.keywords)
        return f"callsite {self.module}:{self.caller} -> {self.callee}(...{keys})"


@dataclass(frozen=True)
class Constant:
    """The string `value` occurs in `module` (an environment variable, an entry-point group, a
    `Literal` member), or only inside its definition `within` (a function, `Class.method`, a class
    or a module-level assignment)."""

    module: str
    value: str
    used_by: str
    within: str | None = None
    kind = "constant"

    @property
    def label(self) -> str:
        return f"constant {self.module}:{self.within + ':' if self.within else ''}{self.value!r}"


@dataclass(frozen=True)
class Value:
    """`cls.name` is assigned the literal `value` in the class body (itself or the nearest vLLM base
    that assigns it)."""

    module: str
    cls: str
    name: str
    value: object
    used_by: str
    kind = "value"

    @property
    def label(self) -> str:
        return f"value {self.module}:{self.cls}.{self.name} == {self.value!r}"


@dataclass(frozen=True)
class Returns:
    """Every `return` of `target` gives a tuple of `arity` items (the first spelled `first`, if set):
    the plugin unpacks or indexes what it returns."""

    module: str
    target: str
    arity: int
    used_by: str
    first: str | None = None
    kind = "returns"

    @property
    def label(self) -> str:
        return f"returns {self.module}:{self.target} -> {self.arity}-tuple" + (
            f" ({self.first}, ...)" if self.first else "")


@dataclass(frozen=True)
class Expression:
    """vLLM's `within` (`Class.method` or a function) contains the expression `text` (compared as
    `ast.unparse` writes it): a line of vLLM whose behaviour the plugin mirrors (a cache view)."""

    module: str
    within: str
    text: str
    used_by: str
    kind = "expression"

    @property
    def label(self) -> str:
        return f"expression {self.module}:{self.within}: {self.text}"


@dataclass(frozen=True)
class Settable:
    """Instances of `cls` take attributes of ours (setattr on vLLM's objects)."""

    module: str
    cls: str
    used_by: str
    kind = "settable"

    @property
    def label(self) -> str:
        return f"settable {self.module}:{self.cls}"


Entry = Union[Import, Override, Call, Attribute, KwargRead, CallSite, Constant, Value, Returns, Expression, Settable]


@dataclass(frozen=True)
class Finding:
    """One difference between the manifest and a vLLM source tree."""

    entry: str
    kind: str
    used_by: str
    expected: str
    found: str

    def __str__(self) -> str:
        return f"{self.entry}: expected {self.expected}; found {self.found} [used by {self.used_by}]"


class CompatError(Exception):
    """Bad input (no vLLM source at the path given): one line, exit status 2."""
