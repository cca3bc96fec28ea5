"""``ckptctl status ROOT`` and ``ckptctl incidents ROOT``: read-only views of a run root's recoveries.

``status``: the job the last recovery started (``runroot.state.ActiveJob``: backend, job
id, owner) and where it is now (asked of its backend: ``backend.state``; Slurm:
``squeue``/``scontrol``/``sacct``; local: is the pid alive), and the last recovery's
outcome and loss-watch verdict (``runroot.state.reports``).
``incidents``: the incident ledger (``runroot.state.incidents``: the ``incident`` record of
every recovery report the audit log points at), summarised by
``core.recover.incidents.summarize``. Neither writes.
"""

from __future__ import annotations

from typing import Any

from ckptctl.backends import registry
from ckptctl.core.launch.job import JobStatus
from ckptctl.core.recover.incidents import summarize
from ckptctl.runroot.root import RunRoot, as_run_root
from ckptctl.runroot.state import ActiveJob, incidents, read_job, reports


def job_now(job: ActiveJob) -> JobStatus:
    """Where ``job`` is now, in its backend's words; ``unknown`` for a backend this ckptctl lacks."""
    backend = registry.find(job.backend)
    if backend is None or not job.job_id:
        return JobStatus(job_id=job.job_id or None, phase="unknown", detail={"job_id": job.job_id or None, "state": "UNKNOWN"})
    return backend.state(job.ref())


def run_status(root: str | RunRoot) -> dict[str, Any]:
    rr = as_run_root(root)
    job = read_job(rr)
    stored = reports(rr)
    last = stored[-1] if stored else None
    return {
        "schema": "ckptctl.status/1",
        "root": rr.url,
        "job": None if job is None else {**job.to_json(), "now": job_now(job).to_json()},
        "last_recovery": None
        if last is None
        else {
            "outcome": last.outcome,
            "reason": last.reason,
            "ended": last.ended,
            "report": last.report_path,
            "watch_verdict": last.last_watch_verdict,
        },
    }


def run_incidents(root: str | RunRoot) -> dict[str, Any]:
    rr = as_run_root(root)
    return {"schema": "ckptctl.incidents/1", "root": rr.url, **summarize(incidents(rr))}
