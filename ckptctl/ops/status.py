"""``ckptctl status ROOT`` and ``ckptctl incidents ROOT``: read-only views of a run root's recoveries.

``status``: the job the last recovery started (``.ckptctl/job.json``: backend, job
id, owner) and where it is now (Slurm: ``squeue``/``scontrol``/``sacct``; local: is
the pid alive), and the last recovery's outcome and loss-watch verdict.
``incidents``: the ``incident`` record of every recovery report the audit log
points at, summarised by ``core.recover.incidents.summarize_incidents``. Neither writes.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ckptctl.adapters.audit import current_actor
from ckptctl.core.recover.incidents import summarize_incidents
from ckptctl.errors import CkptctlError
from ckptctl.runroot import audit
from ckptctl.runroot.root import RunRoot, as_run_root


def _read_json(root: RunRoot, name: str) -> dict[str, Any] | None:
    """``<root>/.ckptctl/<name>`` as a JSON object; None when missing or unreadable."""
    storage, path = root.storage, audit.state_path(root, name)
    try:
        if storage.info(path) is None:
            return None
        doc = json.loads(storage.read_bytes(path).decode("utf-8", "replace"))
    except (CkptctlError, ValueError, OSError):
        return None
    return doc if isinstance(doc, dict) else None


def recovery_reports(root: RunRoot) -> list[dict[str, Any]]:
    """Every recovery report the audit log names, oldest first."""
    out = []
    for rec in audit.read(root).records:
        if rec.get("action") != "recover" or not isinstance(rec.get("report"), str):
            continue
        url = rec["report"]
        name = url.rstrip("/").rsplit("/", 1)[-1]
        doc = _read_json(root, name)
        if doc is not None:
            out.append(doc)
    return out


def _job_now(job: dict[str, Any]) -> dict[str, Any]:
    backend, job_id = job.get("backend"), str(job.get("job_id") or "")
    if backend == "slurm" and job_id:
        from ckptctl.adapters import slurm

        try:
            return slurm.job_state(job_id).to_json()
        except slurm.SlurmError as e:
            return {"job_id": job_id, "state": "UNKNOWN", "error": e.message}
    if backend == "local" and job_id.isdigit():
        owner = job.get("owner") or {}
        if owner.get("host") not in (None, current_actor().host):
            return {"job_id": job_id, "state": "UNKNOWN", "error": f"started on {owner.get('host')}, not this host"}
        try:
            os.kill(int(job_id), 0)
            state = "RUNNING"
        except ProcessLookupError:
            state = "ENDED"
        except PermissionError:
            state = "RUNNING"
        return {"job_id": job_id, "state": state}
    return {"job_id": job_id or None, "state": "UNKNOWN"}


def run_status(root: str | RunRoot) -> dict[str, Any]:
    rr = as_run_root(root)
    job = _read_json(rr, audit.JOB_FILE)
    reports = recovery_reports(rr)
    last = reports[-1] if reports else None
    verdict = None
    if last and last.get("attempts"):
        verdict = last["attempts"][-1].get("watch_verdict")
    return {
        "schema": "ckptctl.status/1",
        "root": rr.url,
        "job": None if job is None else {**job, "now": _job_now(job)},
        "last_recovery": None
        if last is None
        else {
            "outcome": last.get("outcome"),
            "reason": last.get("reason"),
            "ended": last.get("ended"),
            "report": last.get("report_path"),
            "watch_verdict": verdict,
        },
    }


def run_incidents(root: str | RunRoot) -> dict[str, Any]:
    rr = as_run_root(root)
    records = [r["incident"] for r in recovery_reports(rr) if isinstance(r.get("incident"), dict)]
    return {"schema": "ckptctl.incidents/1", "root": rr.url, **summarize_incidents(records)}
