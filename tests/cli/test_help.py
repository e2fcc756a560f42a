"""Every `entmtp` command's `--help`: its examples parse as the command they show, every option
says what it does and its default, and the text speaks of the product only."""

from __future__ import annotations

import argparse
import shlex

import pytest

from _history_words import history_words
from entmtp_vllm.cli.examples import EXAMPLES, HEADING, leaf_parsers
from entmtp_vllm.cli.main import build_parser

PARSER = build_parser()
LEAVES = {" ".join(words): parser for words, parser in leaf_parsers(PARSER)}


def test_every_command_has_examples_and_only_commands_have_examples() -> None:
    assert set(EXAMPLES) == set(LEAVES)


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_each_example_parses_as_the_command_it_shows(command: str) -> None:
    for line in EXAMPLES[command]:
        words = shlex.split(line, comments=True)
        assert words[: 1 + len(command.split())] == ["entmtp", *command.split()], line
        args = PARSER.parse_args(words[1:])
        assert callable(args.func), line


@pytest.mark.parametrize("command", sorted(LEAVES))
def test_help_ends_with_examples_and_states_every_default(command: str) -> None:
    parser = LEAVES[command]
    text = parser.format_help()
    assert text.rstrip().splitlines()[-len(EXAMPLES[command]) - 1].strip() == HEADING
    assert "%%" not in text
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        assert action.help and action.help != argparse.SUPPRESS, f"{command} {action.option_strings[0]}: no help"
        if action.default not in (None, False, argparse.SUPPRESS):
            assert "default" in action.help.lower(), f"{command} {action.option_strings[0]}: default not stated"


@pytest.mark.parametrize("command", sorted(LEAVES))
def test_help_speaks_of_the_product_only(command: str) -> None:
    found = history_words(LEAVES[command].format_help())
    assert not found, f"{command} --help: {found}"


def test_the_history_check_sees_history() -> None:
    """Negative control: the words the check is for are found."""
    for text in ("measured in session 49", "see issue #20", "fixed in #53", "at 5ff2396", "on 2026-12-03"):
        assert history_words(text), text
    for text in ("top-1 0.86", "port 8000", "seed 1234567", "float32"):
        assert not history_words(text), text
