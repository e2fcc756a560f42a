"""`entmtp serve`: start `vllm serve` with EntMTP, after checking the EntMTP settings.

It builds the two JSON options vLLM needs (`--speculative-config` naming the EntMTP proposer,
`--additional-config` with the EntMTP settings), validates them (one-line errors, before vLLM
starts), prints the equivalent raw command, then execs it. Anything after `--` goes to
`vllm serve` unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.model_store import resolve_model
from entmtp_vllm.vllm_plugin.config import (
    ADDITIONAL_CONFIG_KEY,
    PROPOSER_CLASS,
    heads_folder,
    parse_config,
    resolve,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a model with vLLM and EntMTP tree speculation (OpenAI-compatible)",
        description="Validate the EntMTP settings, print the equivalent `vllm serve` command and run it. "
        "Arguments after `--` are passed to `vllm serve` as they are. "
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
                        help="pass --enforce-eager (default on: startup is much faster on CPU)")
    parser.add_argument("--uniproc", action=argparse.BooleanOptionalAction, default=True,
                        help="pass --distributed-executor-backend uni: the worker runs inside vLLM's engine-core "
                        "process (on CPU vLLM otherwise starts it as another process, and every speculative step "
                        "pays extra round trips to it); left out when the vLLM arguments choose an executor or "
                        "more than one device (default on)")
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit")
    parser.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then extra `vllm serve` arguments")
    parser.set_defaults(func=run)


def build_command(args: argparse.Namespace) -> list[str]:
    """The `vllm serve` command line for these arguments (validated)."""
    settings: dict = {}  # only what differs from the plugin's defaults
    for key in ("bank", "heads", "tree", "policy", "acceptance"):
        value = getattr(args, key)
        if value is not None:
            settings[key] = str(Path(value).resolve()) if key in ("bank", "heads") and Path(value).exists() else value
    if args.config:
        try:
            extra = json.loads(args.config)
        except json.JSONDecodeError as exc:
            raise EntMTPError(f"--config (bench serve: --entmtp-config): invalid JSON ({exc.msg})") from None
        if not isinstance(extra, dict):
            raise EntMTPError(f"--config (bench serve: --entmtp-config) must be a JSON object, got {type(extra).__name__}")
        settings.update(extra)
    resolved = resolve(parse_config(settings))
    needed = resolved.bank.max_nodes - 1
    num_spec = args.num_speculative_tokens if args.num_speculative_tokens is not None else needed
    resolve(parse_config(settings), num_spec)  # too small a budget: a one-line error now
    heads_folder(parse_config(settings))
    executable = Path(sys.executable).with_name("vllm")
    vllm = str(executable) if executable.exists() else (shutil.which("vllm") or "vllm")
    command = [
        vllm, "serve", resolve_model(args.model),
        "--speculative-config", json.dumps({"model": PROPOSER_CLASS, "num_speculative_tokens": num_spec}),
    ]
    if settings:
        command += ["--additional-config", json.dumps({ADDITIONAL_CONFIG_KEY: settings})]
    if args.dtype:
        command += ["--dtype", args.dtype]
    if args.eager:
        command.append("--enforce-eager")
    extra = list(args.vllm_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if args.uniproc and not _chooses_executor(extra):
        command += ["--distributed-executor-backend", "uni"]
    return command + extra


EXECUTOR_OPTIONS = ("--distributed-executor-backend", "--tensor-parallel-size", "-tp",
                    "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp")


def _chooses_executor(vllm_args: list[str]) -> bool:
    """Whether extra `vllm serve` arguments pick an executor or more than one device."""
    return any(arg.split("=", 1)[0] in EXECUTOR_OPTIONS for arg in vllm_args)


def run(args: argparse.Namespace) -> int:
    command = build_command(args)
    print(shlex.join(command), flush=True)
    if args.dry_run:
        return 0
    if not Path(command[0]).exists() and shutil.which(command[0]) is None:
        raise EntMTPError("the `vllm` command is not installed: run `make setup` (CPU) or `pip install 'entmtp-vllm[gpu]'`")
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        # The entmtp_ counters live in the engine process; with a multiprocess directory
        # vLLM's /metrics aggregates every process's series (entmtp_vllm/vllm_plugin/metrics.py).
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="entmtp-prometheus-")
    os.execv(command[0] if Path(command[0]).exists() else shutil.which(command[0]), command)
    return 0  # not reached
