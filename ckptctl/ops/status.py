"""``ckptctl status ROOT`` and ``ckptctl incidents ROOT``: read-only views of a run root's recoveries.

``status`` tells four things apart, so none is read as another:

* ``lock``: who holds the run root's lock now (``runroot.lock``: operation, user, host,
  pid, since when) and whether that process still runs;
* ``job``: the job the last recovery started (``runroot.state.ActiveJob``) and where it
  is now, asked of its backend (``backend.state``: Slurm's ``squeue``/``scontrol``/
  ``sacct``, a local pid); ``verified``: whether the loss watch judged *this* job and
  said it resumed well, taken from the report of the recovery that started it, never
  from another recovery's; a job restarted by its scheduler since that verdict (a
  requeue: its output's ``JOB_START_TAG`` lines) is not verified any more;
* ``recovery_in_progress``: a recover process holding the lock;
* ``last_recovery``: the outcome of the last *finished* recovery, with the job it
  ran, and whether that job is the current one.

``incidents``: the whole incident ledger (``ops.ledger``: reports, recoveries that died,
the scheduler's restarts), summarised by ``core.recover.incidents.summarize``. Neither writes.
"""

from __future__ import annotations

from typing import Any

from ckptctl.backends import registry
from ckptctl.core.launch.job import JobStart, JobStatus
from ckptctl.core.recover import decisions
from ckptctl.core.recover.incidents import summarize
from ckptctl.ops.ledger import job_starts, read_ledger
from ckptctl.runroot import lock
from ckptctl.runroot.root import RunRoot, as_run_root
from ckptctl.runroot.state import ActiveJob, StoredReport, read_job, reports

#: ``verified.state`` values.
VERIFIED = "verified"
"""The loss watch judged this job's resume good (``continuous``) and it has not restarted since."""
REJECTED = "rejected"
"""The loss watch judged this job's resume bad."""
UNVERIFIED = "not-verified"
"""No good verdict about this job: none given, undecided, or given before a restart."""
WATCHING = "being-watched"
"""The recovery that started it holds the lock: its watch has not decided yet."""


def job_now(job: ActiveJob) -> JobStatus:
    """Where ``job`` is now, in its backend's words; ``unknown`` for a backend this ckptctl lacks."""
    backend = registry.find(job.backend)
    if backend is None or not job.job_id:
        return JobStatus(job_id=job.job_id or None, phase="unknown", detail={"job_id": job.job_id or None, "state": "UNKNOWN"})
    return backend.state(job.ref())


def lock_section(rr: RunRoot) -> dict[str, Any] | None:
    held = lock.holder(rr)
    if held is None:
        return None
    alive = lock.holder_alive(held)
    return {
        **held.to_json(),
        "alive": alive,
        "describe": held.describe(),
        "state": "held" if alive else "stale (its holder is gone: the next operation breaks it)"
        if alive is False else "held (on another host: cannot tell whether its holder runs)",
    }


def verification(
    job: ActiveJob, stored: list[StoredReport], starts: list[JobStart], recovering: bool
) -> dict[str, Any]:
    """Whether the loss watch verified ``job`` (see ``VERIFIED`` and the module docstring)."""
    mine = next(((r, a) for r in reversed(stored) if (a := r.attempt_of(job.backend, job.job_id)) is not None), None)
    restarts = [s for s in starts if s.restart >= 1]
    last_restart = restarts[-1] if restarts else None
    doc: dict[str, Any] = {"verdict": None, "report": None, "restarts": len(restarts),
                           "restarted": None if last_restart is None else last_restart.time}
    if mine is None:
        if recovering:
            doc.update(state=WATCHING, reason="the recovery that started it is still running (it holds the lock)")
        else:
            doc.update(state=UNVERIFIED, reason="no recovery report names this job: the recovery that started it "
                       "ended without one (see `ckptctl incidents`)")
        return doc
    report, attempt = mine
    verdict = attempt.watch_verdict
    doc.update(verdict=verdict, report=report.report_path, attempt=attempt.number)
    judged = decisions.classify_verdict(verdict)
    if judged == "bad":
        doc.update(state=REJECTED, reason=f"the loss watch said {verdict} after its resume from step "
                   f"{attempt.checkpoint_step}")
    elif judged != "good":
        doc.update(state=UNVERIFIED, reason=f"the loss watch gave {verdict or 'no verdict'} after its resume "
                   f"from step {attempt.checkpoint_step}")
    elif last_restart is not None:
        frm = f"from {last_restart.checkpoint}" if last_restart.checkpoint else "from scratch"
        doc.update(state=UNVERIFIED, reason=f"the loss watch said {verdict} after its resume from step "
                   f"{attempt.checkpoint_step}, but the scheduler restarted it since (restart "
                   f"{last_restart.restart} at {last_restart.time}, {frm}); nothing watched that resume")
    else:
        doc.update(state=VERIFIED, reason=f"the loss watch said {verdict} after its resume from step "
                   f"{attempt.checkpoint_step}")
    return doc


def run_status(root: str | RunRoot) -> dict[str, Any]:
    rr = as_run_root(root)
    job = read_job(rr)
    stored = reports(rr)
    last = stored[-1] if stored else None
    held = lock_section(rr)
    recovering = held is not None and held["operation"] == "recover" and held["alive"] is not False
    job_doc = None
    if job is not None:
        starts = job_starts(rr, stored, job_id=job.job_id).get(job.job_id, [])
        job_doc = {
            **job.to_json(),
            "now": job_now(job).to_json(),
            "verified": verification(job, stored, [s.start for s in starts], recovering),
        }
    last_job = None if last is None else (last.doc.get("job") or {}).get("job_id")
    return {
        "schema": "ckptctl.status/1",
        "root": rr.url,
        "lock": held,
        "recovery_in_progress": held if recovering else None,
        "job": job_doc,
        "last_recovery": None
        if last is None
        else {
            "outcome": last.outcome,
            "reason": last.reason,
            "ended": last.ended,
            "report": last.report_path,
            "watch_verdict": last.last_watch_verdict,
            "job_id": None if last_job is None else str(last_job),
            "about_current_job": job is not None and last_job is not None and str(last_job) == job.job_id,
        },
    }


def run_incidents(root: str | RunRoot) -> dict[str, Any]:
    rr = as_run_root(root)
    run = read_ledger(rr)
    return {"schema": "ckptctl.incidents/1", "root": rr.url, **summarize(run.incidents, checkpoint_span_s=run.span_s)}
