"""``recover`` as a supervisor that belongs to the run root, not to the operator's terminal.

A real ``ckptctl recover`` runs in two processes:

* the **supervisor** (``start``): forked into a session of its own (``adapters.detach``),
  it runs the whole recovery (``ops.recover.recover``): it takes the run-root lock, starts
  and owns the job (``job.json`` names it: ``owner.pid`` is the supervisor's pid,
  ``supervisor_log`` its event log), watches and judges it, stops it on a bad verdict, a
  hang or an interrupt, writes the report and the audit record and lets go of the lock.
  It never writes to a terminal: narration, the job's lines and the end (the report, or
  the error) go to ``<log dir>/recover-<UTC>.events.jsonl``; its own stdout/stderr (a
  traceback, should ckptctl fail) to ``recover-<UTC>.log`` beside it.
* the **foreground** (``follow``): the command the operator typed. It tails the event
  log and shows it, then prints the report and exits with its code. It forwards SIGINT
  and SIGTERM to the supervisor (which stops the job and ends the recovery with
  ``interrupted_by``: exit 130/143); it ignores SIGHUP, and a write to a terminal that is
  gone is dropped (the caller's ``on_event`` swallows ``OSError``), so closing the
  terminal leaves the recovery running to its end, report and all.

Who owns the job: the supervisor, from the lock to the end of the recovery; after it
(``--detach``, Slurm: the job runs on once the watch has decided) the job is on its own,
named by ``job.json`` until a later recover finds it ended (``ops.recover_guard``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ckptctl.adapters.detach import (
    EventLog,
    exit_status,
    spawn_detached,
    unblock_signals,
)
from ckptctl.adapters.filetail import EventTail
from ckptctl.adapters.signals import Interrupts
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.plan import resolve_log_dir
from ckptctl.errors import CkptctlError
from ckptctl.ops import recover_guard as guard
from ckptctl.runroot.root import as_run_root

__all__ = ["Supervised", "follow", "start"]

EventFn = Callable[[dict[str, Any]], None]
#: How often the foreground looks at the event log (s).
POLL_S = 0.1
#: After the supervisor exits: how long to wait for its last events (s).
_LAST_EVENTS_S = 2.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Supervised:
    """A recovery running in its supervisor."""

    pid: int
    events: str
    """The event log (JSON lines)."""
    log: str
    """The supervisor's own stdout/stderr."""


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _unique(base: str) -> str:
    path, n = base, 1
    while os.path.exists(path + ".events.jsonl") or os.path.exists(path + ".log"):
        n += 1
        path = f"{base}-{n}"
    return path


def start(
    root: str,
    *,
    config: CkptctlConfig,
    replace: bool,
    logs: list[str],
    **recover_kwargs: Any,
) -> Supervised:
    """Refuse now if the run root is busy (``guard.preflight``, exit 4, nothing written); else
    start the supervisor of ``ops.recover.recover(root, config=config, logs=logs, replace=replace,
    **recover_kwargs)`` and return it. ``--logs -`` is copied to a file first (the supervisor
    has no stdin). ``NotFoundError`` when the run root does not exist (nothing started)."""
    rr = as_run_root(root)
    guard.preflight(rr, replace=replace)
    log_dir, _ = resolve_log_dir(rr.url, config.launch.log_dir)
    os.makedirs(log_dir, exist_ok=True)
    base = _unique(os.path.join(os.path.abspath(log_dir), f"recover-{_stamp()}"))
    if "-" in logs:
        copied = base + ".stdin.log"
        with open(copied, "wb") as f:
            shutil.copyfileobj(sys.stdin.buffer, f)
        logs = [copied if p == "-" else p for p in logs]
    events, own_log = base + ".events.jsonl", base + ".log"
    open(events, "ab").close()  # the foreground tails it from the start

    def body() -> int:
        return _supervise(root, events, own_log, config=config, replace=replace, logs=logs, **recover_kwargs)

    pid = spawn_detached(body, log_path=own_log)
    return Supervised(pid=pid, events=events, log=own_log)


def _supervise(root: str, events: str, own_log: str, **kwargs: Any) -> int:
    """The supervisor's main (in the child)."""
    from ckptctl.ops.recover import recover

    interrupts = Interrupts().install()
    unblock_signals()
    log = EventLog(events)
    log.write("start", pid=os.getpid(), host=socket.gethostname(), events=events, log=own_log)
    try:
        report = recover(
            root,
            on_event=lambda stage, message: log.write("event", stage=stage, message=message),
            on_output=lambda line: log.write("output", line=line),
            interrupts=interrupts,
            supervisor_log=events,
            **kwargs,
        )
    except CkptctlError as e:
        log.write("error", message=e.message, hint=e.hint, exit_code=e.exit_code)
        return e.exit_code
    except BaseException as e:
        traceback.print_exc()
        log.write("error", message=f"recover failed: {type(e).__name__}: {e}", hint=f"see {own_log}", exit_code=1)
        return 1
    finally:
        interrupts.restore()
    log.write(
        "end",
        exit_code=report.exit_code,
        report=report.to_json(),
        plan_lines=report.plan.lines() if report.plan else [],
    )
    log.close()
    return report.exit_code


@contextlib.contextmanager
def _forwarding(pid: int) -> Any:
    """In the foreground: SIGINT/SIGTERM go to the supervisor; SIGHUP is ignored."""
    previous: dict[signal.Signals, Any] = {}

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN:
            continue  # nohup / a background job: the user asked for it to be ignored
        previous[sig] = signal.signal(sig, forward)
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def follow(sup: Supervised, *, on_event: EventFn, poll_s: float = POLL_S) -> dict[str, Any]:
    """Show the supervisor's events until its end; the ``end`` (or ``error``) event.

    ``on_event`` gets every event (``start``, ``event``, ``output``); it must not raise for
    a terminal that has gone away. A supervisor that dies without an end (killed) gives an
    ``error`` event naming its log; the recovery's job, if one was started, is named by
    ``ckptctl status``.
    """
    tail = EventTail(sup.events)
    exited_at: float | None = None
    code: int | None = None
    with _forwarding(sup.pid):
        while True:
            for ev in tail.events():
                if ev.get("kind") in ("end", "error"):
                    exit_status(sup.pid, block=True)
                    return ev
                on_event(ev)
            if code is None:
                code = exit_status(sup.pid)
            if code is not None:
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > _LAST_EVENTS_S:
                    how = f"signal {code - 128}" if code > 128 else f"exit {code}"
                    return {
                        "kind": "error",
                        "exit_code": 1,
                        "message": f"the recovery supervisor (pid {sup.pid}) ended ({how}) without a report",
                        "hint": f"its log: {sup.log}; events: {sup.events}; `ckptctl status ROOT` names any job it left",
                    }
            time.sleep(poll_s)
