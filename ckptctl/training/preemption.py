"""Preemption notices: turn SIGTERM (or a configured signal) into an emergency checkpoint.

A scheduler that preempts a job sends SIGTERM (Kubernetes, SLURM's ``scancel``,
spot-instance agents; SIGUSR1 with Slurm's ``--signal=USR1@<grace>``) and kills it
after a grace period. The handler here only records the signal; the checkpointer
acts on it at the next step boundary, where the model, optimizer and data
position agree with each other, and where every rank can agree (one all-reduce)
that some rank was told to stop. It then writes a synchronous checkpoint and
exits with ``PREEMPTED_EXIT_CODE``.

The signal rule (docs/training.md, "Preemption"):

* **One preemption, however it is delivered.** A scheduler signals every process
  of the job and torchrun forwards the signal to its workers too, so a worker sees
  the notice two or more times within milliseconds. Every delivery of a
  preemption signal (the same or another one) within ``grace_s`` of the first is
  the same preemption: counted in ``deliveries``, and the save goes on.
* **Abort, explicitly.** SIGINT while a preemption is pending (Ctrl-C, ``kill
  -INT``; torchrun forwards it) ends the process at once, killed by SIGINT, without
  the checkpoint. SIGINT with no preemption pending is left to the previous handler
  (Python's ``KeyboardInterrupt``); an ignored SIGINT (a shell's background job) stays
  ignored. The first preemption signal delivered again more
  than ``grace_s`` after its first delivery also ends the process at once, killed
  by that signal (the save has outlasted any scheduler's grace). Another
  preemption signal late (Slurm's SIGTERM at the time limit after its SIGUSR1
  warning) is still the same preemption. SIGKILL always works.

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
import time
from collections.abc import Iterable
from types import FrameType
from typing import Any

#: Exit status after an emergency checkpoint: sysexits' EX_TEMPFAIL, "temporary
#: failure, retry later". Distinct from a crash (1), a signal death (128+N) and a
#: clean finish (0), so a supervisor can tell "preempted, checkpoint saved" apart.
PREEMPTED_EXIT_CODE = 75
#: Deliveries of a preemption signal within this many seconds of the first are one preemption:
#: the common grace before SIGKILL (Slurm's default KillWait, Kubernetes'
#: terminationGracePeriodSeconds, torchrun's shutdown timeout).
DEFAULT_PREEMPTION_GRACE_S = 30.0
#: The signal that aborts a pending preemption (the process dies of it, without the checkpoint).
ABORT_SIGNAL = signal.SIGINT
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
    """Records the first preemption signal received; ``close()`` restores the previous handlers.

    See the module's docstring for the rule: repeated deliveries within ``grace_s`` are one
    preemption; ``ABORT_SIGNAL`` while one is pending, or the first signal again after
    ``grace_s``, ends the process at once.
    """

    def __init__(
        self,
        signals: Iterable[int | signal.Signals],
        *,
        grace_s: float = DEFAULT_PREEMPTION_GRACE_S,
    ) -> None:
        if not grace_s >= 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s!r}")
        self.grace_s = float(grace_s)
        self._received: int | None = None
        self._received_at = 0.0
        self._deliveries = 0
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
        # An ignored SIGINT stays ignored (a background job of a shell script: `cmd &`).
        if nums and int(ABORT_SIGNAL) not in nums and signal.getsignal(ABORT_SIGNAL) != signal.SIG_IGN:
            self._previous[int(ABORT_SIGNAL)] = signal.signal(ABORT_SIGNAL, self._handle_abort)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        self._deliveries += 1
        if self._received is None:
            self._received = signum
            self._received_at = now
            return
        if signum == self._received and now - self._received_at > self.grace_s:
            self._die(signum)  # asked again after the grace: stop waiting for a step boundary
        # else: the same preemption delivered again (scheduler + torchrun): the save goes on

    def _handle_abort(self, signum: int, frame: FrameType | None) -> None:
        if self._received is not None:
            self._die(signum)
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)  # Python's default: KeyboardInterrupt
        else:
            self._die(signum)  # SIG_DFL (or None: set outside Python): what it would have done

    def _die(self, signum: int) -> None:
        """End the process now, killed by ``signum`` (its default action)."""
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    @property
    def received(self) -> int | None:
        """The signal number received, or None."""
        return self._received

    @property
    def deliveries(self) -> int:
        """How many times a preemption signal arrived (one preemption however many)."""
        return self._deliveries

    def close(self) -> None:
        for num, previous in self._previous.items():
            # ValueError/OSError: not the main thread, or the interpreter is shutting down
            with contextlib.suppress(ValueError, OSError):
                signal.signal(num, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
