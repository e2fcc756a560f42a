"""`entmtp data list|show`: the benchmark prompt sets."""

from __future__ import annotations

import argparse
import json

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.prompts import DEFAULT_SEED, PROMPT_SETS, SPLITS, chat_text, load_prompts


def add_prompt_args(parser: argparse.ArgumentParser, n_default: int | None) -> None:
    """The options every command that reads a prompt set shares."""
    parser.add_argument("-n", "--num-prompts", type=int, default=n_default, help="how many prompts (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="subsampling seed (default: %(default)s)")
    parser.add_argument("--split", choices=SPLITS, default="all", help="stable split by prompt id (default: %(default)s)")
    parser.add_argument("--category", help="keep one category (mt_bench, spec_bench)")
    parser.add_argument("--data-path", help="local JSONL file (gsm8k, spec_bench) or a hub id when online")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="list and show the benchmark prompt sets")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(metavar="ACTION")
    lst = sub.add_parser("list", help="the prompt sets, their sources and sizes")
    lst.set_defaults(func=run_list)
    show = sub.add_parser("show", help="print prompts of a set, chat-templated for the model")
    show.add_argument("name", help=f"one of: {', '.join(PROMPT_SETS)}")
    add_prompt_args(show, n_default=3)
    show.add_argument("--raw", action="store_true", help="print the user messages without the chat template")
    show.add_argument("--model", help="whose chat template to use (default: the embedded model)")
    show.add_argument("--json", action="store_true", help="one JSON object per line")
    show.set_defaults(func=run_show)


def run_list(args: argparse.Namespace) -> int:
    for name, prompt_set in PROMPT_SETS.items():
        try:
            count = f"{len(load_prompts(name))} prompts"
        except EntMTPError as exc:
            count = f"unavailable: {exc}"
        print(f"{name:<11} {prompt_set.description}  [{count}]")
    return 0


def run_show(args: argparse.Namespace) -> int:
    prompts = load_prompts(args.name, args.num_prompts, args.seed, args.split, args.category, args.data_path)
    tokenizer = None
    if not args.raw:
        from transformers import AutoTokenizer

        from entmtp_vllm.model_store import resolve_model

        tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.model))
    for prompt in prompts:
        text = prompt.text if tokenizer is None else chat_text(tokenizer, prompt.text)
        if args.json:
            print(json.dumps({"id": prompt.id, "dataset": prompt.dataset, "category": prompt.category, "text": text}))
        else:
            print(f"--- {prompt.dataset} {prompt.id}" + (f" ({prompt.category})" if prompt.category else ""))
            print(text)
    return 0
