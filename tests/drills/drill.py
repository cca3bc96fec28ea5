"""What every drill checks, and how it plays the operator: a real terminal (a pty it can
close), signals to the foreground ``recover``, a second ``recover``, ``ckptctl status``.

After each scenario a drill looks at the five things an on-call engineer would:

* the job: is any process of it alive (local: the pids the job record and the stack-dump
  records name; Slurm: ``squeue``), did it end the way the table says;
* the lock: free once the recovery ended (``.ckptctl/lock`` gone);
* the report: ``recovery-*.json`` with the outcome, the reason, ``interrupted_by``;
* the audit log: the ``recover`` record pointing at that report (and ``launch``,
  ``stop-job``, ``supersede-job`` where they belong);
* ``ckptctl status ROOT --json``: the job record and where the job is now.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckptctl.adapters.jobtree import job_processes
from tests.test_recover import CKPTCTL, _env, audit_records, launch_logs

#: Bounds of a drill's waits on this shared, slow machine (s).
START_S = 180.0
END_S = 300.0


def status(root: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``ckptctl status ROOT --json`` (read-only), as a real process."""
    proc = subprocess.run([CKPTCTL, "status", str(root), "--json"], capture_output=True, text=True,
                          env=env or _env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    return doc


def reports(root: Path) -> list[dict[str, Any]]:
    """The recovery reports in the order the audit log names them (oldest first)."""
    return [json.loads(Path(r["report"]).read_text()) for r in audit_records(root)
            if r["action"] == "recover" and r.get("report")]


def job_record(root: Path) -> dict[str, Any] | None:
    path = root / ".ckptctl" / "job.json"
    return json.loads(path.read_text()) if path.exists() else None


def lock_free(root: Path) -> bool:
    return not (root / ".ckptctl" / "lock").exists()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def job_pids(root: Path) -> list[int]:
    """Every pid of the run root's jobs that ckptctl can name: each job record's launcher pid
    (local) and each rank that armed a stack dump (``stacks-*/armed-*.json``)."""
    pids = []
    rec = job_record(root)
    if rec and rec.get("backend") == "local" and str(rec.get("job_id", "")).isdigit():
        pids.append(int(rec["job_id"]))
    for armed in (root / ".ckptctl" / "logs").glob("stacks-*/armed-*.json"):
        with contextlib.suppress(ValueError, OSError):
            pids.append(int(json.loads(armed.read_text())["pid"]))
    for rec in audit_records(root):
        if rec.get("action") == "launch" and rec.get("backend") == "local" and str(rec.get("job_id")).isdigit():
            pids.append(int(rec["job_id"]))
    # and every live descendant (torchrun's workers sit in sessions of their own)
    return sorted({q for p in pids for q in [p, *job_processes(p)]})


def wait_for(what: str, cond: Callable[[], bool], timeout: float = START_S, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process ended first (exit {proc.returncode})")
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.2)


def log_has(root: Path, needle: str) -> bool:
    return any(needle in p.read_text(errors="replace") for p in launch_logs(root))


def slurm_out_has(log_dir: Path, needle: str) -> bool:
    return any(needle in p.read_text(errors="replace") for p in log_dir.glob("slurm-*.out"))


def kill_leftovers(root: Path) -> None:
    """Never leave a process behind, whatever a failed drill left."""
    for pid in job_pids(root):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def recover_process(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``ckptctl recover ARGS --json`` started in the background (pipes), SIGINT/SIGTERM at their defaults."""

    def defaults() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return subprocess.Popen([CKPTCTL, "recover", *args, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=env or _env(), preexec_fn=defaults)


class Terminal:
    """``ckptctl recover`` on a real pseudo-terminal that the drill can close (the ssh session drops).

    The process is the session leader with the pty as its controlling terminal, as a login
    shell's command is; closing the master side hangs the terminal up: the kernel sends
    SIGHUP, and every later write to it fails with EIO.
    """

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        master, slave = os.openpty()

        def controlling_tty() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)

        self.proc = subprocess.Popen([CKPTCTL, "recover", *args], stdin=slave, stdout=slave, stderr=slave,
                                     cwd=cwd, env=env or _env(), preexec_fn=controlling_tty)
        os.close(slave)
        self.master: int | None = master
        self.seen = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            fd = self.master
            if fd is None:
                return
            try:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if not ready:
                    continue
                data = os.read(fd, 65536)
            except (OSError, ValueError):
                return
            if not data:
                return
            with self._lock:
                self.seen += data

    def text(self) -> str:
        with self._lock:
            return self.seen.decode("utf-8", "replace")

    def close(self) -> None:
        """The terminal goes away (the ssh connection dropped)."""
        fd, self.master = self.master, None
        if fd is not None:
            os.close(fd)
        self._reader.join(timeout=5)

    def wait(self, timeout: float = END_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def check_after(
    root: Path,
    *,
    outcome: str,
    interrupted_by: str | None = None,
    job_phase: str | None,
    actions: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The five checks of the module docstring after a recovery ended; returns its report."""
    assert lock_free(root), (root / ".ckptctl" / "lock").read_text()
    rep = reports(root)[-1]
    assert rep["outcome"] == outcome, (rep["outcome"], rep["reason"])
    assert rep["interrupted_by"] == interrupted_by, rep["reason"]
    records = audit_records(root)
    last = [r for r in records if r["action"] == "recover"][-1]
    assert last["outcome"] == outcome and last["report"] == rep["report_path"]
    if actions is not None:
        assert [r["action"] for r in records] == actions, [r["action"] for r in records]
    st = status(root, env)
    assert st["last_recovery"]["outcome"] == outcome
    if job_phase is None:
        assert st["job"] is None
    else:
        assert st["job"]["now"]["phase"] == job_phase, st["job"]
        rec = job_record(root)
        assert rec is not None
        # the record is closed exactly when its job is no longer alive
        assert ("ended" in rec) == (job_phase == "ended"), rec
    return rep
