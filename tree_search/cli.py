"""Command line of the tree search: `entmtp search frontier|debias` and `python -m tree_search frontier|debias`.

Both entry points share these parsers; user errors (`EntMTPError`) become one line on stderr and
exit status 2, as everywhere in `entmtp`.
"""

from __future__ import annotations

import argparse
import sys

from entmtp_vllm.errors import EntMTPError

DESCRIPTION = (
    "Offline tree search. `frontier` grows a draft tree greedily (the paper's Algorithm 1, the acceptance "
    "frontier): at each step every one-node augmentation of the current tree is scored in one rollout over "
    "the calibration prompts, and the best is added. `debias` re-measures chosen frontier trees with the "
    "real reference engine (Appendix B)."
)

FRONTIER_DESCRIPTION = """\
Grow a draft tree node by node, up to --budget draft nodes (root excluded) and --max-depth.
Each growth step walks every calibration prompt's greedy trajectory with the current tree T and,
at every decode step, reads the accept length that T plus each frontier child (the next unused
child rank of every node shallower than --max-depth) would have had at that step (a one-step
"what-if"). The child with the best mean accept length is added (ties: smaller child-rank sum,
then shallower, then path order). Greedy acceptance (temperature 0).

Calibration (cached in --out): each prompt's greedy AR continuation, made once with the reference
engine, and the rank of every true next token in each head's top-k along it. The default scorer
`rank` then scores a whole growth step without any model call; `forward` verifies the joint tree
with one target forward per decode step instead (the literal definition; same numbers, slow).

The run folder keeps frontier.jsonl (one line per growth step): rerunning the same command
resumes it; other settings are refused. Outputs in --out: frontier.json, frontier.md (the
table), frontier.png (τ against size, the published reference tree starred) and bank.json (an
entmtp-bank with the trees at --bank-sizes, named n4, n8, ...: `entmtp tree show bank.json`,
`entmtp generate --bank bank.json --policy static:n8`)."""

DEBIAS_DESCRIPTION = """\
Re-measure frontier trees without the what-if bias: each tree runs as a static policy in the
reference engine (its own drafts, mask and KV cache; greedy) on the frontier's calibration
prompts, with the frontier's model, heads, dtype and --max-tokens. Reports biased (frontier) τ,
the tree's own teacher-forced τ, self-rollout τ, Δ% = (biased - self) / self and rank changes,
as debias.md + debias.json, and bank_debiased.json (self τ and tok/s as `measured`)."""


def _threads(value: int) -> None:
    import torch

    if value < 1:
        raise EntMTPError(f"--threads must be at least 1 (got {value})")
    torch.set_num_threads(value)


def add_prompt_args(parser: argparse.ArgumentParser) -> None:
    """The prompt-set options, as `entmtp bench` has them (defaults: 100 calib prompts, seed 123);
    defined here because `tree_search` imports only the core and the engine."""
    from entmtp_vllm.prompts import DEFAULT_SEED, SPLITS

    parser.add_argument("-n", "--num-prompts", type=int, default=100,
                        help="calibration prompts; fewer when the split has fewer (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="subsampling seed (default: %(default)s)")
    parser.add_argument("--split", choices=SPLITS, default="calib",
                        help="stable split by prompt id; tree search calibrates on calib (default: %(default)s)")
    parser.add_argument("--category", help="keep one category (mt_bench, spec_bench)")
    parser.add_argument("--data-path", help="local JSONL file (gsm8k, spec_bench) or a hub id when online")


def add_actions(sub: argparse._SubParsersAction) -> None:
    """The `frontier` and `debias` subcommands."""
    from entmtp_vllm.engine.defaults import DTYPE_CHOICES

    from tree_search.frontier import DEFAULT_BANK_SIZES, REFERENCE_TREE
    from tree_search.scoring import SCORERS

    frontier = sub.add_parser(
        "frontier",
        help="grow the acceptance frontier (Algorithm 1) and write a bank of its trees",
        description=FRONTIER_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    frontier.add_argument("--dataset", required=True, help="calibration prompt set, e.g. mt_bench, humaneval, gsm8k")
    add_prompt_args(frontier)
    frontier.add_argument("--budget", type=int, default=64, help="draft nodes to grow to, root excluded (default: %(default)s)")
    frontier.add_argument("--max-depth", type=int, default=4, help="deepest node; at most the number of heads (default: %(default)s)")
    frontier.add_argument("--max-tokens", type=int, default=128, help="new tokens per prompt, as in decoding (default: %(default)s)")
    frontier.add_argument("--model", help="Hugging Face folder or hub id (default: the embedded SmolLM2-135M-Instruct)")
    frontier.add_argument("--heads", help="Hydra heads folder (default: the shipped Hydra heads)")
    frontier.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32", help="model precision (default: %(default)s)")
    frontier.add_argument("--raw", action="store_true", help="feed prompts without the chat template")
    frontier.add_argument("--scorer", choices=SCORERS, default="rank",
                          help="rank: oracle head ranks on the greedy trajectory, no model call per step (default); "
                          "forward: draft + verify the joint tree with one target forward per decode step (slow)")
    frontier.add_argument("--reference", default=REFERENCE_TREE,
                          help="published tree to score on the same trajectories and star on the plot: a name in "
                          "../shared/data/trees/medusa_hydra_trees.json, FILE#NAME, a tree spec, or 'none' "
                          "(default: %(default)s)")
    frontier.add_argument("--bank-sizes", default=",".join(map(str, DEFAULT_BANK_SIZES)),
                          help="frontier sizes to save in bank.json, as trees n<size> (default: %(default)s)")
    frontier.add_argument("--out", required=True, help="run folder (logs, caches and outputs; rerun to resume)")
    frontier.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    frontier.add_argument("--no-progress", action="store_true", help="no progress bars")
    frontier.set_defaults(func=run_frontier_cmd)

    debias = sub.add_parser(
        "debias",
        help="re-measure frontier trees with the reference engine (self-rollout) and compare",
        description=DEBIAS_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    debias.add_argument("--frontier", required=True, help="a folder written by `search frontier`")
    debias.add_argument("--sizes", help="comma-separated frontier sizes (default: the bank sizes it reached)")
    debias.add_argument("--reference", help="also self-roll a published tree (same forms as `frontier --reference`)")
    debias.add_argument("--out", help="where debias.md / debias.json / bank_debiased.json go (default: the frontier folder)")
    debias.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    debias.add_argument("--no-progress", action="store_true", help="no progress bars")
    debias.set_defaults(func=run_debias_cmd)


def _bank_sizes(text: str) -> tuple[int, ...]:
    from tree_search.debias import parse_sizes

    sizes = parse_sizes(text)
    if sizes is None:
        raise EntMTPError("--bank-sizes names no size")
    return tuple(sizes)


def run_frontier_cmd(args: argparse.Namespace) -> int:
    from tree_search.frontier import FrontierConfig, run_frontier
    from tree_search.report import frontier_markdown

    config = FrontierConfig(
        dataset=args.dataset, out=args.out, num_prompts=args.num_prompts, seed=args.seed, split=args.split,
        category=args.category, data_path=args.data_path, raw=args.raw, budget=args.budget, max_depth=args.max_depth,
        max_tokens=args.max_tokens, model=args.model, heads=args.heads, dtype=args.dtype, scorer=args.scorer,
        reference=args.reference, bank_sizes=_bank_sizes(args.bank_sizes), threads=args.threads,
    )
    results = run_frontier(config, progress=not args.no_progress)
    print(frontier_markdown(results), end="")
    print("wrote " + ", ".join(results["outputs"].values()), file=sys.stderr)
    return 0


def run_debias_cmd(args: argparse.Namespace) -> int:
    from tree_search.debias import debias_markdown, parse_sizes, run_debias

    results = run_debias(args.frontier, parse_sizes(args.sizes), args.out, args.reference, args.threads,
                         progress=not args.no_progress)
    print(debias_markdown(results), end="")
    print("wrote " + ", ".join(results["outputs"].values()), file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """`entmtp search ...` (called by `entmtp_vllm.cli.search_cmd`)."""
    parser = subparsers.add_parser("search", help="offline tree search: acceptance frontier, debiasing",
                                   description=DESCRIPTION)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    add_actions(parser.add_subparsers(metavar="ACTION"))


def build_parser(prog: str = "python -m tree_search") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_actions(parser.add_subparsers(dest="command", metavar="ACTION"))
    return parser


def main(argv: list[str] | None = None) -> int:
    from entmtp_vllm.cli.main import run

    return run(build_parser(), argv, prog="tree_search", on_interrupt=" (rerun the same command to resume)")
