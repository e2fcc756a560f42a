"""The `entmtp` command: parse, validate, delegate.

Each subcommand lives in its own module under `entmtp_vllm.cli` and exposes
`register(subparsers)`, which adds its parser and sets `func` to a function
`run(args) -> int | None`. User errors (`EntMTPError`) become one line on stderr
and exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from entmtp_vllm.cli.examples import add_examples
from entmtp_vllm.command_runner import run

# Subcommand modules, in the order `entmtp --help` lists them.
COMMAND_MODULES = (
    "entmtp_vllm.cli.model_cmd",
    "entmtp_vllm.cli.data_cmd",
    "entmtp_vllm.cli.tree_cmd",
    "entmtp_vllm.cli.train_cmd",
    "entmtp_vllm.cli.generate_cmd",
    "entmtp_vllm.cli.bench_cmd",
    "entmtp_vllm.cli.serve_cmd",
    "entmtp_vllm.cli.search_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="entmtp",
        description="EntMTP: tree speculative decoding with Hydra heads and a per-step "
        "tree scheduler, for vLLM and a reference transformers engine.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    add_examples(parser)
    return parser


__all__ = ["build_parser", "main", "run"]


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
