"""`entmtp search frontier|debias`: offline tree search (the `tree_search` package)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from tree_search.cli import register as register_search

    register_search(subparsers)
