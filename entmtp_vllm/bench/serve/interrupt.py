"""SIGTERM (and SIGHUP) stop a benchmark the way Ctrl-C does, so that its servers are stopped.

A comparison starts each vLLM server in a process group of its own (`start_new_session`); killed
by SIGTERM's default action, the benchmark would exit without running the `finally` blocks that
stop them, and every server (its engine core busy-polling a core) would keep running. A job
started in the background by a non-interactive shell also ignores SIGINT, so SIGTERM is how such
a job is stopped.

    with interrupt_on_sigterm():
        ...   # SIGTERM / SIGHUP here raise KeyboardInterrupt; the previous handlers come back after
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread (elsewhere
    signals cannot be handled: nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
