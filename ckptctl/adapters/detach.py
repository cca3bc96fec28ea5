"""Run a function in a child process that belongs to no terminal, and an event log to talk through.

``spawn_detached(body, log_path)`` forks; the child starts a session of its own (no
controlling terminal: a closed ssh session, a SIGHUP or a Ctrl-C typed at the terminal
never reach it), reads ``/dev/null``, writes its stdout/stderr to ``log_path``, runs
``body()`` and exits with its return value. SIGINT and SIGTERM are blocked around the
fork: the child installs its own handlers (``body`` does, first thing) before any signal
can reach it, so a signal sent right after the start is handled, never fatal.

``EventLog`` is the channel: the child appends one JSON object per line (flushed: a
reader sees it at once; it also stays in the run root's logs); ``adapters.filetail.EventTail`` reads the
lines a reader has not seen yet, only whole ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from typing import IO, Any

__all__ = ["EventLog", "exit_status", "spawn_detached", "unblock_signals"]

_BLOCKED = {signal.SIGINT, signal.SIGTERM}


def spawn_detached(body: Callable[[], int], *, log_path: str) -> int:
    """Fork ``body`` into a new session (module docstring); returns the child's pid."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return pid
    code = 1
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(devnull)
        os.close(out)
        code = body()  # installs its signal handlers first; they are unblocked below, by body
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def unblock_signals() -> None:
    """The child, once its handlers are installed: let SIGINT/SIGTERM in (pending ones arrive now)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _BLOCKED)


def exit_status(pid: int, *, block: bool = False) -> int | None:
    """The exit code of our child ``pid`` once it has ended (128+N for a signal); None while it runs."""
    try:
        got, status = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return -1  # not our child, or reaped already
    if got == 0:
        return None
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


class EventLog:
    """Append-only JSON lines, flushed one by one (module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._f: IO[bytes] | None = open(path, "ab")  # noqa: SIM115 - closed in close()

    def write(self, kind: str, **data: Any) -> None:
        f = self._f
        if f is None:
            return
        doc = {"t": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
               "kind": kind, **data}
        try:
            f.write(json.dumps(doc, ensure_ascii=True, default=str).encode() + b"\n")
            f.flush()
        except (OSError, ValueError):
            self._f = None  # a full or lost disk must not stop the supervision itself

    def close(self) -> None:
        if self._f is not None:
            with contextlib.suppress(OSError):
                self._f.close()
            self._f = None
