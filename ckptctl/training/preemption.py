"""Preemption notices: turn SIGTERM (or a configured signal) into an emergency checkpoint.

A scheduler that preempts a job sends SIGTERM (Kubernetes, SLURM with
``--signal``, spot-instance agents) and kills it after a grace period. The
handler here only records the signal; the checkpointer acts on it at the next
step boundary, where the model, optimizer and data position agree with each
other, and where every rank can agree (one all-reduce) that some rank was told
to stop. It then writes a synchronous checkpoint and exits with
``PREEMPTED_EXIT_CODE``.

A second delivery of the same signal while the first is pending restores the
previous handler and re-delivers it: an operator who sends SIGTERM twice gets
the default behaviour (immediate termination), not a wait.

Slurm: ``#SBATCH --signal=USR1@<grace>`` sends SIGUSR1 before the time limit.
The batch script that ``ckptctl recover``'s slurm backend writes sets
``CKPTCTL_PREEMPTION_SIGNALS=USR1``; every watcher adds the signals named there
(comma-separated names, with or without ``SIG``), so a trainer that asks for
SIGTERM only also checkpoints on Slurm's warning.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

#: Exit status after an emergency checkpoint: sysexits' EX_TEMPFAIL, "temporary
#: failure, retry later". Distinct from a crash (1), a signal death (128+N) and a
#: clean finish (0), so a supervisor can tell "preempted, checkpoint saved" apart.
PREEMPTED_EXIT_CODE = 75
#: Extra preemption signals for every watcher, e.g. ``USR1`` (set by ckptctl's Slurm batch script).
PREEMPTION_SIGNALS_ENV = "CKPTCTL_PREEMPTION_SIGNALS"


def signals_from_env(value: str | None = None) -> list[int]:
    """The signals ``CKPTCTL_PREEMPTION_SIGNALS`` names (``USR1,SIGUSR2``); unknown names are ignored."""
    text = os.environ.get(PREEMPTION_SIGNALS_ENV, "") if value is None else value
    out: list[int] = []
    for word in text.replace(" ", ",").split(","):
        name = word.strip().upper()
        if not name:
            continue
        sig = getattr(signal, name if name.startswith("SIG") else f"SIG{name}", None)
        if isinstance(sig, signal.Signals) and int(sig) not in out:
            out.append(int(sig))
    return out


class PreemptedExit(SystemExit):
    """Raised after an emergency checkpoint; exits the process with ``PREEMPTED_EXIT_CODE``."""

    def __init__(self, *, signal_name: str, step: int, checkpoint: str | None) -> None:
        super().__init__(PREEMPTED_EXIT_CODE)
        self.signal_name = signal_name
        self.step = step
        self.checkpoint = checkpoint


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class PreemptionWatcher:
    """Records the first preemption signal received; ``close()`` restores the previous handlers."""

    def __init__(self, signals: Iterable[int | signal.Signals]) -> None:
        self._received: int | None = None
        self._previous: dict[int, Any] = {}
        nums = [int(s) for s in signals]
        if nums:  # a watcher asked for nothing stays off; else the scheduler's warning joins in
            nums += [n for n in signals_from_env() if n not in nums]
        if nums and threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "preemption signal handlers can only be installed from the main thread"
            )
        for num in nums:
            self._previous[num] = signal.signal(num, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._received is not None and signum == self._received:
            # Asked twice: stop waiting for a step boundary.
            previous = self._previous.get(signum, signal.SIG_DFL)
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self._received is None:
            self._received = signum

    @property
    def received(self) -> int | None:
        """The signal number received, or None."""
        return self._received

    def close(self) -> None:
        for num, previous in self._previous.items():
            # ValueError/OSError: not the main thread, or the interpreter is shutting down
            with contextlib.suppress(ValueError, OSError):
                signal.signal(num, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
