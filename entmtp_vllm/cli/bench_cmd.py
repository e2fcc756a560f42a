"""`entmtp bench offline|serve`: decoding methods on prompt sets (reference engine), and load tests of
OpenAI-compatible servers (`serve`, `serve --compare` starts vLLM / ngram / EntMTP servers itself)."""

from __future__ import annotations

import argparse
import sys

from entmtp_vllm.cli.data_cmd import add_prompt_args
from entmtp_vllm.cli.generate_cmd import add_decoding_args, sampling_from_args, set_threads
from entmtp_vllm.config import CPU_IN_PROCESS, CPU_THREADS
from entmtp_vllm.errors import EntMTPError


def register(subparsers: argparse._SubParsersAction) -> None:
    from entmtp_vllm.bench.offline_config import INTERLEAVE_MODES, METHOD_FORMS

    parser = subparsers.add_parser("bench", help="benchmark decoding methods")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(metavar="ACTION")
    offline = sub.add_parser(
        "offline",
        help="reference engine on prompt sets: tok/s, speedup over AR, mean accept length",
        description="Run decoding methods with the reference engine over prompt sets. Per method: one "
        "warm-up generation (excluded), then every prompt, the methods taking turns (one decode step each, "
        "or whole generations: --interleave); timings include the prefill. AR always runs, as the speedup "
        "baseline.",
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
    offline.add_argument(
        "--baseline",
        metavar="METHOD",
        help="pair every other method with this one prompt by prompt: the tok/s ratio with a 95%% interval from "
        "resampling the prompts. A method as written in --methods, or its position (1 = AR, which always runs "
        "first) (default: AR)",
    )
    offline.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="R",
        help="run every prompt R times per method (the turns repeated) and keep each prompt's fastest run: "
        "other processes only add time, so this steadies the timings at R times the cost (default: %(default)s)",
    )
    offline.add_argument(
        "--interleave",
        choices=INTERLEAVE_MODES,
        default="step",
        help="how the methods take turns: a whole generation each (prompt), or one decode step each, all "
        "methods decoding the prompt side by side and each counting only its own steps' time (step: pairs "
        "the methods within ~0.1 s, so slow spells of a shared machine hit them alike) (default: %(default)s)",
    )
    offline.add_argument("--out", help="folder for offline.json / offline.md / offline.png")
    offline.add_argument("--no-progress", action="store_true", help="no progress bars")
    offline.set_defaults(func=run_offline_cmd)
    register_serve(sub)


def register_serve(sub: argparse._SubParsersAction) -> None:
    from entmtp_vllm.bench.serve import DEFAULT_BASE_URL, COMPARE_METHODS, METRICS_FROM_SERVER

    serve = sub.add_parser(
        "serve",
        help="load-test an OpenAI-compatible server: TTFT, TPOT, ITL, tok/s, acceptance per concurrency level",
        description="Send streaming requests built from prompt sets to an OpenAI-compatible server, one "
        "concurrency level after another, and report TTFT / TPOT / ITL (mean, p50, p90, p99), output tok/s, "
        "requests/s, failures and, when the server's /metrics has them, vLLM's spec-decode counters and the "
        "entmtp_ series over each level. With --compare it starts the servers itself, one after another, for "
        "the same model: vLLM without speculation, vLLM's ngram method, and EntMTP, and compares them.",
    )
    serve.add_argument("--base-url", default=DEFAULT_BASE_URL, help="the server's OpenAI API root (default: %(default)s)")
    serve.add_argument("--model", help="model name to request (default: the server's first model; with --compare: "
                       "the model folder or hub id to serve, default the embedded SmolLM2)")
    serve.add_argument("--dataset", default="mt_bench", help="prompt set(s), comma-separated (default: %(default)s)")
    add_prompt_args(serve, n_default=32)
    serve.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrency levels (default: %(default)s)")
    serve.add_argument("--max-tokens", type=int, default=128, help="max new tokens per request (default: %(default)s)")
    serve.add_argument("--temperature", type=float, default=0.0, help="sampling temperature, 0 = greedy (default: %(default)s)")
    serve.add_argument("--request-seed", type=int, default=None, metavar="N",
                       help="send seed N with every request (vLLM's seed): sampled requests become reproducible, and "
                            "with --compare every method's output is compared with vllm's, prompt by prompt "
                            "(greedy runs are compared too; default: no seed sent)")
    serve.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens tokens (vLLM's ignore_eos)")
    serve.add_argument("--duration", type=float, help="seconds per level: keep sending prompts cyclically (a soak, or steady load); output tok/s "
                       "is then the server's token count over the window, the drain left out")
    serve.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                       help="chat completions (default) or plain completions with the raw prompt text")
    serve.add_argument("--warmup", type=int, default=1, help="warm-up requests before the first level (default: %(default)s)")
    serve.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request (default: %(default)s)")
    serve.add_argument("--metrics-from", default=METRICS_FROM_SERVER, metavar="SOURCE",
                       help="where the spec-decode counters are read around each level: server (the server's "
                       "/metrics, default) or ray:DIR (a Ray Serve app started with metrics_dir: DIR; every "
                       "replica's counters summed, and each replica's own listed)")
    serve.add_argument("--out", help="folder for serve.json / serve.md / serve.png (compare.* and server logs with --compare)")
    serve.add_argument("--no-progress", action="store_true", help="no progress bars")
    group = serve.add_argument_group("--compare (starts the servers itself)")
    group.add_argument("--compare", action="store_true", help="compare vLLM without speculation, ngram and EntMTP")
    group.add_argument("--methods", default=",".join(COMPARE_METHODS),
                       help="servers to compare, comma-separated (default: %(default)s; ratios are against vllm)")
    group.add_argument("--server-args", default="", help='extra `vllm serve` arguments for every server, e.g. '
                       '"--dtype float32 --max-model-len 2048" (default: none)')
    group.add_argument("--health-timeout", type=float, default=600.0,
                       help="seconds a server may take to become healthy (default: %(default)s)")
    group.add_argument("--eager", action=argparse.BooleanOptionalAction, default=True,
                       help="on CPU, pass --enforce-eager to every server (default on)")
    group.add_argument("--in-process", action=argparse.BooleanOptionalAction, default=CPU_IN_PROCESS,
                       help="on CPU, run every server's worker inside its engine core's process, as entmtp serve "
                       "does (default on; --no-in-process: vLLM's own process layout for every server). Every "
                       "server also gets the same KV cache size, sized once for this machine unless --server-args "
                       "give one")
    group.add_argument("--server-threads", type=int, default=CPU_THREADS, metavar="N",
                       help="on CPU with --in-process, torch's threads in every server's engine core, as entmtp "
                       "serve --threads (default: every core this process may run on, unless OMP_NUM_THREADS is set)")
    group.add_argument("--cpu-gemm", choices=("packed", "vllm"), default=None,
                       help="on CPU, every server's matrix multiply, as entmtp serve --cpu-gemm chooses it "
                       "(default: packed when the servers run in float32 and the kernel builds here, else vllm)")
    group.add_argument("--rounds", type=int, default=1,
                       help="start and measure every server this many times, the order rotated each round "
                       "(vllm,ngram,entmtp then ngram,entmtp,vllm, ...); the table shows each method's median round "
                       "and every round is listed (default: %(default)s)")
    group.add_argument("--interleave", type=int, default=0, metavar="W",
                       help="keep every server up at once and send each level's prompts in turns of W x concurrency "
                       "prompts, one server after another, the order rotating every turn: the methods meet the same "
                       "prompts seconds apart, so a slow spell of the machine falls on all of them alike. Each turn "
                       "ends by draining its batch (in every method); rounds repeat the turns without restarting the "
                       "servers; each server's KV cache is sized for its share of the memory (default: 0, servers "
                       "one after another)")
    group.add_argument("--client", choices=("entmtp", "vllm"), default="entmtp",
                       help="load generator: this tool's streaming client (default) or vLLM's own `vllm bench serve` "
                       "(openai-chat backend, the same prompts as a custom dataset; its results become the same "
                       "tables), so the numbers do not depend on this project's client")
    group.add_argument("--heads", help="EntMTP heads folder (default: the shipped Hydra heads)")
    group.add_argument("--bank", help="EntMTP bank file, choices JSON or tree shape (default: entmtp serve's)")
    group.add_argument("--tree", help="EntMTP: keep only this tree of the bank")
    group.add_argument("--policy", help="EntMTP policy string (default: the bank's)")
    group.add_argument("--acceptance", choices=("greedy", "typical", "lossless"), help="EntMTP acceptance rule for sampled requests (default: entmtp serve's, lossless)")
    group.add_argument("--num-speculative-tokens", type=int, help="EntMTP draft budget (default: largest tree's nodes - 1)")
    group.add_argument("--entmtp-config", metavar="JSON", help="EntMTP: further settings as a JSON object "
                       "(entmtp serve --config), e.g. '{\"budget\": null}'")
    group.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON",
                       help="a further EntMTP server, method entmtp-LABEL: the entmtp server with these settings laid "
                       "over --entmtp-config, e.g. --variant 'chain4={\"bank\": \"chain4.json\"}' (repeatable; "
                       "added to --methods unless listed there), so EntMTP configurations meet one baseline in one run "
                       "(default: none)")
    group.add_argument("--ngram-config", default="4,4,2", help="ngram: num_speculative_tokens,prompt_lookup_max,"
                       "prompt_lookup_min (default: %(default)s)")
    serve.set_defaults(func=run_serve_cmd)


def parse_variants(values: list[str]) -> dict[str, dict]:
    """`["chain4={...}", ...]` (`--variant LABEL=JSON`) -> {label: settings}, one-line errors."""
    import json

    variants: dict[str, dict] = {}
    for value in values:
        label, equals, text = value.partition("=")
        label = label.strip()
        if not equals or not label:
            raise EntMTPError(f"--variant {value!r}: write LABEL=JSON, e.g. chain4='{{\"bank\": \"chain4.json\"}}'")
        if label in variants:
            raise EntMTPError(f"--variant {label}: given twice")
        try:
            settings = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EntMTPError(f"--variant {label}: invalid JSON ({exc.msg})") from None
        if not isinstance(settings, dict):
            raise EntMTPError(f"--variant {label}: the settings must be a JSON object, got {type(settings).__name__}")
        variants[label] = settings
    return variants


def run_serve_cmd(args: argparse.Namespace) -> int:
    import shlex

    from entmtp_vllm.bench import serve as bench

    datasets = [name.strip() for name in args.dataset.split(",") if name.strip()]
    if not datasets:
        raise EntMTPError("--dataset names no prompt set")
    common = dict(
        datasets=datasets,
        num_prompts=args.num_prompts,
        seed=args.seed,
        split=args.split,
        category=args.category,
        data_path=args.data_path,
        concurrency=bench.parse_int_list(args.concurrency, "--concurrency"),
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        request_seed=args.request_seed,
        ignore_eos=args.ignore_eos,
        duration=args.duration,
        chat=args.chat,
        warmup=args.warmup,
        request_timeout=args.request_timeout,
        model=args.model,
        metrics_from=args.metrics_from,
    )
    progress = not args.no_progress
    if not args.compare:
        config = bench.make_config(bench.ServeBenchConfig, base_url=args.base_url, **common)
        results = bench.run_serve_bench(config, progress=progress)
        print(bench.markdown_report(results), end="")
        if args.out:
            paths = bench.write_report(results, args.out)
            print(f"wrote {paths['json']}, {paths['markdown']}, {paths['png']}", file=sys.stderr)
        return 0
    variants = parse_variants(args.variant)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    methods += [bench.VARIANT_PREFIX + label for label in variants if bench.VARIANT_PREFIX + label not in methods]
    ngram = bench.parse_int_list(args.ngram_config, "--ngram-config")
    if len(ngram) != 3:
        raise EntMTPError("--ngram-config takes three integers: num_speculative_tokens,prompt_lookup_max,prompt_lookup_min")
    try:
        server_args = shlex.split(args.server_args)
    except ValueError as exc:
        raise EntMTPError(f"--server-args: {exc}") from None
    config = bench.make_config(
        bench.CompareConfig,
        **common,
        methods=methods,
        server_args=server_args,
        eager=args.eager,
        in_process=args.in_process,
        threads=args.server_threads,
        cpu_gemm=args.cpu_gemm,
        client=args.client,
        health_timeout=args.health_timeout,
        ngram_num_speculative_tokens=ngram[0],
        ngram_prompt_lookup_max=ngram[1],
        ngram_prompt_lookup_min=ngram[2],
        heads=args.heads,
        bank=args.bank,
        tree=args.tree,
        policy=args.policy,
        acceptance=args.acceptance,
        num_speculative_tokens=args.num_speculative_tokens,
        entmtp_config=args.entmtp_config,
        entmtp_variants=variants,
        rounds=args.rounds,
        interleave=args.interleave,
        out=args.out,
    )
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    results = bench.run_compare(config, progress=progress, log=log)
    print(bench.compare_markdown(results), end="")
    paths = bench.write_compare_report(results, results["config"]["out"])
    print(f"wrote {paths['json']}, {paths['markdown']}, {paths['png']}", file=sys.stderr)
    return 0


def run_offline_cmd(args: argparse.Namespace) -> int:
    from entmtp_vllm.bench.offline import markdown_report, run_offline, write_report
    from entmtp_vllm.bench.offline_config import OfflineBenchConfig, parse_methods

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
        cpu_gemm=args.cpu_gemm,
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
        baseline=args.baseline,
        repeats=args.repeats,
        interleave=args.interleave,
    )
    results = run_offline(config, progress=not args.no_progress)
    print(markdown_report(results), end="")
    if args.out:
        paths = write_report(results, args.out)
        print(f"wrote {paths['json']}, {paths['markdown']}, {paths['png']}", file=sys.stderr)
    check = results.get("check_equal")
    return 1 if check and check["mismatches"] else 0
