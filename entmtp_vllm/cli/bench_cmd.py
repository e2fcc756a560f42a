"""`entmtp bench offline`: throughput and acceptance of decoding methods on prompt sets."""

from __future__ import annotations

import argparse
import sys

from entmtp_vllm.cli.data_cmd import add_prompt_args
from entmtp_vllm.cli.generate_cmd import add_decoding_args, sampling_from_args, set_threads
from entmtp_vllm.errors import EntMTPError


def register(subparsers: argparse._SubParsersAction) -> None:
    from entmtp_vllm.bench.offline import METHOD_FORMS

    parser = subparsers.add_parser("bench", help="benchmark decoding methods")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(metavar="ACTION")
    offline = sub.add_parser(
        "offline",
        help="reference engine on prompt sets: tok/s, speedup over AR, mean accept length",
        description="Run decoding methods with the reference engine over prompt sets. Per method: one "
        "warm-up generation (excluded), then every prompt, the methods taking turns prompt by prompt; "
        "timings include the prefill. AR always runs, as the speedup baseline.",
    )
    offline.add_argument("--dataset", required=True, help="prompt set(s), comma-separated, e.g. mt_bench,gsm8k,humaneval")
    add_prompt_args(offline, n_default=10)
    offline.add_argument("--max-tokens", type=int, default=128, help="new tokens per prompt (default: %(default)s)")
    offline.add_argument(
        "--methods",
        action="append",
        required=True,
        help=f"comma-separated methods ({METHOD_FORMS}); repeatable. tree/bank use --heads, medusa --medusa-heads",
    )
    offline.add_argument("--heads", help="Hydra heads folder (default: the shipped Hydra heads)")
    offline.add_argument("--medusa-heads", help="Medusa heads folder (default: the shipped Medusa heads)")
    add_decoding_args(offline, seed_flag="--sampling-seed")
    offline.add_argument("--raw", action="store_true", help="feed prompts without the chat template")
    offline.add_argument("--check-equal", action="store_true", help="greedy: every method must reproduce AR's tokens")
    offline.add_argument("--out", help="folder for offline.json / offline.md / offline.png")
    offline.add_argument("--no-progress", action="store_true", help="no progress bars")
    offline.set_defaults(func=run_offline_cmd)


def run_offline_cmd(args: argparse.Namespace) -> int:
    from entmtp_vllm.bench.offline import OfflineBenchConfig, markdown_report, parse_methods, run_offline, write_report

    set_threads(args.threads)
    sampling = sampling_from_args(args)
    datasets = [name.strip() for name in args.dataset.split(",") if name.strip()]
    if not datasets:
        raise EntMTPError("--dataset names no prompt set")
    config = OfflineBenchConfig(
        datasets=datasets,
        methods=parse_methods(args.methods),
        num_prompts=args.num_prompts,
        seed=args.seed,
        split=args.split,
        category=args.category,
        data_path=args.data_path,
        max_tokens=args.max_tokens,
        model=args.model,
        dtype=args.dtype,
        threads=args.threads,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        acceptance=args.acceptance,
        heads=args.heads,
        medusa_heads=args.medusa_heads,
        check_equal=args.check_equal,
        raw=args.raw,
        sampling_seed=args.sampling_seed,
    )
    results = run_offline(config, progress=not args.no_progress)
    print(markdown_report(results), end="")
    if args.out:
        paths = write_report(results, args.out)
        print(f"wrote {paths['json']}, {paths['markdown']}, {paths['png']}", file=sys.stderr)
    check = results.get("check_equal")
    return 1 if check and check["mismatches"] else 0
