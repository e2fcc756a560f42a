"""`entmtp generate`: one completion with the reference engine (tree decoding or AR)."""

from __future__ import annotations

import argparse
import json
import sys

from entmtp_vllm.acceptance import ACCEPT_MODES
from entmtp_vllm.errors import EntMTPError, flag_problem
from entmtp_vllm.tree import SPEC_FORMS


def add_decoding_args(parser: argparse.ArgumentParser, seed_flag: str = "--seed") -> None:
    """Model, precision, sampling and acceptance options shared by `generate` and `bench offline`
    (where `--seed` already picks the prompts, so the sampling seed is `--sampling-seed`)."""
    from entmtp_vllm.config import CPU_GEMM
    from entmtp_vllm.engine.defaults import DTYPE_CHOICES

    parser.add_argument("--model", help="Hugging Face folder or hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32", help="model precision (default: %(default)s)")
    parser.add_argument("--cpu-gemm", choices=("auto", "packed", "torch"), default=CPU_GEMM.reference_engine,
                        help="the model's linear layers: packed (EntMTP's CPU kernel, float32: a step of a few "
                        "tokens costs little more than one), torch (MKL), auto (packed where it runs) (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: %(default)s)")
    parser.add_argument("--top-k", type=int, default=0, help="0 disables (default: %(default)s)")
    parser.add_argument("--top-p", type=float, default=1.0, help="1.0 disables (default: %(default)s)")
    parser.add_argument(
        "--acceptance",
        choices=ACCEPT_MODES,
        default="typical",
        help="acceptance rule at temperature > 0 (all are greedy at 0): typical is Hydra's, lossy, the rule the "
        "offline benchmarks and the tree search measure; lossless is rejection sampling, exact (default: "
        "%(default)s; entmtp serve defaults to lossless)",
    )
    parser.add_argument(seed_flag, dest="sampling_seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default: %(default)s, as the tree search times its trees; entmtp "
                        "serve uses every core)")


def sampling_from_args(args: argparse.Namespace):
    from pydantic import ValidationError

    from entmtp_vllm.config import SamplingParams

    try:
        return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    except ValidationError as exc:
        _, flag, problem = flag_problem(exc)
        raise EntMTPError(f"{flag}: {problem}") from None


def set_threads(threads: int) -> None:
    import torch

    if threads < 1:
        raise EntMTPError(f"--threads must be at least 1 (got {threads})")
    torch.set_num_threads(threads)


def register(subparsers: argparse._SubParsersAction) -> None:

    parser = subparsers.add_parser(
        "generate",
        help="generate one completion with the reference engine",
        description="Generate a completion for one prompt with the reference transformers engine: tree "
        "speculative decoding with Hydra heads (default when heads are available) or plain AR decoding.",
    )
    parser.add_argument("--prompt", required=True, help="the user message (chat-templated unless --raw)")
    parser.add_argument("--raw", action="store_true", help="use the prompt text as is, without the chat template")
    parser.add_argument("--max-tokens", type=int, default=128, help="new tokens at most (default: %(default)s)")
    parser.add_argument("--method", choices=("tree", "ar"), help="tree (default when heads exist) or ar")
    parser.add_argument(
        "--tree",
        help=f"a tree: bank file, choices JSON file or generated shape ({SPEC_FORMS}); default: the shipped "
        "bank (Hydra head 1 on new text, a prompt-lookup chain while the output loops)",
    )
    parser.add_argument("--name", help="with --tree FILE: the tree of that name")
    parser.add_argument("--bank", help="a bank file of trees to switch between")
    parser.add_argument("--policy", help="policy over the trees, e.g. static:NAME, hysteresis:0.3:small,big "
                        "(default: the bank's own policy, else static on the first tree)")
    parser.add_argument("--heads", help="Hydra heads folder (default: the shipped heads for the embedded model)")
    add_decoding_args(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from entmtp_vllm.engine.loading import default_heads_folder, load_drafter, load_target, load_trees
    from entmtp_vllm.engine.reference import ReferenceEngine
    from entmtp_vllm.prompts import chat_text

    set_threads(args.threads)
    sampling = sampling_from_args(args)
    if args.max_tokens < 1:
        raise EntMTPError(f"--max-tokens must be at least 1 (got {args.max_tokens})")
    if args.method == "ar" and (args.tree or args.bank or args.policy or args.heads):
        raise EntMTPError("--method ar takes no --tree, --bank, --policy or --heads")
    if args.name and not args.tree:
        raise EntMTPError("--name selects a tree of --tree FILE; give --tree too")

    method = args.method
    if method is None:
        # Tree decoding when heads exist (given or shipped), else the AR baseline.
        wants_tree = bool(args.heads or args.tree or args.bank or args.policy)
        method = "tree" if wants_tree or _exists(default_heads_folder) else "ar"
        if method == "ar":
            print("entmtp: no heads found, decoding autoregressively (--method ar)", file=sys.stderr)

    # Trees and policy first: they are cheap to check and fail before the model loads.
    bank = policy = None
    label = "ar"
    if method == "tree":
        bank, policy, label = load_trees(args.tree, args.name, args.bank, args.policy)

    model, tokenizer = load_target(args.model, args.dtype, cpu_gemm=args.cpu_gemm)
    drafter = load_drafter(args.heads, model) if method == "tree" else None
    engine = ReferenceEngine(model, tokenizer, drafter, bank, policy)

    text = args.prompt if args.raw else chat_text(tokenizer, args.prompt)
    prompt_ids = tokenizer(text, add_special_tokens=args.raw)["input_ids"]
    generation = engine.generate(
        prompt_ids, args.max_tokens, sampling=sampling, acceptance=args.acceptance, method=method, seed=args.sampling_seed
    )

    if args.json:
        out = generation.as_dict(with_steps=True)
        out.update({"num_steps": len(generation.steps), "trees": label, "dtype": args.dtype, "threads": args.threads,
                    "cpu_gemm": model.entmtp_cpu_gemm})
        print(json.dumps(out))
        return 0
    print(generation.text)
    print(
        f"[{label}] {generation.num_tokens} tokens in {generation.total_time_s:.2f} s, "
        f"{generation.tokens_per_second:.1f} tok/s, mean accept length {generation.mean_accept_length:.2f} "
        f"over {len(generation.steps)} steps"
    )
    return 0


def _exists(folder_fn) -> bool:
    """Whether the shipped heads exist; False when the heads package is not there either."""
    try:
        return folder_fn().exists()
    except ImportError:
        return False
