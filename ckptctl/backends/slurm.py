"""The ``slurm`` backend: a batch script submitted with ``sbatch``, followed through its output file.

``preview``/``submit``: the batch script (``core.launch.slurm_batch.plan_slurm_batch``) is
written next to the job logs and submitted with ``sbatch --parsable``. ``follow`` reads
the job's output file and returns when the watch decides (the job runs on under Slurm),
or when the job ends. A bad verdict cancels the job (``scancel``: SIGTERM, so the trainer
writes its emergency checkpoint) and waits for it to end, so every checkpoint it wrote
exists before the quarantine. A requeued job (``--requeue``) restarts under the same id and
appends to the same output file; ``follow`` keeps reading it (the restart's
``JOB_START_TAG`` line is a restore marker for the watch). ``state``: ``squeue``/``scontrol``/``sacct``
(``adapters.slurm.job_state``); ``usable_hosts``: ``sinfo``.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone

from ckptctl.adapters import slurm
from ckptctl.adapters.filetail import FileTail
from ckptctl.backends.base import (
    JobPreview,
    JobRun,
    LineFn,
    OutputFn,
    StopCheck,
    Submission,
    SubmitFn,
    feed_lines,
)
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.job import JobPhase, JobRef, JobStatus
from ckptctl.core.launch.plan import LaunchPlan
from ckptctl.core.launch.slurm_batch import SlurmBatch, plan_slurm_batch

NAME = "slurm"
#: The least a submitted job may stay PENDING before recover gives up on it (s).
SCHEDULING_GRACE_S = 60.0
#: Job states (squeue/scontrol/sacct spelling) of a job that waits to run its script.
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})


#: How the job's host runs this very ckptctl (a restart's ``locate``): the running interpreter,
#: by absolute path, so the job never finds another ckptctl (or none) on its PATH.
CKPTCTL_ARGV = (os.path.abspath(sys.executable), "-m", "ckptctl")


def render_batch(config: CkptctlConfig, plan: LaunchPlan) -> SlurmBatch:
    return plan_slurm_batch(config, plan, log_dir=os.path.abspath(plan.log_dir), ckptctl_argv=CKPTCTL_ARGV)


def phase_of(state: slurm.JobState) -> JobPhase:
    """Slurm's job state in the phases every backend shares."""
    word = state.state.split()[0] if state.state else "UNKNOWN"
    if word == "UNKNOWN":
        return "unknown"
    if word in slurm.FINISHED_STATES:
        return "ended"
    return "pending" if word in PENDING_STATES else "running"


class SlurmBackend:
    """A batch job under Slurm (see the module docstring)."""

    name = NAME

    def preview(self, config: CkptctlConfig, plan: LaunchPlan) -> JobPreview:
        batch = render_batch(config, plan)
        return JobPreview(
            summary="would submit with " + shlex.join(batch.sbatch_argv) + ":\n" + batch.script.rstrip(),
            section="slurm",
            doc=batch.to_json(),
            script=batch.script,
            submit_argv=batch.sbatch_argv,
            script_note="launch.backend is slurm: `ckptctl recover` submits this batch script:",
        )

    def submit(
        self, config: CkptctlConfig, plan: LaunchPlan, *, extra_env: Mapping[str, str] | None = None
    ) -> Submission:
        """Write the batch script and ``sbatch`` it. ``extra_env`` (recover's lock token) is not
        given to the job: it runs on other hosts, later, and never shares the lock."""
        batch = render_batch(config, plan)
        os.makedirs(os.path.abspath(plan.log_dir), exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        script_path = os.path.join(os.path.abspath(plan.log_dir), f"slurm-{stamp}-{os.getpid()}.sh")
        with open(script_path, "w", encoding="utf-8") as f:
            f.write(batch.script)
        t0 = time.monotonic()
        job_id = slurm.submit(batch.sbatch_argv, script_path)
        return Submission(
            ref=JobRef(backend=self.name, job_id=job_id),
            log_path=batch.output_path(job_id),
            started_monotonic=t0,
            script_path=script_path,
        )

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
        job_id, t0 = sub.ref.job_id, sub.started_monotonic
        tail = FileTail(sub.log_path)
        poll_s = config.launch.slurm.poll_s
        # Scheduling a fresh submission takes a few scheduler cycles even on an idle cluster (longer
        # on a busy controller): that is not missing capacity, so the wait never drops below this.
        pending_timeout_s = max(config.recover.capacity_timeout_s, SCHEDULING_GRACE_S)
        stopped_by_watch, request = False, None
        reason: str | None = None
        cancel_deadline: float | None = None
        state = slurm.job_state(job_id)
        last_look = time.monotonic()
        # A job that ran and was requeued waits again (Slurm holds a requeued job for a while
        # before it may start): that wait is the scheduler's restart, not missing capacity.
        started = False

        def cancel(force: bool = False) -> None:
            nonlocal cancel_deadline
            slurm.cancel(job_id, signal="KILL" if force else None)
            cancel_deadline = None if force else time.monotonic() + plan.stop_grace_s + 60

        while True:
            if time.monotonic() - last_look >= poll_s:
                state, last_look = slurm.job_state(job_id), time.monotonic()
            pending = phase_of(state) == "pending"
            if phase_of(state) == "running":
                started = True
            if (
                not started
                and state.state == "PENDING"
                and reason is None
                and time.monotonic() - t0 > pending_timeout_s
            ):
                # Never wait forever on a job the scheduler cannot place (every node drained or busy).
                slurm.cancel(job_id)
                raise slurm.SlurmError(
                    f"slurm job {job_id} still pending after {pending_timeout_s:g} s "
                    f"(reason {state.reason or 'unknown'}); cancelled",
                    hint="check `sinfo` for free nodes; recover.capacity_timeout_s bounds this wait",
                )
            if state.finished:
                time.sleep(min(poll_s, 1.0))  # the last lines of the output file
                feed_lines(tail.rest(), on_output, None if reason else on_line)
                break
            if feed_lines(tail.read(), on_output, None if reason else on_line) and reason is None:
                stopped_by_watch, reason = True, "cancelled: the loss watch judged the resume bad"
                cancel()
                continue
            if stop_check is not None:
                asked = stop_check(not pending)
                if asked is not None:
                    if request is None and reason is None:
                        request, reason = asked, asked.reason
                        cancel(force=asked.force)
                    elif asked.force and cancel_deadline is not None:
                        cancel(force=True)
            if reason is None and decided():
                return JobRun(
                    backend=self.name,
                    job_id=job_id,
                    argv=plan.argv,
                    log_path=sub.log_path,
                    exit_code=None,
                    still_running=True,
                    stopped_by_watch=False,
                    interrupted_by=None,
                    stop_reason=None,
                    duration_s=time.monotonic() - t0,
                    script_path=sub.script_path,
                    state=state.state,
                )
            if cancel_deadline is not None and time.monotonic() > cancel_deadline:
                cancel(force=True)
            time.sleep(min(poll_s, 0.5))
        return JobRun(
            backend=self.name,
            job_id=job_id,
            argv=plan.argv,
            log_path=sub.log_path,
            exit_code=state.exit_code if state.exit_code is not None else (0 if state.state == "COMPLETED" else 1),
            still_running=False,
            stopped_by_watch=stopped_by_watch,
            interrupted_by=request.interrupted_by if request else None,
            stop_reason=reason,
            duration_s=time.monotonic() - t0,
            script_path=sub.script_path,
            state=state.state,
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
        """Submit and follow; the job always runs on under Slurm once the watch decided
        (``detach`` changes nothing here)."""
        sub = self.submit(config, plan, extra_env=extra_env)
        if on_submit is not None:
            on_submit(sub.ref.job_id, sub.script_path)
        return self.follow(
            config, plan, sub, decided=decided, on_output=on_output, on_line=on_line, stop_check=stop_check
        )

    def supervises_to_end(self, *, detach: bool) -> bool:
        """The job belongs to Slurm once the watch has decided."""
        return False

    def state(self, job: JobRef) -> JobStatus:
        if not job.job_id:
            return JobStatus(job_id=None, phase="unknown", detail={"job_id": None, "state": "UNKNOWN"})
        try:
            now = slurm.job_state(job.job_id)
        except slurm.SlurmError as e:
            return JobStatus(
                job_id=job.job_id, phase="unknown", detail={"job_id": job.job_id, "state": "UNKNOWN", "error": e.message}
            )
        return JobStatus(job_id=job.job_id, phase=phase_of(now), exit_code=now.exit_code, detail=now.to_json())

    def cancel(self, job: JobRef, *, force: bool = False) -> None:
        """``scancel`` (SIGTERM to every step, then SIGKILL after Slurm's KillWait); ``force``: SIGKILL now."""
        slurm.cancel(job.job_id, signal="KILL" if force else None)

    def stop_command(self, job: JobRef) -> tuple[str, ...]:
        return ("scancel", job.job_id)

    def hosts_query(self) -> tuple[str, ...] | None:
        return slurm.USABLE_HOSTS_ARGV

    def usable_hosts(self) -> list[str]:
        return slurm.usable_hosts()
