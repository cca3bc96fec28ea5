"""The operator's signals to a process that supervises a job (recover's supervisor).

``Interrupts.install()`` (main thread) records SIGINT and SIGTERM instead of raising
them, so whatever runs is never cut in the middle of a rename or an audit append: the
supervisor looks at ``first``/``count`` at its safe points (between runbook steps,
every poll while it follows the job) and acts: stop the job, write the report with
``interrupted_by``. A second signal asks for no more grace (``count >= 2``). SIGHUP is
ignored: the supervisor has no terminal, and a hung-up terminal is not a request to stop.
``sleep`` wakes up early when a signal arrives.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any

__all__ = ["RECORDED_SIGNALS", "Interrupts"]

#: Signals that mean "stop" (recorded); SIGHUP is ignored.
RECORDED_SIGNALS: tuple[int, ...] = (int(signal.SIGINT), int(signal.SIGTERM))


class Interrupts:
    """Signals received, in order (see the module docstring)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._event = threading.Event()
        self._previous: dict[int, Any] = {}

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None

    @property
    def count(self) -> int:
        return len(self.received)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        self._event.set()

    def install(self) -> Interrupts:
        """Record SIGINT/SIGTERM and ignore SIGHUP until ``restore()`` (main thread only: elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in RECORDED_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        hup = getattr(signal, "SIGHUP", None)
        if hup is not None:
            self._previous[int(hup)] = signal.signal(hup, signal.SIG_IGN)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when a signal arrives meanwhile."""
        deadline = time.monotonic() + max(0.0, seconds)
        seen = self.count
        while self.count == seen:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._event.wait(min(left, 0.5))
            self._event.clear()
