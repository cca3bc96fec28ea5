"""One job per run root, across processes and time: the check ``recover`` and ``launch`` make
before they start a job (issue 20).

The run root records its job in ``<root>/.ckptctl/job.json`` (``runroot.state.ActiveJob``);
the run-root lock says which ckptctl process acts on the root now. Before a new job:

* the lock is held by a live ``recover`` (its supervisor still watches its job): refused,
  exit 4, naming it and its job; ``--replace`` (same host only) sends that supervisor
  SIGTERM (it stops its job, writes its report with ``interrupted_by: SIGTERM``) and waits
  for it to let go of the lock (``displace_supervisor``);
* an open job record whose job is alive (its backend: pending / running): refused, exit 4,
  naming the job and the command that stops it; ``--replace`` stops it first (SIGTERM /
  ``scancel``, then a kill after the grace), audited ``stop-job``, record closed;
* an open record whose job has ended (dead pid, finished Slurm job): closed, audited
  ``supersede-job``;
* a job whose state cannot be known (a pid on another host, a scheduler that does not
  answer): refused, exit 4, with the reason; nothing is assumed dead.

``check_run_root_job`` runs under the run-root lock (``recover`` holds it for its whole
supervision; ``launch`` takes it around the check and the start). ``preflight`` is the same
look without the lock and without acting, for the foreground ``recover`` to refuse before
it writes anything.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import time
from collections.abc import Callable
from datetime import datetime, timezone

from ckptctl.adapters.audit import current_actor
from ckptctl.adapters.runlock import LockInfo
from ckptctl.backends import registry
from ckptctl.backends.base import JobBackend
from ckptctl.core.launch.job import JobStatus
from ckptctl.errors import CkptctlError, LockHeldError
from ckptctl.runroot import audit, lock
from ckptctl.runroot.root import RunRoot
from ckptctl.runroot.state import ActiveJob, clear_active_job, read_active_job

__all__ = ["check_run_root_job", "displace_supervisor", "preflight"]

#: Polls of a job being stopped.
_POLL_S = 0.5
#: After SIGKILL / ``scancel --signal=KILL``: how long the end may take to show.
_KILL_WAIT_S = 60.0


def _iso_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _job_status(job: ActiveJob) -> tuple[JobBackend | None, JobStatus]:
    backend = registry.find(job.backend)
    if backend is None:
        return None, JobStatus(job_id=job.job_id, phase="unknown", detail={"error": f"no backend {job.backend!r} here"})
    return backend, backend.state(job.ref())


def _state_word(status: JobStatus) -> str:
    word = status.detail.get("state") if isinstance(status.detail, dict) else None
    return str(word or status.phase.upper())


def _stop_hint(backend: JobBackend | None, job: ActiveJob, root: RunRoot) -> str:
    how = shlex.join(backend.stop_command(job.ref())) if backend is not None else f"stop {job.backend} job {job.job_id}"
    return f"stop it ({how}) or pass --replace to stop it first; `ckptctl status {root.url}` shows it"


def _live_job_error(root: RunRoot, job: ActiveJob, backend: JobBackend | None, status: JobStatus) -> LockHeldError:
    if status.phase == "unknown":
        why = status.detail.get("error") if isinstance(status.detail, dict) else None
        return LockHeldError(
            f"run root has a job ckptctl cannot see the end of: {job.describe()}"
            + (f" ({why})" if why else ""),
            hint=_stop_hint(backend, job, root)
            + f"; if it is truly gone, remove {root.storage.url(audit.state_path(root, 'job.json'))}",
        )
    return LockHeldError(
        f"run root has a live job: {job.describe()}, {_state_word(status)} now",
        hint=_stop_hint(backend, job, root),
    )


def preflight(root: RunRoot, *, replace: bool) -> None:
    """Refuse (exit 4) now, without writing anything, when the run root is busy: its lock held
    by a live process, or its recorded job alive (unless ``replace``)."""
    holder = lock.holder(root)
    if holder is not None and not replace and not _dead_holder(holder):
        job = read_active_job(root)
        extra = f"; its job: {job.describe()}" if job is not None else ""
        raise LockHeldError(
            f"run root is locked: {holder.describe()}{extra}",
            hint=(
                f"stop that {holder.operation} (Ctrl-C in its terminal, or kill -TERM {holder.pid} on {holder.host}), "
                "or pass --replace to stop it and its job first"
                if holder.operation == "recover"
                else "wait for it to finish"
            ),
        )
    if replace:
        return
    job = read_active_job(root)
    if job is None:
        return
    backend, status = _job_status(job)
    if status.phase == "ended":
        return  # stale: the real run supersedes it (audited there)
    raise _live_job_error(root, job, backend, status)


def _dead_holder(holder: LockInfo) -> bool:
    if holder.host != socket.gethostname() or holder.pid <= 0:
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def displace_supervisor(root: RunRoot, *, wait_s: float, sleep: Callable[[float], None] = time.sleep) -> str | None:
    """``--replace`` while another ``recover`` holds the lock: SIGTERM to its supervisor (it stops
    its job and writes its report), then wait up to ``wait_s`` for the lock to be free.

    Returns what was done (None when nothing held the lock). ``LockHeldError`` (exit 4) when the
    holder is not a recover, runs on another host, or does not let go in time.
    """
    holder = lock.holder(root)
    if holder is None or _dead_holder(holder):
        return None
    if holder.operation != "recover":
        raise LockHeldError(f"run root is locked: {holder.describe()}", hint="--replace stops a recover, never a " + holder.operation)
    if holder.host != socket.gethostname():
        raise LockHeldError(
            f"run root is locked: {holder.describe()}, on another host",
            hint=f"stop it there (kill -TERM {holder.pid} on {holder.host}); --replace acts on this host only",
        )
    try:
        os.kill(holder.pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    except PermissionError as e:
        raise LockHeldError(f"cannot stop {holder.describe()}: {e.strerror}") from e
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        now = lock.holder(root)
        if now is None or now.token != holder.token or _dead_holder(now):
            return f"stopped the recover that held the run root ({holder.describe()}); it stopped its job"
        sleep(_POLL_S)
    raise LockHeldError(
        f"the recover holding the run root did not stop within {wait_s:g} s: {holder.describe()}",
        hint=f"kill -TERM {holder.pid} again (a second SIGTERM skips its grace), then retry",
    )


def _stop(backend: JobBackend, job: ActiveJob, grace_s: float, sleep: Callable[[float], None]) -> JobStatus:
    """Cancel ``job``, wait ``grace_s`` for its end, then kill it and wait again."""
    ref = job.ref()
    backend.cancel(ref)
    for force, wait in ((False, grace_s), (True, _KILL_WAIT_S)):
        if force:
            backend.cancel(ref, force=True)
        deadline = time.monotonic() + wait
        while True:
            status = backend.state(ref)
            if not status.alive or time.monotonic() > deadline:
                break
            sleep(_POLL_S)
        if not status.alive:
            return status
    return status


def check_run_root_job(
    root: RunRoot,
    *,
    replace: bool,
    grace_s: float,
    clock: audit.Clock = lambda: datetime.now(timezone.utc),
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Under the run-root lock: make sure no job of this run root is alive (see the module
    docstring). Returns one line per thing done (superseded / stopped), for the report."""
    job = read_active_job(root)
    if job is None:
        return []
    backend, status = _job_status(job)
    who = current_actor(clock)
    if status.phase == "ended":
        reason = f"the job had ended ({_state_word(status)}) when a new one was about to start"
        audit.write(root, audit.JobSuperseded(who=who, backend=job.backend, job_id=job.job_id, reason=reason,
                                              state=_state_word(status), job=job.to_json()))
        clear_active_job(root, ended=_iso_now(), reason="superseded: " + reason, job_id=job.job_id)
        return [f"superseded the record of {job.describe()}: it had ended ({_state_word(status)})"]
    if not replace or backend is None:
        raise _live_job_error(root, job, backend, status)
    found = _state_word(status)
    try:
        end = _stop(backend, job, grace_s, sleep)
    except CkptctlError as e:
        raise LockHeldError(f"--replace could not stop {job.describe()}: {e.message}",
                            hint=_stop_hint(backend, job, root)) from e
    if end.alive or end.phase == "unknown":
        raise LockHeldError(
            f"--replace asked {job.describe()} to stop, but it is still {_state_word(end)}",
            hint=_stop_hint(backend, job, root),
        )
    reason = f"--replace: stopped to start a new job (was {found})"
    audit.write(root, audit.JobStopped(who=who, backend=job.backend, job_id=job.job_id, reason=reason,
                                       state=f"{found} -> {_state_word(end)}", job=job.to_json()))
    clear_active_job(root, ended=_iso_now(), reason=reason, job_id=job.job_id)
    return [f"stopped {job.describe()} (--replace; it was {found}, now {_state_word(end)})"]
