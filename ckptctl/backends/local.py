"""The ``local`` backend: torchrun on this host, in its own session.

* ``run`` without ``detach``: the ``Supervisor`` (output through ckptctl's pipe, a lost
  terminal (SIGHUP) ignored rather than forwarded: only a deliberate Ctrl-C/SIGTERM
  stops the job). With a ``stop_check`` (recover's supervisor) the caller owns the
  signals: the Supervisor asks it every poll and stops (or kills) the job when asked.
* ``submit`` (and ``run`` with ``detach``): torchrun in its own session writing straight
  to its log file (no pipe to ckptctl, so ckptctl's exit cannot break it); ``follow``
  reads the file and returns once the watch has decided, leaving a healthy job running.
* ``state``: is the pid alive (only answerable on the host that started it);
  ``cancel``: SIGTERM to the job's process group (``force``: SIGKILL to it and every
  descendant: torchrun's workers sit in sessions of their own).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone

from ckptctl.adapters.filetail import FileTail
from ckptctl.adapters.jobtree import JobStopper, signal_job_tree
from ckptctl.adapters.launch_result import LaunchError, create_log_file
from ckptctl.adapters.launcher import Supervisor
from ckptctl.backends.base import (
    JobPreview,
    JobRun,
    LineFn,
    OutputFn,
    StopCheck,
    StopRequest,
    Submission,
    SubmitFn,
    feed_lines,
)
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.job import JobRef, JobStatus
from ckptctl.core.launch.plan import LaunchPlan, exit_code_for, signal_name

NAME = "local"


def job_pid(job_id: str) -> int | None:
    """A local job's id as a process id, or None: ASCII digits, 2 .. 2**31-1. A ``job.json`` can be
    edited: "0" would signal ckptctl's own process group, a 30-digit id overflow ``os.kill``."""
    if not (job_id.isascii() and job_id.isdigit()) or len(job_id) > 10:
        return None
    pid = int(job_id)
    return pid if 2 <= pid < 2**31 else None


class LocalBackend:
    """torchrun started by ckptctl on this host (see the module docstring)."""

    name = NAME

    def preview(self, config: CkptctlConfig, plan: LaunchPlan) -> JobPreview:
        return JobPreview(summary="would run: " + plan.display())

    def submit(
        self, config: CkptctlConfig, plan: LaunchPlan, *, extra_env: Mapping[str, str] | None = None
    ) -> Submission:
        log_path = create_log_file(plan.log_dir, datetime.now(timezone.utc))
        t0 = time.monotonic()
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    list(plan.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **plan.env, **(extra_env or {})},
                    start_new_session=True,  # its own session: the operator's terminal going away is not its business
                )
        except OSError as e:
            raise LaunchError(f"cannot start {plan.argv[0]!r}: {e.strerror or e}") from e
        ref = JobRef(backend=self.name, job_id=str(proc.pid), host=socket.gethostname())
        return Submission(ref=ref, log_path=log_path, started_monotonic=t0, process=proc)

    def follow(
        self,
        config: CkptctlConfig,
        plan: LaunchPlan,
        sub: Submission,
        *,
        decided: Callable[[], bool],
        on_output: OutputFn | None = None,
        on_line: LineFn | None = None,
        stop_check: StopCheck | None = None,
    ) -> JobRun:
        proc = sub.process
        if proc is None:
            raise ValueError("the local backend follows only a job this process started (it reaps it)")
        tail = FileTail(sub.log_path)
        stopper = JobStopper(proc.pid, plan.stop_grace_s)
        stopped_by_watch, request = False, None
        reason: str | None = None
        while True:
            running = proc.poll() is None
            if feed_lines(tail.read() if running else tail.rest(), on_output, on_line) and reason is None:
                stopped_by_watch, reason = True, "stopped: the loss watch judged the resume bad"
                stopper.term()
            if running and stop_check is not None:
                asked = stop_check(True)
                if asked is not None:
                    if request is None and reason is None:
                        request, reason = asked, asked.reason
                        stopper.term()
                    if asked.force:
                        stopper.kill()
            stopper.tick(root_alive=running)
            if not running:
                break
            if decided() and reason is None:
                return JobRun(
                    backend=self.name,
                    job_id=sub.ref.job_id,
                    argv=plan.argv,
                    log_path=sub.log_path,
                    exit_code=None,
                    still_running=True,
                    stopped_by_watch=False,
                    interrupted_by=None,
                    stop_reason=None,
                    duration_s=time.monotonic() - sub.started_monotonic,
                    state="RUNNING (detached)",
                )
            time.sleep(0.2)
        if stopper.term_at is not None and stopper.leftovers():
            stopper.kill()  # torchrun is gone; its workers (own sessions) must not outlive it
        rc = proc.returncode
        return JobRun(
            backend=self.name,
            job_id=sub.ref.job_id,
            argv=plan.argv,
            log_path=sub.log_path,
            exit_code=exit_code_for(rc),
            still_running=False,
            stopped_by_watch=stopped_by_watch,
            interrupted_by=request.interrupted_by if request else None,
            stop_reason=reason,
            duration_s=time.monotonic() - sub.started_monotonic,
            state=f"exited {rc}" if rc >= 0 else f"killed by {signal_name(-rc)}",
            cause=request.cause if request else None,
        )

    def run(
        self,
        config: CkptctlConfig,
        plan: LaunchPlan,
        *,
        detach: bool,
        decided: Callable[[], bool],
        on_output: OutputFn | None = None,
        on_line: LineFn | None = None,
        on_submit: SubmitFn | None = None,
        extra_env: Mapping[str, str] | None = None,
        stop_check: StopCheck | None = None,
    ) -> JobRun:
        if detach:
            sub = self.submit(config, plan, extra_env=extra_env)
            if on_submit is not None:
                on_submit(sub.ref.job_id, None)
            return self.follow(
                config, plan, sub, decided=decided, on_output=on_output, on_line=on_line, stop_check=stop_check
            )
        log_path = create_log_file(plan.log_dir, datetime.now(timezone.utc))
        asked: list[StopRequest] = []

        def started(sup: Supervisor) -> None:
            if on_submit is not None and sup.pid is not None:
                on_submit(str(sup.pid), None)

        def poll(sup: Supervisor) -> None:
            if stop_check is None:
                return
            request = stop_check(True)
            if request is None:
                return
            if not asked:
                asked.append(request)
                sup.stop(request.reason)
            if request.force:
                sup.kill_now()

        sup = Supervisor(
            plan.argv,
            env={**plan.env, **(extra_env or {})},
            log_path=log_path,
            on_output=on_output,
            on_line=on_line,
            on_start=started,
            on_poll=poll,
            stop_grace_s=plan.stop_grace_s,
            # with a stop_check the caller owns SIGINT/SIGTERM (and asks through it)
            forward_signals=stop_check is None,
            ignore_hangup=True,
        )
        res = sup.run()
        request = asked[0] if asked else None
        return JobRun(
            backend=self.name,
            job_id=str(res.pid),
            argv=plan.argv,
            log_path=log_path,
            exit_code=res.exit_code,
            still_running=False,
            stopped_by_watch=res.stopped_by_callback,
            interrupted_by=request.interrupted_by if request else res.interrupted_by,
            stop_reason=res.stop_reason,
            duration_s=res.duration_s,
            cause=request.cause if request else None,
        )

    def supervises_to_end(self, *, detach: bool) -> bool:
        """In the foreground the supervisor pipes torchrun's output until it ends; ``--detach``
        hands the job over after the verdict."""
        return not detach

    def state(self, job: JobRef) -> JobStatus:
        """Is the pid alive? Only the host that started it can tell (``RUNNING``/``ENDED``)."""
        if job.host not in (None, socket.gethostname()):
            return JobStatus(
                job_id=job.job_id,
                phase="unknown",
                detail={"job_id": job.job_id, "state": "UNKNOWN", "error": f"started on {job.host}, not this host"},
            )
        pid = job_pid(job.job_id)
        if pid is None:
            return JobStatus(job_id=job.job_id or None, phase="unknown", detail={"job_id": job.job_id or None, "state": "UNKNOWN"})
        try:
            os.kill(pid, 0)
            alive = not _is_zombie(pid)
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True  # someone else's process by that pid: it exists
        return JobStatus(
            job_id=job.job_id,
            phase="running" if alive else "ended",
            detail={"job_id": job.job_id, "state": "RUNNING" if alive else "ENDED"},
        )

    def cancel(self, job: JobRef, *, force: bool = False) -> None:
        """SIGTERM to the job's process group (the launcher started it in its own session:
        torchrun, which passes it on to its workers); ``force``: SIGKILL to it and to every
        descendant (torchrun's workers sit in sessions of their own). A job already gone is fine."""
        pid = job_pid(job.job_id)
        if pid is None or job.host not in (None, socket.gethostname()):
            raise LaunchError(f"cannot stop local job {job.job_id[:40] or '?'} from {socket.gethostname()} "
                              f"(started on {job.host}; a local job id is a process id)")
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError as e:
            raise LaunchError(f"cannot stop local job {pid}: {e.strerror or e}") from e
        signal_job_tree(pid, signal.SIGKILL if force else signal.SIGTERM, descendants=force)

    def stop_command(self, job: JobRef) -> tuple[str, ...]:
        """``kill -TERM -PID``: its process group (on the host that started it)."""
        return ("kill", "-TERM", f"-{job.job_id}")

    def hosts_query(self) -> tuple[str, ...] | None:
        """None: the local backend has no scheduler to ask (``launch.hosts`` is the list)."""
        return None

    def usable_hosts(self) -> list[str]:
        raise LaunchError("the local backend has no scheduler to ask for usable hosts; set launch.hosts or recover.hosts_command")


def _is_zombie(pid: int) -> bool:
    """Exited but not yet reaped by its parent (``/proc``; False where there is none)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] == "Z"
