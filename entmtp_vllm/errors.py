"""User-facing errors.

An `EntMTPError` is a mistake the user can fix (a bad path, an invalid tree, a
wrong-version file). Its message is one line that says what is wrong and how to
fix it; the CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class EntMTPError(Exception):
    """A user error with a one-line, actionable message."""


def flag_problem(error: Any, flags: Mapping[str, str] | None = None) -> tuple[str, str, str]:
    """(field, command-line flag, message) of a pydantic `ValidationError`'s first problem, for a
    one-line error naming the flag the user typed: `flags[field]` where given, else `--field-name`
    (a problem of the whole model: field `config`)."""
    first = error.errors(include_url=False)[0]
    field = str(first["loc"][0]) if first["loc"] else "config"
    return field, (flags or {}).get(field, "--" + field.replace("_", "-")), first["msg"]
