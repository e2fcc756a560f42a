"""User-facing errors.

An `EntMTPError` is a mistake the user can fix (a bad path, an invalid tree, a
wrong-version file). Its message is one line that says what is wrong and how to
fix it; the CLI prints it without a traceback and exits with status 2.
"""


class EntMTPError(Exception):
    """A user error with a one-line, actionable message."""
