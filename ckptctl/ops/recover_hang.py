"""While recover follows a relaunched job: the operator's interrupts and the hang check.

``AttemptGuard`` is the ``StopCheck`` the backend asks every poll (``backends.base``):

* a SIGINT/SIGTERM the supervisor received (``adapters.signals.Interrupts``) -> stop the
  job (``interrupted_by``; a second signal: no grace);
* the job hangs (``core.recover.progress``: no first step within the start deadline, no
  new step within the progress timeout) -> gather the evidence while the job still runs
  (``collect_evidence``), then stop it (``cause: hang``).

Every line the job prints goes through ``feed`` (its arrival time is what the progress
rule reads). The evidence (``core.recover.evidence``): the last step per rank, the last
output lines, torch's flight-recorder dumps when enabled, and a Python stack dump of each
rank that armed one (``ckptctl.training.stackdump``: SIGUSR2 to exactly those pids, on
this host).
"""

from __future__ import annotations

import glob
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from ckptctl.adapters.signals import Interrupts
from ckptctl.backends.base import StopRequest
from ckptctl.core.launch.plan import signal_name
from ckptctl.core.recover.evidence import ArmedDump, flight_recorder, suspects
from ckptctl.core.recover.progress import Hang, ProgressTracker

#: Output lines kept for the evidence.
LAST_LINES = 40
#: How long to wait for the stack dumps to be written (s).
STACK_WAIT_S = 3.0
#: At most this much of each dump file is kept in the report.
STACK_KEEP_BYTES = 16 * 1024


class AttemptGuard:
    """The ``StopCheck`` of one attempt (module docstring)."""

    def __init__(
        self,
        *,
        tracker: ProgressTracker,
        interrupts: Interrupts | None,
        stack_dir: str | None,
        job_env: Mapping[str, str],
        on_hang: Callable[[Hang, dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.tracker = tracker
        self.interrupts = interrupts
        self.stack_dir = stack_dir
        self.job_env = job_env
        self.on_hang = on_hang
        self.clock = clock
        self.started_wall = wall()
        self.last_lines: deque[str] = deque(maxlen=LAST_LINES)
        self.hang: Hang | None = None
        self.evidence: dict[str, Any] | None = None
        self._asked_signals = 0

    def feed(self, line: str) -> None:
        self.last_lines.append(line[:2000])
        self.tracker.feed(line, self.clock())

    def __call__(self, running: bool) -> StopRequest | None:
        ints = self.interrupts
        if ints is not None and ints.count > self._asked_signals:
            self._asked_signals = ints.count
            first = ints.first
            assert first is not None
            return StopRequest(
                reason=f"ckptctl received {signal_name(first)}",
                interrupted_by=first,
                force=ints.count >= 2,
            )
        now = self.clock()
        if running:
            self.tracker.running(now)
        if self.hang is not None:
            return None
        hang = self.tracker.check(now)
        if hang is None:
            return None
        self.hang = hang
        self.evidence = collect_evidence(self, hang)
        if self.on_hang is not None:
            self.on_hang(hang, self.evidence)
        return StopRequest(reason=hang.reason, cause="hang")


def _armed(stack_dir: str) -> list[ArmedDump]:
    out = []
    for path in sorted(glob.glob(os.path.join(glob.escape(stack_dir), "armed-*.json"))):
        try:
            with open(path, "rb") as f:
                data = f.read(4096)
        except OSError:
            continue
        rec = ArmedDump.parse(os.path.basename(path), data)
        if rec is not None:
            out.append(rec)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def _stack_dumps(stack_dir: str | None) -> tuple[list[dict[str, Any]], list[ArmedDump]]:
    """Signal every armed process on this host, wait for its dump; (dumps, armed but gone)."""
    if not stack_dir or not os.path.isdir(stack_dir):
        return [], []
    host = socket.gethostname()
    armed = _armed(stack_dir)
    asked: list[tuple[ArmedDump, str, int]] = []
    gone: list[ArmedDump] = []
    rows: list[dict[str, Any]] = []
    for a in armed:
        path = os.path.join(stack_dir, a.stack_file)
        row = {**a.to_json(), "path": path, "signalled": False}
        if a.host != host:
            row["note"] = f"on {a.host}: not signalled from {host}"
        elif not _alive(a.pid):
            row["note"] = "process gone"
            gone.append(a)
        else:
            sig = getattr(signal, a.signal, None)
            try:
                if sig is None:
                    raise OSError(f"no signal {a.signal} here")
                os.kill(a.pid, sig)
                row["signalled"] = True
                asked.append((a, path, _size(path)))
            except OSError as e:
                row["note"] = f"not signalled: {e}"
        rows.append(row)
    deadline = time.monotonic() + STACK_WAIT_S
    while asked and time.monotonic() < deadline:
        # a dump is written in one go by the handler; it has grown once it is there
        if all(_size(p) > before for _, p, before in asked):
            time.sleep(0.2)  # the last frames of a large dump
            break
        time.sleep(0.1)
    for row in rows:
        if not row["signalled"]:
            continue
        try:
            with open(row["path"], "rb") as f:
                data = f.read(STACK_KEEP_BYTES)
            row["bytes"] = _size(row["path"])
            row["stack"] = data.decode("utf-8", "replace").splitlines()
        except OSError as e:
            row["note"] = f"no dump: {e.strerror or e}"
    return rows, gone


def _flight_recorder(env: Mapping[str, str], since: float) -> dict[str, Any]:
    enabled, prefix = flight_recorder(env)
    if not enabled:
        return {"enabled": False}
    files = []
    for path in sorted(glob.glob(glob.escape(prefix) + "*")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_mtime >= since - 1 and not path.endswith(".pipe"):
            files.append({"path": path, "bytes": st.st_size})
    return {
        "enabled": True,
        "prefix": prefix,
        "files": files,
        "note": "pickles written by torch's flight recorder: read them with torch's `torchfrtrace`, ckptctl never loads them",
    }


def collect_evidence(guard: AttemptGuard, hang: Hang) -> dict[str, Any]:
    """The hang record for the report (module docstring); cheap: bounded reads, one signal per rank."""
    dumps, gone = _stack_dumps(guard.stack_dir)
    steps = guard.tracker.last_step_by_rank
    host = socket.gethostname()
    host_of = {d["rank"]: d["host"] for d in dumps if isinstance(d.get("rank"), int) and d.get("host")}
    named = suspects(steps, dead_armed=tuple(gone), host_of_rank=host_of)
    return {
        **hang.to_json(),
        "policy": guard.tracker.policy.to_json(),
        "typical_step_s": guard.tracker.typical_step_s,
        "last_step_by_rank": {("?" if r is None else str(r)): s for r, s in steps.items()},
        "last_lines": list(guard.last_lines),
        "stack_dumps": dumps,
        "flight_recorder": _flight_recorder(guard.job_env, guard.started_wall),
        "suspects": named.to_json(),
        "collected_on": host,
    }
