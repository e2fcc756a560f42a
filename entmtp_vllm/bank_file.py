"""Bank files: named trees, their measurements and a policy, as versioned JSON.

A bank file looks like

    {"format": "entmtp-bank", "version": 1, "model": "...", "task": "...",
     "created": "2025-01-01T00:00:00+00:00",
     "trees": [{"name": "small", "choices": [[0], [0, 0]], "measured": null}],
     "policy": null, "metadata": {}}

`load_tree_source` also reads generated shapes (`chain:4`) and plain choices
files (a list of paths, or an object mapping names to lists of paths, possibly
under a `trees` key), so that every command takes the same tree argument.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.policies import Policy, make_policy, parse_policy_arg, validate_policy_config
from entmtp_vllm.topology import TopologyBank
from entmtp_vllm.tree import SPEC_FORMS, Tree

BANK_FORMAT = "entmtp-bank"
BANK_VERSION = 1

# Prefixes of the generated shapes `Tree.from_spec` accepts.
_SPEC_PREFIXES = ("chain:", "full:", "lookup:")


class _Model(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", strict=True)


class TreeMeasurement(_Model):
    """How a tree performed when the bank was built."""

    accept_length: float = Field(ge=1.0, allow_inf_nan=False)
    """Mean tokens emitted per decode step (accepted drafts plus the bonus token)."""

    tokens_per_second: float | None = Field(None, gt=0.0, allow_inf_nan=False)
    """Measured decode throughput; None when only acceptance was measured."""

    nodes: int = Field(ge=2)
    """Nodes of the measured tree, the root included (must match `choices`)."""

    steps: int | None = Field(None, ge=1)
    """Number of decode steps the means are taken over, when known."""


class BankTree(_Model):
    """One named tree of a bank."""

    name: str = Field(min_length=1)
    """Name that policies and the command line use to refer to the tree; unique in the bank."""

    choices: list[list[int]]
    """The tree as Medusa-style paths (the root is implicit)."""

    measured: TreeMeasurement | None = None
    """Measurements of this tree, if any."""

    @model_validator(mode="after")
    def _valid_tree(self) -> BankTree:
        try:
            tree = Tree.from_choices(self.choices)
        except EntMTPError as exc:
            raise ValueError(f"tree {self.name!r}: {exc}") from None
        if self.measured is not None and self.measured.nodes != tree.num_nodes:
            raise ValueError(
                f"tree {self.name!r}: measured.nodes is {self.measured.nodes} but the tree has "
                f"{tree.num_nodes} nodes (root included)"
            )
        return self

    def tree(self) -> Tree:
        """The validated `Tree`."""
        return Tree.from_choices(self.choices)


class BankFile(_Model):
    """A versioned set of named trees, with what was measured and the policy that switches them."""

    format: Literal["entmtp-bank"] = BANK_FORMAT
    """Marks the file as an EntMTP bank."""

    version: Literal[1] = BANK_VERSION
    """Version of this file layout."""

    model: str | None = None
    """Target model the trees were chosen for, if any."""

    task: str | None = None
    """Task or data set the trees were chosen on, if any."""

    created: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    """When the bank was written, as an ISO 8601 time."""

    trees: list[BankTree] = Field(min_length=1)
    """The trees, in bank order (the order of `TopologyBank` indices)."""

    policy: dict[str, Any] | None = None
    """How to switch between the trees, if any: a `PolicyConfig` kept as a plain JSON object;
    its tree references must name (or index) trees of this bank."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    """Anything else worth keeping (search settings, hardware, ...)."""

    @field_validator("created")
    @classmethod
    def _iso_time(cls, value: str) -> str:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 time such as 2025-01-31T12:00:00+00:00") from None
        return value

    @field_validator("trees")
    @classmethod
    def _unique_names(cls, trees: list[BankTree]) -> list[BankTree]:
        first: dict[str, int] = {}
        for i, tree in enumerate(trees):
            if tree.name in first:
                raise ValueError(
                    f"tree name {tree.name!r} is used by trees {first[tree.name]} and {i}; names must be unique"
                )
            first[tree.name] = i
        return trees

    @model_validator(mode="after")
    def _valid_policy(self) -> BankFile:
        # Validates the config and resolves its tree references against this bank's names.
        if self.policy is not None:
            try:
                make_policy(self.policy, self.topology_bank())
            except EntMTPError as exc:
                raise ValueError(f"field 'policy': {exc}") from None
        return self

    def topology_bank(self) -> TopologyBank:
        """The bank's trees, in file order, ready for decoding."""
        return TopologyBank([entry.tree() for entry in self.trees], [entry.name for entry in self.trees])


def _short(value: object) -> str:
    """`repr(value)`, cut to a length that fits in a one-line message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(exc: ValidationError) -> str:
    """A pydantic error as one line: the first problem, its field path, and how many others."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] not in ("missing", "value_error"):
        message += f" (got {_short(first['input'])})"
    line = f"field '{where}': {message}" if where else message
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return line


def _read_json(path: Path, what: str) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EntMTPError(f"{what} {path}: no such file") from None
    except UnicodeDecodeError:
        raise EntMTPError(f"{what} {path}: not UTF-8 text; expected a JSON file") from None
    except OSError as exc:
        raise EntMTPError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EntMTPError(f"{what} {path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def _parse_bank(data: object, source: str) -> BankFile:
    """Validate loaded JSON as a bank; `source` names it in error messages."""
    if not isinstance(data, dict):
        raise EntMTPError(f"{source}: expected a JSON object with \"format\": \"{BANK_FORMAT}\"")
    if data.get("format") != BANK_FORMAT:
        found = f"got {_short(data['format'])}" if "format" in data else "missing"
        raise EntMTPError(f"{source}: field 'format': {found}, expected {BANK_FORMAT!r}; not an EntMTP bank file")
    version = data.get("version")
    if type(version) is not int or version != BANK_VERSION:
        found = f"unsupported version {_short(version)}" if "version" in data else "missing"
        raise EntMTPError(f"{source}: field 'version': {found}; this EntMTP reads version {BANK_VERSION}")
    try:
        return BankFile.model_validate(data)
    except ValidationError as exc:
        raise EntMTPError(f"{source}: {_describe(exc)}") from None


def load_bank(path: str | os.PathLike[str]) -> BankFile:
    """Read and validate a bank file."""
    path = Path(path)
    source = f"bank file {path}"
    return _parse_bank(_read_json(path, "bank file"), source)


def _pretty_json(value: object, level: int = 0) -> str:
    """Indented JSON that keeps lists of scalars (such as one path) on one line."""
    inner, outer = "  " * (level + 1), "  " * level
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(key)}: {_pretty_json(item, level + 1)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + outer + "}"
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        items = [inner + _pretty_json(item, level + 1) for item in value]
        return "[\n" + ",\n".join(items) + "\n" + outer + "]"
    return json.dumps(value)


def _file_mode(path: Path) -> int:
    """The permissions `open(path, "w")` would leave: the existing file's, else 0o666 less the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def save_bank(bank: BankFile, path: str | os.PathLike[str]) -> None:
    """Write `bank` as indented JSON; the file is replaced atomically (never left half written)
    and gets the permissions a plain write would give it (not the temporary file's 0600)."""
    path = Path(path)
    text = _pretty_json(bank.model_dump(mode="json")) + "\n"
    try:
        mode = _file_mode(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        raise EntMTPError(f"bank file {path}: cannot write it ({exc.strerror or exc})") from None


def _named_choices(data: object, path: Path) -> dict[str, object]:
    """The trees of a plain choices file, by name, not yet validated."""
    if isinstance(data, list):
        return {path.stem: data}
    if not isinstance(data, dict):
        raise EntMTPError(f"tree file {path}: expected a list of paths or an object mapping names to lists of paths")
    if "trees" not in data:
        return data
    if not isinstance(data["trees"], dict):
        raise EntMTPError(
            f"tree file {path}: field 'trees' must map tree names to lists of paths "
            f"(a bank file needs \"format\": \"{BANK_FORMAT}\")"
        )
    return data["trees"]


def _check_name(available: list[str], name: str | None, source: str) -> None:
    if name is not None and name not in available:
        raise EntMTPError(f"{source}: no tree named {name!r}; available: {', '.join(available)}")


def load_tree_source(spec: str, name: str | None = None) -> list[tuple[str, Tree]]:
    """Trees named by `spec`: a generated shape (`chain:4`, `full:2^3`, `full:3,2,1`), a bank
    file, or a choices JSON file. `name` keeps only the tree with that name."""
    return _tree_source(spec, name)[0]


def _tree_source(spec: str, name: str | None) -> tuple[list[tuple[str, Tree]], BankFile | None]:
    """`load_tree_source`'s trees, and the bank file they came from (None for other sources)."""
    path = Path(spec)
    if not path.exists():
        if not spec.startswith(_SPEC_PREFIXES):
            raise EntMTPError(
                f"tree source {spec!r}: no such file, and not a generated shape; give a bank file, "
                f"a choices JSON file, or one of {SPEC_FORMS}"
            )
        tree = Tree.from_spec(spec)
        _check_name([spec], name, f"tree spec {spec!r}")
        return [(spec, tree)], None
    data = _read_json(path, "tree file")
    if isinstance(data, dict) and data.get("format") == BANK_FORMAT:
        source = f"bank file {path}"
        bank = _parse_bank(data, source)
        _check_name([entry.name for entry in bank.trees], name, source)
        return [(entry.name, entry.tree()) for entry in bank.trees if name in (None, entry.name)], bank
    raw = _named_choices(data, path)
    if not raw:
        raise EntMTPError(f"tree file {path}: no trees in it")
    _check_name(list(raw), name, f"tree file {path}")
    trees: list[tuple[str, Tree]] = []
    for tree_name, choices in raw.items():
        if name not in (None, tree_name):
            continue
        try:
            trees.append((tree_name, Tree.from_choices(choices)))
        except EntMTPError as exc:
            raise EntMTPError(f"tree file {path}: tree {tree_name!r}: {exc}") from None
    return trees, None


def resolve_trees(
    source: str | os.PathLike[str], name: str | None = None, policy: str | dict[str, Any] | None = None
) -> tuple[TopologyBank, Policy]:
    """The trees of `source` (`load_tree_source`: a shape, a bank file or a choices file; `name`
    keeps one) and the policy that switches them: `policy` (a policy string or object), else the
    bank file's own policy (when no `name` narrows it), else static on the first tree. The one
    place both engines resolve their trees."""
    named, bank_file = _tree_source(str(source), name)
    bank = TopologyBank([tree for _, tree in named], [tree_name for tree_name, _ in named])
    stored = bank_file.policy if bank_file is not None and name is None else None
    return bank, resolve_policy(policy, bank, stored)


def resolve_policy(policy: str | dict[str, Any] | None, bank: TopologyBank, stored: dict[str, Any] | None = None) -> Policy:
    """`policy` (a policy string or object) over `bank`, else the policy `stored` with the bank,
    else static on the first tree."""
    raw = policy if policy is not None else stored
    if isinstance(raw, str):
        config = parse_policy_arg(raw)
    else:
        config = validate_policy_config(raw if raw is not None else {"kind": "static", "tree": 0})
    return make_policy(config, bank)

