"""Command line of the tree search: `entmtp search frontier|debias|throughput|calibrate|regimes` and
`python -m tree_search ...`.

Both entry points share these parsers; user errors (`EntMTPError`) become one line on stderr and
exit status 2, as everywhere in `entmtp`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from entmtp_vllm.errors import EntMTPError

DESCRIPTION = (
    "Offline tree search. `frontier` grows a draft tree greedily (the paper's Algorithm 1, the acceptance "
    "frontier): at each step every one-node augmentation of the current tree is scored in one rollout over "
    "the calibration prompts, and the best is added. `debias` re-measures chosen frontier trees with the "
    "real reference engine (Appendix B). `throughput` times frontier trees end to end and keeps the "
    "throughput-Pareto trees as the task's bank; `calibrate` picks the scheduler (EntMTP^τ, ladder) for that "
    "bank; `regimes` relates per-step features to the next accept length (Appendix A)."
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

COST_CURVE_DESCRIPTION = """\
Measure how much one verification step costs on this machine as the tree grows: the time of one
target forward over n new tokens per request (--tokens), for a batch of B requests (--batches),
after --context tokens in the KV cache, relative to n = 1 (an autoregressive step). The model is
a Llama of the given shape with random weights (they time like real ones; no checkpoint needed),
built with transformers on --device. Writes an entmtp-cost-curve JSON for `search rerank`."""

RERANK_DESCRIPTION = """\
Re-rank a frontier bank's trees for the hardware a cost curve was measured on, without decoding:
acceptance (τ) does not depend on the hardware, so each tree's predicted speedup over AR is
τ / cost(n), cost(n) = ms(verify n tokens) / ms(verify 1) at --batch (linear between measured
points; the draft heads' own cost is left out). Writes rerank_<curve>-<device>-b<B>.md / .json
and bank_<...>.json: the throughput-Pareto trees under the prediction, static policy on the best.
On CPU the `throughput` action, which times whole decodes, remains the reference."""

DEBIAS_DESCRIPTION = """\
Re-measure frontier trees without the what-if bias: each tree runs as a static policy in the
reference engine (its own drafts, mask and KV cache; greedy) on the frontier's calibration
prompts, with the frontier's model, heads, dtype and --max-tokens. Reports biased (frontier) τ,
the tree's own teacher-forced τ, self-rollout τ, Δ% = (biased - self) / self and rank changes,
as debias.md + debias.json, and bank_debiased.json (self τ and tok/s as `measured`)."""


THROUGHPUT_DESCRIPTION = """\
Time chosen frontier trees, the published reference tree and AR end to end in the reference
engine, with the protocol of `entmtp bench offline` (its own run: one warm-up generation per
method excluded, prefill timed, methods taking turns step by step), greedy. Prompts: the
frontier data set's --split (default test: held out from the calibration). Keeps the
throughput-Pareto frontier trees (no other tree at most as large and at least as fast) as
bank_throughput.json (measured τ and tok/s filled; policy: static on the fastest tree, EntMTP*),
and writes throughput.md / .json / .png (tok/s vs size, Pareto set marked) in <frontier>/throughput."""

CALIBRATE_DESCRIPTION = """\
Calibrate the scheduler for a bank: EntMTP^τ (hysteresis between a conservative and an aggressive
tree, on the path value s: the paper's τ grid 0.001..0.05, τ_off < τ_on variants and τ at quantiles
of s; and on head 1's top-1 probability head_top1_1 and the accept-length history, at their
quantiles) and the ladder (edges at quantiles of s and of head_top1_1). Every policy is replayed
over the frontier's calibration trajectories (greedy: same tokens for every policy; features and
accept lengths exact), with per-tree step costs from the step-cost probe (one engine run over
--cost-prompts calibration prompts, every tree decoding them side by side; 0: from `search throughput`):
predicted tok/s.
The best few are checked in the engine on --num-prompts calibration prompts, the best is written
into the bank's `policy`, and a held-out run on --test-n test prompts compares AR, the reference
tree, EntMTP* (best static), EntMTP^τ and the ladder (Table 1; each paired with EntMTP* prompt by
prompt). --heldout FRONTIER also replays the chosen policies over another split's trajectories.
Outputs in <frontier>/calibrate."""

REGIMES_DESCRIPTION = """\
Run one static tree in the reference engine on the frontier's calibration prompts (greedy), log
every step's features (what the policy sees before the step) and accept length (steps.jsonl,
resumable), and report per feature the Pearson r with the next step's accept length and, for the
event "the next step accepts only the bonus token", each feature's AUROC and a logistic
regression's AUROC on held-out prompts (split by prompt, never by row). With --combine, merges
several tasks' regimes.json into one heatmap + table."""


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


def _add_action(sub: argparse._SubParsersAction, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """A subcommand whose description keeps its line breaks."""
    return sub.add_parser(name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


def _add_frontier_sizes(parser: argparse.ArgumentParser) -> None:
    """--frontier and --sizes of the stages that take chosen frontier trees (debias, throughput)."""
    parser.add_argument("--frontier", required=True, help="a folder written by `search frontier`")
    parser.add_argument("--sizes", help="comma-separated frontier sizes (default: the bank sizes it reached)")


def _add_run_options(parser: argparse.ArgumentParser, out_help: str, out_required: bool = False) -> None:
    """--out, --threads and --no-progress: the last options of every stage."""
    parser.add_argument("--out", required=out_required, help=out_help)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def add_actions(sub: argparse._SubParsersAction) -> None:
    """Every `search` subcommand (the stages, cost-curve, rerank, summary)."""
    from entmtp_vllm.engine.defaults import DTYPE_CHOICES
    from entmtp_vllm.prompts import SPLITS

    from tree_search.frontier import DEFAULT_BANK_SIZES, REFERENCE_TREE
    from tree_search.scoring import SCORERS

    frontier = _add_action(
        sub, "frontier",
        "grow the acceptance frontier (Algorithm 1) and write a bank of its trees",
        FRONTIER_DESCRIPTION,
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
    frontier.add_argument("--lookup", type=int, default=0, metavar="L",
                          help="hybrid search: also offer prompt-lookup nodes, a copied chain of up to L tokens "
                          "under the root with head nodes below it (rank scorer only; default: 0, heads only). "
                          "A heads-only run's calibration.jsonl can be copied into the new --out folder and is reused")
    frontier.add_argument("--scorer", choices=SCORERS, default="rank",
                          help="rank: oracle head ranks on the greedy trajectory, no model call per step (default); "
                          "forward: draft + verify the joint tree with one target forward per decode step (slow)")
    frontier.add_argument("--reference", default=REFERENCE_TREE,
                          help="published tree to score on the same trajectories and star on the plot: a name in "
                          "../shared/data/trees/medusa_hydra_trees.json, FILE#NAME, a tree spec, or 'none' "
                          "(default: %(default)s)")
    frontier.add_argument("--bank-sizes", default=",".join(map(str, DEFAULT_BANK_SIZES)),
                          help="frontier sizes to save in bank.json, as trees n<size> (default: %(default)s)")
    _add_run_options(frontier, "run folder (logs, caches and outputs; rerun to resume)", out_required=True)
    frontier.set_defaults(func=run_frontier_cmd)

    debias = _add_action(
        sub, "debias",
        "re-measure frontier trees with the reference engine (self-rollout) and compare",
        DEBIAS_DESCRIPTION,
    )
    _add_frontier_sizes(debias)
    debias.add_argument("--reference", help="also self-roll a published tree (same forms as `frontier --reference`)")
    debias.add_argument("-n", "--num-prompts", type=int,
                        help="only the first N calibration prompts (default: all; biased τ is recomputed on them)")
    _add_run_options(debias, "where debias.md / debias.json / bank_debiased.json go (default: the frontier folder)")
    debias.set_defaults(func=run_debias_cmd)

    throughput = _add_action(
        sub, "throughput",
        "time frontier trees end to end; keep the throughput-Pareto trees as the task's bank",
        THROUGHPUT_DESCRIPTION,
    )
    _add_frontier_sizes(throughput)
    throughput.add_argument("--reference", default=REFERENCE_TREE,
                            help="published tree to time too (same forms as `frontier --reference`; 'none' for none; "
                            "default: %(default)s)")
    throughput.add_argument("--dtype", choices=DTYPE_CHOICES, default="bfloat16", help="model precision (default: %(default)s)")
    throughput.add_argument("-n", "--num-prompts", type=int, default=10, help="prompts timed (default: %(default)s)")
    throughput.add_argument("--split", choices=SPLITS, default="test",
                            help="prompt split of the frontier's data set (default: %(default)s, held out)")
    throughput.add_argument("--seed", type=int, help="subsampling seed (default: the frontier's)")
    throughput.add_argument("--max-tokens", type=int, help="new tokens per prompt (default: the frontier's)")
    _add_run_options(throughput, "output folder (default: <frontier>/throughput)")
    throughput.set_defaults(func=run_throughput_cmd)

    calibrate = _add_action(
        sub, "calibrate",
        "choose the scheduler (EntMTP^τ hysteresis, ladder) for a bank and write it into the bank",
        CALIBRATE_DESCRIPTION,
    )
    calibrate.add_argument("--bank", required=True, help="bank file to calibrate (e.g. <frontier>/throughput/bank_throughput.json); "
                           "its `policy` is replaced")
    calibrate.add_argument("--frontier", required=True, help="the frontier folder (its calibration trajectories)")
    calibrate.add_argument("--throughput", help="the throughput run's throughput.json (default: the bank's metadata)")
    calibrate.add_argument("--cost-prompts", type=int, default=8,
                           help="calibration prompts of the step-cost probe, where every tree decodes them as a static "
                           "tree, the trees taking turns step by step; 0: take the step costs from the throughput run "
                           "(default: %(default)s)")
    calibrate.add_argument("--dtype", choices=DTYPE_CHOICES, default="bfloat16",
                           help="precision of the engine runs (default: %(default)s; the replay uses the frontier's)")
    calibrate.add_argument("-n", "--num-prompts", type=int, default=10,
                           help="calibration prompts of the engine check; 0 for none (default: %(default)s)")
    calibrate.add_argument("--test-n", type=int, default=10,
                           help="test prompts of the held-out Table-1 run; 0 for none (default: %(default)s)")
    calibrate.add_argument("--check-top", type=int, default=3,
                           help="best predicted scheduler policies timed in the engine check (default: %(default)s)")
    calibrate.add_argument("--select", choices=("predicted", "measured"), default="predicted",
                           help="choose by replay-predicted tok/s over all calibration prompts, or by the engine "
                           "check's measured tok/s (default: %(default)s)")
    calibrate.add_argument("--candidates", choices=("bank", "timed"), default="timed",
                           help="trees a policy may use: the bank's only, or also every frontier tree the throughput "
                           "run timed (added to the bank when the chosen policy uses it) (default: %(default)s)")
    calibrate.add_argument("--max-tokens", type=int, help="new tokens per prompt in engine runs (default: the frontier's)")
    calibrate.add_argument("--reference", help="published tree in the Table-1 run (default: the throughput run's; 'none': not rerun, its "
                           "row is taken from the throughput run when that timed the same test prompts)")
    calibrate.add_argument("--heldout", metavar="FRONTIER",
                           help="also replay the best policies over this frontier folder's trajectories, made on "
                           "other prompts (e.g. `entmtp search frontier --split test -n 40 --budget 4 ...`): "
                           "held-out τ and predicted tok/s, every policy on the same tokens")
    _add_run_options(calibrate, "output folder (default: <frontier>/calibrate)")
    calibrate.set_defaults(func=run_calibrate_cmd)

    regimes = _add_action(
        sub, "regimes",
        "per-step features vs the next accept length: Pearson r, AUROC (split by prompt)",
        REGIMES_DESCRIPTION,
    )
    regimes.add_argument("--frontier", help="the frontier folder (its calibration prompts)")
    regimes.add_argument("--tree", default="n16", help="static tree: a frontier size n<k>, or a tree source "
                         "(spec, FILE#NAME) (default: %(default)s)")
    regimes.add_argument("-n", "--num-prompts", type=int, default=100, help="calibration prompts (default: %(default)s)")
    regimes.add_argument("--max-tokens", type=int, help="new tokens per prompt (default: the frontier's)")
    regimes.add_argument("--dtype", choices=DTYPE_CHOICES, help="model precision (default: the frontier's)")
    regimes.add_argument("--folds", type=int, default=5, help="cross-validation folds over prompts (default: %(default)s)")
    regimes.add_argument("--seed", type=int, default=0, help="seed of the prompt split (default: %(default)s)")
    regimes.add_argument("--no-lookup", action="store_true", help="do not add prompt-lookup features")
    regimes.add_argument("--source", choices=("engine", "replay"), default="engine",
                         help="engine: run the reference engine; replay: replay the tree over the calibration "
                         "trajectories (same records at temperature 0, no engine run) (default: %(default)s)")
    regimes.add_argument("--check-n", type=int, default=3,
                         help="with --source replay: prompts also run in the engine to compare (default: %(default)s)")
    regimes.add_argument("--combine", nargs="+", metavar="REGIMES_JSON",
                         help="instead: merge these regimes.json files into one heatmap + table in --out")
    _add_run_options(regimes, "output folder (default: <frontier>/regimes)")
    regimes.set_defaults(func=run_regimes_cmd)

    curve = _add_action(
        sub, "cost-curve", "measure the step-cost curve (verify n tokens for a batch of B, relative to 1) of a model shape",
        COST_CURVE_DESCRIPTION,
    )
    curve.add_argument("--shape", default="smollm2-135m",
                       help="a named shape (smollm2-135m, llama-7b) or a model folder / config.json (default: %(default)s)")
    curve.add_argument("--tokens", default="1,2,4,8,16,32,64", help="tokens verified per request (default: %(default)s)")
    curve.add_argument("--batches", default="1", help="batch sizes (default: %(default)s)")
    curve.add_argument("--context", type=int, default=512, help="context tokens already in the KV cache (default: %(default)s)")
    curve.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                       help="the random-weight model's dtype (default: %(default)s)")
    curve.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    curve.add_argument("--repeats", type=int, default=5, help="timings per point, median kept (default: %(default)s)")
    curve.add_argument("--threads", type=int, default=1, help="torch threads on CPU (default: %(default)s)")
    curve.add_argument("--out", required=True, help="the curve's JSON file")
    curve.add_argument("--no-progress", action="store_true", help="no progress bars")
    curve.set_defaults(func=run_cost_curve_cmd)

    rerank = _add_action(
        sub, "rerank", "re-rank a frontier bank's trees for other hardware from a step-cost curve (no decoding)",
        RERANK_DESCRIPTION,
    )
    rerank.add_argument("bank", help="an entmtp-bank with measured accept lengths (frontier bank.json, bank_debiased.json)")
    rerank.add_argument("--cost-curve", required=True, help="a curve written by `search cost-curve`")
    rerank.add_argument("--batch", type=int, default=1, help="which measured batch size to rank for (default: %(default)s)")
    rerank.add_argument("--out", required=True, help="folder for rerank_*.md / .json and bank_*.json")
    rerank.set_defaults(func=run_rerank_cmd)

    summary = sub.add_parser(
        "summary",
        help="target checks of finished runs (half-size τ, EntMTP* vs reference vs AR, wall times); copy small outputs",
        description="For each run folder (`search frontier --out`, with whatever later stages finished): (a) the "
        "smallest frontier tree reaching the published tree's τ and the τ of the largest one within half its nodes, "
        "(b) EntMTP* vs the published tree vs AR and the Table-1 analogue, (c) wall time per stage; writes "
        "summary.md / summary.json in --out and copies each task's small outputs (< 1 MB) into <out>/<task>/.",
    )
    summary.add_argument("--runs", nargs="+", required=True, help="run folders, e.g. runs/search/mt_bench runs/search/sharegpt")
    summary.add_argument("--out", required=True, help="output folder, e.g. docs/search")
    summary.set_defaults(func=run_summary_cmd)


def _wrote(outputs: dict[str, str], note: str = "") -> int:
    """The files a command wrote, on stderr (its report went to stdout); exit status 0."""
    print("wrote " + ", ".join(outputs.values()) + note, file=sys.stderr)
    return 0


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
        reference=args.reference, bank_sizes=_bank_sizes(args.bank_sizes), threads=args.threads, lookup=args.lookup,
    )
    results = run_frontier(config, progress=not args.no_progress)
    print(frontier_markdown(results), end="")
    return _wrote(results["outputs"])


def run_debias_cmd(args: argparse.Namespace) -> int:
    from tree_search.debias import debias_markdown, parse_sizes, run_debias

    results = run_debias(args.frontier, parse_sizes(args.sizes), args.out, args.reference, args.threads,
                         progress=not args.no_progress, num_prompts=args.num_prompts)
    print(debias_markdown(results), end="")
    return _wrote(results["outputs"])


def run_throughput_cmd(args: argparse.Namespace) -> int:
    from tree_search.debias import parse_sizes
    from tree_search.throughput import ThroughputConfig, run_throughput, throughput_markdown

    reference = None if args.reference and args.reference.lower() == "none" else args.reference
    if args.num_prompts < 1:
        raise EntMTPError(f"-n must be at least 1 (got {args.num_prompts})")
    config = ThroughputConfig(frontier=args.frontier, sizes=parse_sizes(args.sizes), reference=reference, out=args.out,
                              dtype=args.dtype, num_prompts=args.num_prompts, split=args.split, seed=args.seed,
                              max_tokens=args.max_tokens, threads=args.threads)
    results = run_throughput(config, progress=not args.no_progress)
    print(throughput_markdown(results), end="")
    return _wrote(results["outputs"])


def run_calibrate_cmd(args: argparse.Namespace) -> int:
    from tree_search.calibrate import CalibrateConfig, run_calibrate
    from tree_search.calibrate_report import calibrate_markdown

    _threads(args.threads)
    config = CalibrateConfig(bank=args.bank, frontier=args.frontier, throughput=args.throughput, out=args.out,
                             dtype=args.dtype, num_prompts=args.num_prompts, test_n=args.test_n, check_top=args.check_top,
                             select=args.select, max_tokens=args.max_tokens, threads=args.threads,
                             reference=args.reference, candidates=args.candidates, heldout=args.heldout,
                             cost_prompts=args.cost_prompts)
    results = run_calibrate(config, progress=not args.no_progress)
    print(calibrate_markdown(results), end="")
    return _wrote(results["outputs"], f"; policy written to {args.bank}")


def run_regimes_cmd(args: argparse.Namespace) -> int:
    from tree_search.regimes import RegimesConfig, run_regimes
    from tree_search.regimes_report import combine, regimes_markdown

    if args.combine:
        if not args.out:
            raise EntMTPError("--combine needs --out FOLDER")
        written = combine(args.combine, args.out)
        print(Path(written["markdown"]).read_text(encoding="utf-8"), end="")
        return _wrote(written)
    if not args.frontier:
        raise EntMTPError("give --frontier FOLDER (or --combine REGIMES_JSON ... --out FOLDER)")
    _threads(args.threads)
    config = RegimesConfig(frontier=args.frontier, tree=args.tree, num_prompts=args.num_prompts,
                           max_tokens=args.max_tokens, dtype=args.dtype, out=args.out, folds=args.folds, seed=args.seed,
                           threads=args.threads, lookup=not args.no_lookup, source=args.source, check_n=args.check_n)
    results = run_regimes(config, progress=not args.no_progress)
    print(regimes_markdown(results), end="")
    return _wrote(results["outputs"])


def run_cost_curve_cmd(args: argparse.Namespace) -> int:
    import json

    from entmtp_vllm.bench.serve import parse_int_list
    from tree_search.cost_curve import measure_cost_curve

    _threads(args.threads)
    curve = measure_cost_curve(args.shape, parse_int_list(args.tokens, "--tokens"), parse_int_list(args.batches, "--batches"),
                               args.context, args.dtype, args.device, args.repeats, progress=not args.no_progress)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(curve.to_json(), indent=1) + "\n", encoding="utf-8")
    for batch in curve.batches:
        ratios = ", ".join(f"{n}: {curve.relative(batch, n):.2f}x" for b, n in sorted(curve.points) if b == batch)
        print(f"batch {batch}: 1 token {curve.points[(batch, 1)]:.2f} ms; {ratios}")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def run_rerank_cmd(args: argparse.Namespace) -> int:
    from tree_search.cost_curve import rerank_bank

    written = rerank_bank(args.bank, args.cost_curve, args.out, args.batch)
    print(Path(written["markdown"]).read_text(encoding="utf-8"), end="")
    return _wrote(written)


def run_summary_cmd(args: argparse.Namespace) -> int:
    from tree_search.summary import summarize

    result = summarize(args.runs, args.out)
    print(Path(args.out, "summary.md").read_text(encoding="utf-8"), end="")
    print(f"wrote {Path(args.out, 'summary.md')}, summary.json and {len(result['copied'])} copied files", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """`entmtp search ...` (called by `entmtp_vllm.cli.search_cmd`)."""
    parser = subparsers.add_parser("search", help="offline tree search: acceptance and throughput frontiers, debiasing, scheduler calibration, regimes",
                                   description=DESCRIPTION)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    add_actions(parser.add_subparsers(metavar="ACTION"))


def build_parser(prog: str = "python -m tree_search") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_actions(parser.add_subparsers(dest="command", metavar="ACTION"))
    return parser


def main(argv: list[str] | None = None) -> int:
    from entmtp_vllm.command_runner import run

    return run(build_parser(), argv, prog="tree_search", on_interrupt=" (rerun the same command to resume)")
