"""One `entmtp serve` for a test module: the real CLI, float32, on a free local port, with the
`entmtp_` series at `/metrics`; stopped (SIGTERM, waited for) when the module is done."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

STARTUP_TIMEOUT_S = 900  # 1-3 minutes on an idle 2-core machine; much more when it is shared


def entmtp_command() -> list[str]:
    script = Path(sys.executable).with_name("entmtp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "entmtp_vllm.cli.main"]


@contextmanager
def entmtp_server(folder: Path, model_path: str, front_door: list[str], drop_env: tuple[str, ...] = ()):
    """(base_url, server log) of `entmtp serve --model MODEL --dtype float32 FRONT_DOOR -- ...`,
    healthy, with `drop_env` removed from its environment."""
    from entmtp_vllm.bench.serve import ServerProcess, free_port

    port = free_port()
    prometheus = folder / "prometheus"
    prometheus.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(prometheus)}
    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING",) + drop_env:  # the front door chooses the layout
        env.pop(name, None)
    command = entmtp_command() + [
        "serve", "--model", model_path, "--dtype", "float32", *front_door,
        "--", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "1024", "--seed", "0",
    ]
    base_url = f"http://127.0.0.1:{port}/v1"
    log = folder / "server.log"
    process = ServerProcess(command, log, base_url, env=env, name="entmtp serve " + " ".join(front_door))
    try:
        process.wait_healthy(STARTUP_TIMEOUT_S)
        yield base_url, log
    finally:
        process.stop()
