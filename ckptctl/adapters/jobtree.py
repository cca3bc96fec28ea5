"""The job's processes: the process table, the tree of a job's descendants, and signalling them.

torchrun starts every worker in a session of its own, so signalling torchrun's
process group does not reach the workers: ``_JobTree`` remembers every process
seen descending from the child (``/proc``, or ``ps`` elsewhere), even after its
parent died, so the supervisor (``ckptctl.adapters.launcher``) can still find
and end them. ``kill_job_tree`` stops a job started in its own session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["JobStopper", "job_processes", "kill_job_tree", "signal_job_tree"]


@dataclass(frozen=True, slots=True)
class _Proc:
    pid: int
    ppid: int
    pgid: int
    start: str | None
    """Start time (clock ticks since boot on Linux): tells a pid from a reused one."""
    is_zombie: bool


def _process_table() -> dict[int, _Proc]:
    if os.path.isdir("/proc/self"):
        table: dict[int, _Proc] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                    stat = f.read()
            except OSError:
                continue  # gone meanwhile
            # The command name (field 2) is in parentheses and may contain anything.
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) < 20:
                continue
            table[int(name)] = _Proc(int(name), int(fields[1]), int(fields[2]), fields[19], fields[0] == "Z")
        return table
    try:  # macOS, BSD: no start times, pid reuse within one job's lifetime is unlikely
        out = subprocess.run(
            ["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "pgid=", "-o", "stat="],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].isdigit():
            pid = int(parts[0])
            table[pid] = _Proc(pid, int(parts[1]), int(parts[2]), None, parts[3].startswith("Z"))
    return table


class _JobTree:
    """Every process seen descending from the child, remembered after its parent dies."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.known: dict[int, _Proc] = {}

    def refresh(self) -> None:
        table = _process_table()
        children: dict[int, list[int]] = {}
        for p in table.values():
            children.setdefault(p.ppid, []).append(p.pid)
        # Start from the root and from every known process still alive: a worker
        # orphaned by a dead torchrun is re-parented to init, but its own children
        # still hang below it.
        stack = [self.root_pid] + [pid for pid, p in self.known.items() if self._same(table, p)]
        while stack:
            pid = stack.pop()
            for child in children.get(pid, ()):
                if child not in self.known or not self._same(table, self.known[child]):
                    self.known[child] = table[child]
                    stack.append(child)

    @staticmethod
    def _same(table: dict[int, _Proc], p: _Proc) -> bool:
        return _is_same_running(table, p)

    def alive(self) -> list[_Proc]:
        """Known descendants that are still running (zombies and reused pids excluded)."""
        return _still_running(list(self.known.values()))


def _is_same_running(table: dict[int, _Proc], p: _Proc) -> bool:
    now = table.get(p.pid)
    return now is not None and now.start == p.start and not now.is_zombie


def _still_running(procs: list[_Proc]) -> list[_Proc]:
    table = _process_table()
    return [p for p in procs if _is_same_running(table, p)]


def _pipe_holders(read_fd: int) -> list[_Proc]:
    """Processes holding the other end of the job's output pipe (Linux ``/proc``; else none).

    Whoever holds it inherited it from the job, so it is part of the job -- even a
    daemon that detached (double fork) too quickly for the process table to see it.
    """
    try:
        target = f"pipe:[{os.fstat(read_fd).st_ino}]"
    except OSError:
        return []
    if not os.path.isdir("/proc/self/fd"):
        return []
    me = os.getpid()
    holders = []
    for pid, p in _process_table().items():
        if pid == me or p.is_zombie:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    holders.append(p)
                    break
            except OSError:
                continue
    return holders


def _signal_group(pgid: int, sig: int) -> None:
    # Never our own group (or init's): a descendant cannot be in it -- the child
    # is in a new session -- but a misread table must not make ckptctl kill itself.
    if pgid <= 1 or pgid == os.getpgrp():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: int) -> None:
    if pid <= 1 or pid == os.getpid():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_job_tree(proc: subprocess.Popen[Any], grace_s: float, poll_s: float = 0.1) -> None:
    """Stop a job started in its own session: SIGTERM to its process group (torchrun passes it
    on to its workers), then, after ``grace_s``, SIGKILL to it and every descendant still alive."""
    tree = _JobTree(proc.pid)
    tree.refresh()
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while proc.poll() is None and time.monotonic() < deadline:
        tree.refresh()
        time.sleep(poll_s)
    if proc.poll() is None:
        tree.refresh()
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    for p in tree.alive():
        _signal_group(p.pgid, signal.SIGKILL)
        _signal_pid(p.pid, signal.SIGKILL)


def job_processes(pid: int) -> list[int]:
    """The pids of ``pid`` and its live descendants (the job tree of a job this process did not
    start, e.g. a detached torchrun recorded in ``job.json``)."""
    tree = _JobTree(pid)
    tree.refresh()
    table = _process_table()
    root = [pid] if pid in table and not table[pid].is_zombie else []
    return root + [p.pid for p in tree.alive()]


def signal_job_tree(pid: int, sig: int, *, descendants: bool) -> None:
    """Signal a job started in its own session: its process group (torchrun passes SIGTERM on to
    its workers) and, with ``descendants``, every live descendant and its group too (SIGKILL:
    torchrun's workers sit in sessions of their own and would outlive a killed torchrun)."""
    tree = _JobTree(pid)
    if descendants:
        tree.refresh()
    _signal_group(pid, sig)
    _signal_pid(pid, sig)
    if descendants:
        for p in tree.alive():
            _signal_group(p.pgid, sig)
            _signal_pid(p.pid, sig)


class JobStopper:
    """Stop a job started in its own session without blocking: ``term()`` sends SIGTERM to its
    process group (torchrun passes it on); ``tick()`` (call it while waiting for the end) keeps
    the tree of its processes current and, ``grace_s`` after the SIGTERM or at once when
    ``force``, SIGKILLs the group and every descendant seen, orphaned workers included."""

    def __init__(self, pid: int, grace_s: float) -> None:
        self.pid = pid
        self.grace_s = grace_s
        self.tree = _JobTree(pid)
        self.tree.refresh()
        self.term_at: float | None = None
        self.killed = False

    def term(self) -> None:
        if self.term_at is None:
            self.tree.refresh()
            self.term_at = time.monotonic()
            _signal_group(self.pid, signal.SIGTERM)

    def tick(self, *, force: bool = False, root_alive: bool = True) -> None:
        if root_alive:
            self.tree.refresh()
        if self.killed or self.term_at is None:
            return
        if force or time.monotonic() - self.term_at >= self.grace_s:
            self.kill()

    def kill(self) -> None:
        self.killed = True
        _signal_group(self.pid, signal.SIGKILL)
        _signal_pid(self.pid, signal.SIGKILL)
        for p in self.tree.alive():
            _signal_group(p.pgid, signal.SIGKILL)
            _signal_pid(p.pid, signal.SIGKILL)

    def leftovers(self) -> list[int]:
        """Processes of the job still alive (after the root ended)."""
        return [p.pid for p in self.tree.alive()]
