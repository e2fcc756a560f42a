"""vLLM's own load generator kept running between benchmarks (`VllmBenchProcess`).

`vllm bench serve` spends ~15 s importing vLLM before it sends a request; an interleaved
comparison (`interleave.py`) runs it once per turn and server, dozens of times. This process
imports vLLM's benchmark once and runs each request through the same code the command runs
(`vllm.benchmarks.serve.add_cli_args` to parse, `main` to run), so the numbers are still vLLM's
client's. Protocol: one JSON line in (`{"argv": [...], "log": path}`, the arguments after
`vllm bench serve`), one JSON line out (`{"ok": true, "cpu_s": seconds}` or `{"ok": false,
"error": ...}`; `cpu_s`: the CPU time, user + system, every thread, the run took in this
process); each run's printed output goes to its log file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from entmtp_vllm.errors import EntMTPError


class VllmBenchProcess:
    """One long-lived Python process running `vllm bench serve`'s benchmark on request."""

    def __init__(self, log_path: Path):
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from entmtp_vllm.bench.serve.vllm_bench_process import serve_requests; serve_requests()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True,
        )

    def run(self, argv: list[str], log_path: Path) -> float:
        """`vllm bench serve ARGV`, its printed output in `log_path`; the CPU seconds the client
        took for it; an `EntMTPError` if it fails."""
        self.process.stdin.write(json.dumps({"argv": argv, "log": str(log_path)}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise EntMTPError(f"vLLM's benchmark process ended (exit {self.process.wait()}); its log is {self.log_path}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise EntMTPError(f"vllm bench serve {' '.join(argv[:4])} ... failed: {answer['error']} (output: {log_path})")
        return float(answer["cpu_s"])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> "VllmBenchProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serve_requests() -> None:
    """The process's side: read requests from stdin until it closes, answer each on stdout."""
    import contextlib
    import time
    import traceback

    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        with open(request["log"], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                started = time.process_time()
                main(parser.parse_args(request["argv"]))
                answer = {"ok": True, "cpu_s": time.process_time() - started}
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported to the caller
                traceback.print_exc()
                said = " ".join(str(exc).split())  # one line, however the exception wrote it
                answer = {"ok": False, "error": f"{type(exc).__name__}: {said[:300]}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
