"""The examples every `entmtp` subcommand's `--help` ends with (`EXAMPLES`, by the command's words
after `entmtp`), attached to the built parser by `add_examples`, and the help formatter that
prints them line by line while descriptions and option help wrap as usual."""

from __future__ import annotations

import argparse

HEADING = "examples:"

EXAMPLES: dict[str, tuple[str, ...]] = {
    "model prepare": (
        "entmtp model prepare            # convert the embedded SmolLM2 once, print its folder",
        "entmtp model prepare --force    # convert again",
    ),
    "model path": ("entmtp model path",),
    "data list": ("entmtp data list",),
    "data show": (
        "entmtp data show mt_bench -n 3",
        "entmtp data show humaneval --split test -n 2 --raw --json",
    ),
    "tree show": (
        "entmtp tree show full:2,1,1",
        "entmtp tree show lookup:4+chain:1 --json",
    ),
    "train-heads": (
        "entmtp train-heads --generate 2000 --stop-after generate     # the base model's answers first",
        "entmtp train-heads --num-layers 4 --out my-heads --resume    # cache, train and export (resumable)",
    ),
    "generate": (
        'entmtp generate --prompt "Explain speculative decoding in two sentences."',
        'entmtp generate --prompt "Write a haiku." --temperature 0.7 --acceptance lossless --seed 1',
    ),
    "bench offline": (
        "entmtp bench offline --dataset mt_bench -n 8 --methods ar,tree:full:2,1,1",
        "entmtp bench offline --dataset humaneval --split test -n 16 --check-equal --methods "
        "ar,bank:entmtp_vllm/assets/banks/smollm2-135m-humaneval.json "
        "--out runs/offline",
    ),
    "bench serve": (
        "entmtp bench serve --base-url http://127.0.0.1:8000/v1 --dataset mt_bench --concurrency 1,4,16",
        "entmtp bench serve --compare --methods vllm,entmtp --client vllm --temperature 0.7 --request-seed 1234 "
        "--concurrency 1,8 --out runs/compare",
    ),
    "serve": (
        "entmtp serve                     # the embedded SmolLM2 with the shipped heads and bank",
        "entmtp serve --model /path/to/model --heads /path/to/heads --dry-run",
        "entmtp serve -- --port 8001 --max-model-len 4096    # after --: vllm serve's own arguments",
    ),
    "search frontier": (
        "entmtp search frontier --dataset mt_bench --budget 64 --max-depth 4 --lookup 8 --out runs/search/mt_bench",
    ),
    "search debias": ("entmtp search debias --frontier runs/search/mt_bench --sizes 4,8,16",),
    "search throughput": (
        "entmtp search throughput --frontier runs/search/mt_bench --sizes 1,3,5,8,16 --split test -n 8",
    ),
    "search calibrate": (
        "entmtp search calibrate --bank runs/search/mt_bench/throughput/bank_throughput.json "
        "--frontier runs/search/mt_bench",
    ),
    "search regimes": ("entmtp search regimes --frontier runs/search/mt_bench --tree n16 --source replay",),
    "search cost-curve": (
        "entmtp search cost-curve --shape smollm2-135m --batches 1,8,32 --out curve.json",
        "entmtp search cost-curve --shape /path/to/model --device cuda --out curve.json",
    ),
    "search rerank": ("entmtp search rerank runs/search/mt_bench/bank.json --cost-curve curve.json --out runs/rerank",),
    "search summary": ("entmtp search summary --runs runs/search/mt_bench runs/search/gsm8k --out runs/summary",),
}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that the examples keep their lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(HEADING):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class RawHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """For commands whose description keeps its line breaks (the examples do too)."""


def leaf_parsers(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """(command words, parser) of every command that has no subcommand of its own."""
    groups = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not groups:
        yield words, parser
        return
    for group in groups:
        for name, child in group.choices.items():
            yield from leaf_parsers(child, words + (name,))


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Every command's examples as its epilog (a command without an entry in `EXAMPLES` is a bug:
    `tests/cli/test_help.py` checks that every one has some)."""
    for words, leaf in leaf_parsers(parser):
        lines = EXAMPLES.get(" ".join(words))
        if not lines:
            continue
        leaf.epilog = HEADING + "\n" + "".join(f"  {line}\n" for line in lines)
        raw = issubclass(leaf.formatter_class, argparse.RawDescriptionHelpFormatter)
        leaf.formatter_class = RawHelpFormatter if raw else HelpFormatter
