"""Stopping a long job cleanly: SIGTERM ends it at the next safe point instead of killing it."""

from __future__ import annotations

import signal
import threading


class StopOnSigterm:
    """While training, SIGTERM (a job being stopped) ends the run after the current step with a
    checkpoint, instead of killing it up to `ckpt_interval` steps after the last one; the previous
    handler comes back afterwards. Only in the main thread (where Python delivers signals)."""

    def __enter__(self) -> "StopOnSigterm":
        self.signal: int | None = None
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._stop)
        return self

    def _stop(self, signum: int, frame) -> None:
        self.signal = signum

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
