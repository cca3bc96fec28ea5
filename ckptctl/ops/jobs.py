"""Launch backends for ``recover``: one interface, ``run_job(...) -> JobRun``.

* ``local``, foreground: today's ``Supervisor`` (torchrun in its own session, output
  through ckptctl, a lost terminal (SIGHUP) ignored rather than forwarded: only a
  deliberate Ctrl-C/SIGTERM stops the job).
* ``local``, ``detach``: torchrun in its own session writing straight to its log file
  (no pipe to ckptctl, so ckptctl's exit cannot break it); ckptctl follows the file
  and returns once the watch has decided, leaving a healthy job running.
* ``slurm``: the batch script (``core.launch.slurm_batch.plan_slurm_batch``) is written next
  to the job logs and submitted with ``sbatch --parsable``; ckptctl follows the job's
  output file and returns when the watch decides (the job runs on under Slurm), or
  when the job ends. A bad verdict cancels the job (``scancel``: SIGTERM, so the
  trainer writes its emergency checkpoint) and waits for it to end, so every
  checkpoint it wrote exists before the quarantine.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ckptctl.adapters import slurm
from ckptctl.adapters.jobtree import kill_job_tree
from ckptctl.adapters.launch_result import LaunchError, create_log_file
from ckptctl.adapters.launcher import Supervisor
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.plan import LaunchPlan, exit_code_for, signal_name
from ckptctl.core.launch.slurm_batch import SlurmBatch, plan_slurm_batch

LineFn = Callable[[str], bool]
OutputFn = Callable[[str], None]

#: The least a submitted job may stay PENDING before recover gives up on it (s).
SLURM_SCHEDULING_GRACE_S = 60.0


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRun:
    """How one attempt's job went, whatever ran it."""

    backend: str
    job_id: str | None
    """Slurm's job id, or the local torchrun's pid."""
    argv: tuple[str, ...]
    log_path: str | None
    exit_code: int | None
    """ckptctl's exit code for the job; ``None`` while it still runs."""
    still_running: bool
    stopped_by_watch: bool
    interrupted_by: int | None
    stop_reason: str | None
    duration_s: float
    script_path: str | None = None
    state: str | None = None
    """The scheduler's last word on the job (``RUNNING``, ``COMPLETED``, ``CANCELLED``...)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "job_id": self.job_id,
            "script": self.script_path,
            "state": self.state,
            "still_running": self.still_running,
        }


def render_batch(config: CkptctlConfig, plan: LaunchPlan) -> SlurmBatch:
    return plan_slurm_batch(config, plan, log_dir=os.path.abspath(plan.log_dir))


class _Tail:
    """Lines appended to a file, read as they come (the file may not exist yet)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pos = 0
        self.partial = b""

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read(1 << 22)
        except OSError:
            return []
        self.pos += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]

    def rest(self) -> list[str]:
        lines = self.read()
        if self.partial:
            lines.append(self.partial.decode("utf-8", "replace"))
            self.partial = b""
        return lines


def _feed(lines: list[str], on_output: OutputFn | None, on_line: LineFn | None) -> bool:
    stop = False
    for line in lines:
        if on_output is not None:
            with contextlib.suppress(OSError):
                on_output(line)
        if on_line is not None and not stop and on_line(line):
            stop = True
    return stop


def run_job(
    config: CkptctlConfig,
    plan: LaunchPlan,
    *,
    detach: bool,
    decided: Callable[[], bool],
    on_output: OutputFn | None = None,
    on_line: LineFn | None = None,
    on_submit: Callable[[str, str | None], None] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> JobRun:
    """Run one attempt through ``config.launch.backend``; see the module docstring.

    ``decided()``: the watch has its verdict (the detached and slurm runs may return);
    ``on_line(line) -> True``: a bad verdict, stop the job; ``on_submit(job_id, script)``:
    the job exists (audit it).
    """
    if config.launch.backend == "slurm":
        return _run_slurm(config, plan, decided=decided, on_output=on_output, on_line=on_line, on_submit=on_submit)
    if detach:
        return _run_detached(plan, decided=decided, on_output=on_output, on_line=on_line, on_submit=on_submit, extra_env=extra_env)
    log_path = create_log_file(plan.log_dir, datetime.now(timezone.utc))
    def started(sup: Supervisor) -> None:
        if on_submit is not None and sup.pid is not None:
            on_submit(str(sup.pid), None)

    sup = Supervisor(
        plan.argv,
        env={**plan.env, **(extra_env or {})},
        log_path=log_path,
        on_output=on_output,
        on_line=on_line,
        on_start=started,
        stop_grace_s=plan.stop_grace_s,
        ignore_hangup=True,
    )
    res = sup.run()
    return JobRun(
        backend="local",
        job_id=str(res.pid),
        argv=plan.argv,
        log_path=log_path,
        exit_code=res.exit_code,
        still_running=False,
        stopped_by_watch=res.stopped_by_callback,
        interrupted_by=res.interrupted_by,
        stop_reason=res.stop_reason,
        duration_s=res.duration_s,
    )


def _run_detached(
    plan: LaunchPlan,
    *,
    decided: Callable[[], bool],
    on_output: OutputFn | None,
    on_line: LineFn | None,
    on_submit: Callable[[str, str | None], None] | None,
    extra_env: Mapping[str, str] | None,
) -> JobRun:
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
    if on_submit is not None:
        on_submit(str(proc.pid), None)
    tail = _Tail(log_path)
    stopped, reason = False, None
    while True:
        running = proc.poll() is None
        if _feed(tail.read() if running else tail.rest(), on_output, on_line) and not stopped:
            stopped, reason = True, "stopped: the loss watch judged the resume bad"
            kill_job_tree(proc, plan.stop_grace_s)
            continue
        if not running:
            break
        if decided() and not stopped:
            return JobRun(
                backend="local",
                job_id=str(proc.pid),
                argv=plan.argv,
                log_path=log_path,
                exit_code=None,
                still_running=True,
                stopped_by_watch=False,
                interrupted_by=None,
                stop_reason=None,
                duration_s=time.monotonic() - t0,
                state="RUNNING (detached)",
            )
        time.sleep(0.2)
    rc = proc.returncode
    return JobRun(
        backend="local",
        job_id=str(proc.pid),
        argv=plan.argv,
        log_path=log_path,
        exit_code=exit_code_for(rc),
        still_running=False,
        stopped_by_watch=stopped,
        interrupted_by=None,
        stop_reason=reason,
        duration_s=time.monotonic() - t0,
        state=f"exited {rc}" if rc >= 0 else f"killed by {signal_name(-rc)}",
    )


def _run_slurm(
    config: CkptctlConfig,
    plan: LaunchPlan,
    *,
    decided: Callable[[], bool],
    on_output: OutputFn | None,
    on_line: LineFn | None,
    on_submit: Callable[[str, str | None], None] | None,
) -> JobRun:
    batch = render_batch(config, plan)
    os.makedirs(os.path.abspath(plan.log_dir), exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    script_path = os.path.join(os.path.abspath(plan.log_dir), f"slurm-{stamp}-{os.getpid()}.sh")
    with open(script_path, "w", encoding="utf-8") as f:
        f.write(batch.script)
    t0 = time.monotonic()
    job_id = slurm.submit(batch.sbatch_argv, script_path)
    if on_submit is not None:
        on_submit(job_id, script_path)
    out = batch.output_path(job_id)
    tail = _Tail(out)
    poll_s = config.launch.slurm.poll_s
    # Scheduling a fresh submission takes a few scheduler cycles even on an idle cluster (longer
    # on a busy controller): that is not missing capacity, so the wait never drops below this.
    pending_timeout_s = max(config.recover.capacity_timeout_s, SLURM_SCHEDULING_GRACE_S)
    stopped, reason = False, None
    cancel_deadline: float | None = None
    state = slurm.job_state(job_id)
    last_look = time.monotonic()
    while True:
        if time.monotonic() - last_look >= poll_s:
            state, last_look = slurm.job_state(job_id), time.monotonic()
        if state.state == "PENDING" and time.monotonic() - t0 > pending_timeout_s:
            # Never wait forever on a job the scheduler cannot place (every node drained or busy).
            slurm.cancel(job_id)
            raise slurm.SlurmError(
                f"slurm job {job_id} still pending after {pending_timeout_s:g} s "
                f"(reason {state.reason or 'unknown'}); cancelled",
                hint="check `sinfo` for free nodes; recover.capacity_timeout_s bounds this wait",
            )
        if state.finished:
            time.sleep(min(poll_s, 1.0))  # the last lines of the output file
            _feed(tail.rest(), on_output, None if stopped else on_line)
            break
        if _feed(tail.read(), on_output, None if stopped else on_line) and not stopped:
            stopped, reason = True, "cancelled: the loss watch judged the resume bad"
            slurm.cancel(job_id)
            cancel_deadline = time.monotonic() + plan.stop_grace_s + 60
            continue
        if not stopped and decided():
            return JobRun(
                backend="slurm",
                job_id=job_id,
                argv=plan.argv,
                log_path=out,
                exit_code=None,
                still_running=True,
                stopped_by_watch=False,
                interrupted_by=None,
                stop_reason=None,
                duration_s=time.monotonic() - t0,
                script_path=script_path,
                state=state.state,
            )
        if cancel_deadline is not None and time.monotonic() > cancel_deadline:
            slurm.cancel(job_id, signal="KILL")
            cancel_deadline = None
        time.sleep(min(poll_s, 0.5))
    return JobRun(
        backend="slurm",
        job_id=job_id,
        argv=plan.argv,
        log_path=out,
        exit_code=state.exit_code if state.exit_code is not None else (0 if state.state == "COMPLETED" else 1),
        still_running=False,
        stopped_by_watch=stopped,
        interrupted_by=None,
        stop_reason=reason,
        duration_s=time.monotonic() - t0,
        script_path=script_path,
        state=state.state,
    )
