"""`entmtp serve`: start `vllm serve` with EntMTP, after checking the EntMTP settings.

The command is built by `entmtp_vllm.serve_command` (the two JSON options vLLM needs, validated
with one-line errors before vLLM starts; on CPU `--enforce-eager` and a KV cache sized for this
machine). This module only parses, prints the defaults it chose and the equivalent raw command,
then execs it. Anything after `--` goes to `vllm serve` unchanged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from pydantic import ValidationError

from entmtp_vllm.config import CPU_IN_PROCESS, CPU_THREADS
from entmtp_vllm.errors import EntMTPError, flag_problem
from entmtp_vllm.serve_command import ServeOptions, build_serve_command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a model with vLLM and EntMTP tree speculation (OpenAI-compatible)",
        description="Validate the EntMTP settings, print the equivalent `vllm serve` command and run it. "
        "Arguments after `--` are passed to `vllm serve` as they are. "
        "On CPU, unless those arguments (or VLLM_CPU_KVCACHE_SPACE) give a size, the KV cache is sized for "
        "this machine (--kv-cache-memory-bytes: half the memory available on the worker's NUMA node, at most "
        "16 sequences of --max-model-len), since vLLM's CPU worker otherwise requires 92% of that node free; "
        "a size the machine cannot hold is refused in one line. "
        "Sets PROMETHEUS_MULTIPROC_DIR (a fresh folder) when unset, so that /metrics shows the "
        "entmtp_ series counted in the engine process.",
    )
    parser.add_argument("--model", default=None, help="model folder or hub id (default: the embedded SmolLM2)")
    parser.add_argument("--heads", default=None, help="heads folder (default: the shipped Hydra heads)")
    parser.add_argument("--bank", default=None, help="bank file, choices JSON or tree shape such as lookup:4+chain:1 "
                        "(default: the shipped vLLM bank: a prompt-lookup chain whenever the context's last tokens "
                        "occurred before, else Hydra heads 1-2)")
    parser.add_argument("--tree", default=None, help="keep only this tree of the bank")
    parser.add_argument("--policy", default=None, help="policy string, e.g. hysteresis:0.6:small,big (default: the bank's)")
    parser.add_argument("--acceptance", choices=("greedy", "typical", "lossless"), default=None,
                        help="acceptance rule for sampled requests (default lossless)")
    parser.add_argument("--config", default=None, metavar="JSON",
                        help="further EntMTP settings as a JSON object, applied over the options above, e.g. "
                        "'{\"batch_fallback\": null}' (keys: see EntMTPConfig in entmtp_vllm/vllm_plugin/config.py)")
    parser.add_argument("--num-speculative-tokens", type=int, default=None,
                        help="vLLM's draft budget per request (default: the largest tree's nodes minus the root)")
    parser.add_argument("--dtype", default=None, help="model dtype passed to vLLM (e.g. bfloat16, float32)")
    parser.add_argument("--eager", action=argparse.BooleanOptionalAction, default=True,
                        help="on CPU, pass --enforce-eager (start-up is much faster); never on a GPU, where vLLM's "
                        "default compilation applies (default on)")
    parser.add_argument("--in-process", action=argparse.BooleanOptionalAction, default=CPU_IN_PROCESS,
                        help="on CPU, run vLLM's worker inside its engine core's process, two processes instead "
                        "of three (VLLM_ENABLE_V1_MULTIPROCESSING=0 and --distributed-executor-backend uni; vLLM's "
                        "CPU platform turns uni alone back into its multiprocess executor): on a 2-core machine every "
                        "server served 1.3-1.5x the tokens a second this way. Left out when the vLLM arguments "
                        "choose an executor or several devices; --no-in-process: vLLM's own layout (default on)")
    parser.add_argument("--threads", type=int, default=CPU_THREADS, metavar="N",
                        help="on CPU with --in-process, torch's threads in the engine core's process "
                        "(OMP_NUM_THREADS; vLLM alone would use 1 there). Default: every core this process may run "
                        "on, unless OMP_NUM_THREADS is set; on a 2-core machine 2 threads served more tokens a second "
                        "than 1 with and without speculation")
    parser.add_argument("--cpu-gemm", choices=("packed", "vllm"), default=None,
                        help="on CPU, the linear layers' matrix multiply: packed (EntMTP's kernel: a step verifying "
                        "a few tokens costs little more than one token; float32 only) or vllm (vLLM's own, oneDNN). "
                        "Default: packed when the model runs in float32 and the kernel builds here (it needs a C++ "
                        "compiler and AVX2 + FMA), else vllm")
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit")
    parser.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then extra `vllm serve` arguments")
    parser.set_defaults(func=run)


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    """The typed options of a parsed `entmtp serve` command line (a value out of range: one line
    naming the flag)."""
    try:
        return _options(args)
    except ValidationError as exc:
        name, flag, problem = flag_problem(exc)
        raise EntMTPError(f"{flag}: {problem} (got {getattr(args, name, None)!r})") from None


def _options(args: argparse.Namespace) -> ServeOptions:
    return ServeOptions(
        model=args.model, heads=args.heads, bank=args.bank, tree=args.tree, policy=args.policy,
        acceptance=args.acceptance, config=args.config, num_speculative_tokens=args.num_speculative_tokens,
        dtype=args.dtype, eager=args.eager, in_process=args.in_process, threads=args.threads,
        cpu_gemm=args.cpu_gemm, vllm_args=list(args.vllm_args),
    )


def run(args: argparse.Namespace) -> int:
    built = build_serve_command(options_from_args(args))
    for note in built.notes:
        print(f"# {note}", flush=True)
    print(built.shell(), flush=True)
    if args.dry_run:
        return 0
    command = built.argv
    if not Path(command[0]).exists() and shutil.which(command[0]) is None:
        raise EntMTPError("the `vllm` command is not installed: run `make setup` (CPU) or `pip install -e '.[gpu]'` in this checkout")
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        # The entmtp_ counters live in the engine process; with a multiprocess directory
        # vLLM's /metrics aggregates every process's series (entmtp_vllm/vllm_plugin/metrics.py).
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="entmtp-prometheus-")
    os.execve(command[0] if Path(command[0]).exists() else shutil.which(command[0]), command,
              {**os.environ, **built.env})
    return 0  # not reached
