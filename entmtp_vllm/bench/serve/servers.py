"""The servers of a comparison: each method's `vllm serve` command line, all built on `entmtp
serve`'s command builder (`server_commands`), and a server run as a subprocess in its own
process group (`ServerProcess`: wait for `/health`, stop the whole group)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from entmtp_vllm.bench.serve.client import server_root
from entmtp_vllm.bench.serve.config import VARIANT_PREFIX, CompareConfig
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.kv_cache_size import NodeMemory, node_memory
from entmtp_vllm.serve_command import ServeCommand, ServeOptions, build_serve_command, config_object


def round_order(methods: list[str], round_index: int) -> list[str]:
    """The servers of round `round_index` (0-based): `methods` rotated left by that many places."""
    shift = round_index % len(methods)
    return methods[shift:] + methods[:shift]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ServerProcess:
    """A server started as a subprocess in its own process group, its output in a log file.

    `wait_healthy()` polls `/health`; `stop()` sends SIGINT, waits, then kills the group."""

    def __init__(self, command: list[str], log_path: Path, base_url: str, env: dict[str, str] | None = None, name: str = "server"):
        self.command = command
        self.log_path = Path(log_path)
        self.base_url = base_url
        self.name = name
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self._log.write(("$ " + shlex.join(command) + "\n").encode())
        self._log.flush()
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )

    def _died(self, what: str) -> EntMTPError:
        return EntMTPError(
            f"{self.name} server {what}; its log is {self.log_path}. Last lines:\n{log_tail(self.log_path)}"
        )

    def wait_healthy(self, timeout: float = 600.0, poll: float = 1.0) -> None:
        import httpx

        url = server_root(self.base_url) + "/health"
        deadline = time.monotonic() + timeout
        while True:
            code = self.process.poll()
            if code is not None:
                raise self._died(f"exited with status {code} before answering {url}")
            try:
                if httpx.get(url, timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise self._died(f"did not answer {url} within {timeout:g} s (stopped)")
            time.sleep(poll)

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGINT, up to `grace` seconds to exit, then SIGKILL to the whole process group."""
        process = self.process
        if process.poll() is None:
            try:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        try:  # children (the engine core, its workers) left behind
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if not self._log.closed:
            self._log.close()
        return process.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _entmtp_command(config: CompareConfig, model: str, variant: dict[str, Any] | None = None,
                    memory: NodeMemory | None = None) -> ServeCommand:
    """`vllm serve` with EntMTP, built by `entmtp serve`'s own command builder; `variant`:
    settings laid over `config.entmtp_config` (one of `config.entmtp_variants`)."""
    settings: str | dict[str, Any] | None = config.entmtp_config
    if variant is not None:
        settings = {**config_object(config.entmtp_config), **variant}
    return build_serve_command(
        ServeOptions(
            model=model, heads=config.heads, bank=config.bank, tree=config.tree, policy=config.policy,
            acceptance=config.acceptance, config=settings,
            num_speculative_tokens=config.num_speculative_tokens, eager=config.eager,
            in_process=config.in_process, threads=config.threads, cpu_gemm=config.cpu_gemm, vllm_args=list(config.server_args),
        ),
        memory=memory,
    )


def entmtp_commands(config: CompareConfig, model: str) -> dict[str, ServeCommand]:
    """The EntMTP servers of a comparison by method (`entmtp`, then `entmtp-LABEL` per variant),
    every setting checked before any server starts. The machine's memory is read once, so every
    server gets the same KV cache size; with `interleave` the servers are up together, so each
    is sized for its share of that memory."""
    memory = node_memory() if config.entmtp_variants or config.interleave else None
    if config.interleave:
        memory = replace(memory, available=memory.available // len(config.methods))
    commands = {"entmtp": _entmtp_command(config, model, memory=memory)}
    for label, variant in config.entmtp_variants.items():
        try:
            commands[VARIANT_PREFIX + label] = _entmtp_command(config, model, variant, memory)
        except EntMTPError as exc:
            raise EntMTPError(f"--variant {label}: {exc}") from None
    return commands


def _strip_option(command: list[str], option: str) -> list[str]:
    out, skip = [], False
    for part in command:
        if skip:
            skip = False
            continue
        if part == option:
            skip = True
            continue
        if part.startswith(option + "="):
            continue
        out.append(part)
    return out


def server_commands(config: CompareConfig, entmtp: ServeCommand, host: str, port: int,
                    variants: dict[str, ServeCommand] | None = None) -> dict[str, ServeCommand]:
    """The command line of each method's server. All share one base (the EntMTP command
    without its speculation options), so model, dtype, eager, KV cache size, process layout and
    extra arguments are identical; `variants`: the `entmtp-LABEL` servers (`entmtp_commands`)."""
    plain = _strip_option(_strip_option(entmtp.argv, "--speculative-config"), "--additional-config")
    ngram = plain + [
        "--speculative-config",
        json.dumps(
            {
                "method": "ngram",
                "num_speculative_tokens": config.ngram_num_speculative_tokens,
                "prompt_lookup_max": config.ngram_prompt_lookup_max,
                "prompt_lookup_min": config.ngram_prompt_lookup_min,
            }
        ),
    ]
    where = ["--host", host, "--port", str(port)]
    commands = {"vllm": plain + where, "ngram": ngram + where, "entmtp": entmtp.argv + where}
    commands.update({method: built.argv + where for method, built in (variants or {}).items()})
    return {method: ServeCommand(commands[method], dict(entmtp.env), list(entmtp.notes)) for method in config.methods}


@dataclass
class MethodServer:
    """One method's server of a comparison, started and healthy."""

    method: str
    command: ServeCommand
    """What was started: its arguments and the variables set on top of the environment."""
    process: ServerProcess
    base_url: str
    metrics_dir: str
    """The server's `PROMETHEUS_MULTIPROC_DIR`, removed by `stop`."""

    def stop(self) -> None:
        self.process.stop()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def record(self, levels: list[dict[str, Any]], served_model: str) -> dict[str, Any]:
        """The comparison's record of this server: what ran, its log, its levels."""
        return {"command": self.command.argv, "env": self.command.env, "log": str(self.process.log_path),
                "levels": levels, "served_model": served_model}


def start_server(config: CompareConfig, entmtp: dict[str, ServeCommand], method: str, log_path: Path, log) -> MethodServer:
    """Start `method`'s server (`server_commands`) on a free port with a Prometheus folder of its
    own and wait until it answers `/health`; when it does not, nothing is left running."""
    port = free_port(config.host)
    built = server_commands(config, entmtp["entmtp"], config.host, port, variants=entmtp)[method]
    base_url = f"http://{config.host}:{port}/v1"
    metrics_dir = tempfile.mkdtemp(prefix=f"entmtp-prometheus-{method}-")
    env = {**os.environ, **built.env, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    log(f"[{method}] starting: {built.shell()}  (log: {log_path})")
    started = time.monotonic()
    try:
        process = ServerProcess(built.argv, log_path, base_url, env=env, name=method)
    except BaseException:
        shutil.rmtree(metrics_dir, ignore_errors=True)
        raise
    server = MethodServer(method, built, process, base_url, metrics_dir)
    try:
        process.wait_healthy(config.health_timeout)
    except BaseException:
        server.stop()
        raise
    log(f"[{method}] healthy after {time.monotonic() - started:.0f} s")
    return server
