"""Slurm's SIGUSR1 warning reaches ckptctl.training through CKPTCTL_PREEMPTION_SIGNALS."""

from __future__ import annotations

import os
import signal

import pytest

from ckptctl.training.preemption import PREEMPTION_SIGNALS_ENV, PreemptionWatcher, signals_from_env


@pytest.mark.parametrize(
    "value, want",
    [("USR1", [signal.SIGUSR1]), ("SIGUSR1, usr2", [signal.SIGUSR1, signal.SIGUSR2]), ("", []), ("NOPE,USR1,USR1", [signal.SIGUSR1])],
)
def test_signals_from_env(value: str, want: list[int]) -> None:
    assert signals_from_env(value) == [int(s) for s in want]


def test_the_watcher_adds_the_env_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREEMPTION_SIGNALS_ENV, "USR1")
    before = signal.getsignal(signal.SIGUSR1)
    w = PreemptionWatcher([signal.SIGTERM])
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert w.received == signal.SIGUSR1
    finally:
        w.close()
    assert signal.getsignal(signal.SIGUSR1) == before
    off = PreemptionWatcher([])  # a trainer that asked for no preemption handling gets none
    assert signal.getsignal(signal.SIGUSR1) == before
    off.close()
