"""Running a parsed command with EntMTP's conventions, for every command line of the project.

`entmtp` (`entmtp_vllm.cli.main`) and `python -m tree_search` (`tree_search.cli`) both call
`run`; it lives outside `entmtp_vllm.cli` so that no library module needs to import the CLI
(and `tree_search.cli` does not import `cli.main`, which loads `tree_search.cli` itself).
"""

from __future__ import annotations

import argparse
import sys

from entmtp_vllm.errors import EntMTPError


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None, prog: str = "entmtp", on_interrupt: str = "") -> int:
    """Parse `argv` and run the chosen command: EntMTPError -> one line on stderr, exit 2;
    Ctrl-C -> `<prog>: interrupted<on_interrupt>`, exit 130."""
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except EntMTPError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{on_interrupt}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error for a CLI.
        sys.stderr.close()
        return 0
