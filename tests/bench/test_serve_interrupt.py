"""A benchmark stopped by SIGTERM stops its servers (`interrupt_on_sigterm`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from entmtp_vllm.bench.serve.interrupt import SIGNALS, interrupt_on_sigterm


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_the_signal_interrupts_the_block_and_the_old_handler_comes_back(sig: int) -> None:
    before = signal.getsignal(sig)
    cleaned = []
    with pytest.raises(KeyboardInterrupt, match=signal.Signals(sig).name):
        with interrupt_on_sigterm():
            try:
                os.kill(os.getpid(), sig)
                time.sleep(5)  # the handler runs at the next bytecode: never reached
            finally:
                cleaned.append(True)
    assert cleaned == [True]
    assert signal.getsignal(sig) is before


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_terminated_run_stops_the_server_it_started(tmp_path) -> None:
    """A script that starts a server the way the comparison does (`ServerProcess`, its own
    session) and waits inside `interrupt_on_sigterm`, sent SIGTERM: the script exits and the
    server process is gone (without the handler it would outlive the script)."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from entmtp_vllm.bench.serve.interrupt import interrupt_on_sigterm
        from entmtp_vllm.bench.serve.servers import ServerProcess
        with interrupt_on_sigterm():
            server = ServerProcess([sys.executable, "-c", "import time; time.sleep(600)"], {str(tmp_path / 'server.log')!r},
                                   "http://127.0.0.1:9/v1", name="dummy")
            try:
                print(server.process.pid, flush=True)
                time.sleep(600)
            finally:
                server.stop(grace=5)
    """))
    run = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    server_pid = int(run.stdout.readline())
    assert _alive(server_pid)
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) != 0
    deadline = time.monotonic() + 10
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server_pid), "the server outlived the benchmark"
