"""The run root's own state, typed: written and read here and nowhere else.

Everything ckptctl keeps about a run (besides its checkpoints) lives in
``<root>/.ckptctl/``; this module is the one place that reads or writes those files
(the audit log's lines themselves go through ``runroot.audit.write``):

| file | record | written by | read by |
| --- | --- | --- | --- |
| ``job.json`` | ``ActiveJob`` | ``recover`` when its job exists | ``status``; issue 20: ``recover``/``launch`` refuse while it is alive |
| ``recovery-<UTC>.json`` | ``StoredReport`` (the ``ckptctl.recover/1`` report) | ``recover`` at its end | ``status``, ``incidents``, ``report`` |
| ``recovery-<UTC>.html`` | (the report's HTML view) | ``recover`` at its end | people |
| ``audit.jsonl``, action ``recover`` | ``RecoveryEntry`` | ``recover`` (``audit.Recovery``) | ``status``/``incidents`` (which reports), ``cadence`` (failure times) |

The incident ledger is the ``incident`` record of each stored report
(``core.recover.incidents.Incident``); ``incidents(root)`` reads it, oldest first.
Keys are a contract: added, never renamed. Readers never fail on an odd file: a
missing or unreadable one is ``None`` (or left out of a list).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ckptctl.core.launch.job import JobRef
from ckptctl.core.recover.incidents import Incident
from ckptctl.core.rollback.model import Who
from ckptctl.errors import CkptctlError
from ckptctl.runroot import audit
from ckptctl.runroot.root import RunRoot

#: The job the run root's last recovery started: ``<root>/.ckptctl/job.json``.
JOB_FILE = "job.json"
#: Recovery reports: ``<root>/.ckptctl/recovery-<UTC stamp>[-N].json``.
REPORT_PREFIX = "recovery-"


# -- the active job --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ActiveJob:
    """``job.json``: the job the last recovery started and who owns it.

    The audit log's ``launch`` record carries the same facts (``from_launch``). A job
    whose record has ``ended`` set was closed by ckptctl (``clear_active_job``); one
    without may still run: ask its backend (``ref()`` -> ``backend.state``).
    """

    backend: str
    job_id: str
    """The backend's id: the local launcher's pid, Slurm's job id."""
    script: str | None
    owner: Who
    """Who started it (``owner`` in the file: user, host, pid; ``time`` is ``started``)."""
    detached: bool
    started: str
    """UTC, ISO 8601: when the job was started (submitted)."""
    resume_from: str | None
    log: str | None = None
    attempt: int | None = None
    """Which attempt of its recovery this job is (1, 2, ...)."""
    ended: str | None = None
    """When ckptctl saw the job end (set by ``clear_active_job``)."""
    end_reason: str | None = None

    @classmethod
    def from_launch(cls, launch: audit.Launch, *, attempt: int | None = None) -> ActiveJob:
        return cls(
            backend=launch.backend,
            job_id=launch.job_id,
            script=launch.script,
            owner=launch.who,
            detached=launch.detached,
            started=launch.started,
            resume_from=launch.resume_from,
            log=launch.log,
            attempt=attempt,
        )

    @property
    def host(self) -> str:
        """The host ckptctl started it from."""
        return self.owner.host

    def ref(self) -> JobRef:
        """The job as its backend knows it (ask ``backend.state(ref)`` whether it is alive)."""
        return JobRef(backend=self.backend, job_id=self.job_id, host=self.owner.host or None)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "backend": self.backend,
            "job_id": self.job_id,
            "script": self.script,
            "owner": {"user": self.owner.user, "host": self.owner.host, "pid": self.owner.pid},
            "detached": self.detached,
            "started": self.started,
            "resume_from": self.resume_from,
            "log": self.log,
        }
        # keys added after the first version, present once known
        if self.attempt is not None:
            doc["attempt"] = self.attempt
        if self.ended is not None:
            doc["ended"] = self.ended
            doc["end_reason"] = self.end_reason
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ActiveJob | None:
        """The record in ``doc``; None when it is not one (no backend or job id)."""
        backend, job_id = doc.get("backend"), doc.get("job_id")
        if not isinstance(backend, str) or job_id is None:
            return None
        found = doc.get("owner")
        owner: dict[str, Any] = found if isinstance(found, dict) else {}
        pid = owner.get("pid")
        return cls(
            backend=backend,
            job_id=str(job_id),
            script=_str(doc.get("script")),
            owner=Who(
                time=_str(doc.get("started")) or "",
                user=str(owner.get("user") or ""),
                host=str(owner.get("host") or ""),
                pid=pid if isinstance(pid, int) else 0,
                ckptctl_version="",
            ),
            detached=bool(doc.get("detached")),
            started=_str(doc.get("started")) or "",
            resume_from=_str(doc.get("resume_from")),
            log=_str(doc.get("log")),
            attempt=doc.get("attempt") if isinstance(doc.get("attempt"), int) else None,
            ended=_str(doc.get("ended")),
            end_reason=_str(doc.get("end_reason")),
        )


def write_active_job(root: RunRoot, job: ActiveJob) -> None:
    """Record ``job`` as the run root's job (replaces the previous record)."""
    _write_json(root, JOB_FILE, job.to_json())


def read_job(root: RunRoot) -> ActiveJob | None:
    """The last job a recovery recorded, ended or not (``status`` shows it); None: none."""
    doc = _read_json(root, JOB_FILE)
    return None if doc is None else ActiveJob.from_json(doc)


def read_active_job(root: RunRoot) -> ActiveJob | None:
    """The recorded job unless ckptctl has closed it; whether it still runs is its backend's
    answer (``backend.state(job.ref())``), which this module does not ask."""
    job = read_job(root)
    return None if job is None or job.ended is not None else job


def clear_active_job(root: RunRoot, *, ended: str, reason: str) -> ActiveJob | None:
    """Close the recorded job (kept, with ``ended`` and ``end_reason``: ``status`` still shows
    it, nothing is deleted). Returns the closed record; None when there was none."""
    job = read_active_job(root)
    if job is None:
        return None
    closed = replace(job, ended=ended, end_reason=reason)
    write_active_job(root, closed)
    return closed


# -- recovery reports and the audit log's recover records ----------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryEntry:
    """One ``recover`` record of the audit log: a recovery ended (it is a failure the run had)."""

    time: str | None
    outcome: str | None
    reason: str | None
    report: str | None
    """The URL of its report."""
    job: dict[str, Any] | None = None

    @property
    def when(self) -> datetime | None:
        if self.time is None:
            return None
        try:
            return datetime.fromisoformat(self.time.replace("Z", "+00:00"))
        except ValueError:
            return None


def recovery_entries(root: RunRoot) -> list[RecoveryEntry]:
    """The audit log's ``recover`` records, oldest first."""
    out = []
    for rec in audit.read(root).records:
        if rec.get("action") != audit.Recovery.action:
            continue
        out.append(
            RecoveryEntry(
                time=_str(rec.get("time")),
                outcome=_str(rec.get("outcome")),
                reason=_str(rec.get("reason")),
                report=_str(rec.get("report")),
                job=rec.get("job") if isinstance(rec.get("job"), dict) else None,
            )
        )
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredReport:
    """A recovery report as ``status`` and ``incidents`` read it back."""

    outcome: str | None
    reason: str | None
    ended: str | None
    report_path: str | None
    watch_verdicts: tuple[str | None, ...]
    """Each attempt's loss-watch verdict, in order."""
    incident: Incident | None
    doc: dict[str, Any] = field(repr=False, default_factory=dict)
    """The whole report (``ckptctl.recover/1``), for what no field above holds."""

    @property
    def last_watch_verdict(self) -> str | None:
        return self.watch_verdicts[-1] if self.watch_verdicts else None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> StoredReport:
        found = doc.get("attempts")
        attempts: list[Any] = found if isinstance(found, list) else []
        incident = doc.get("incident")
        return cls(
            outcome=_str(doc.get("outcome")),
            reason=_str(doc.get("reason")),
            ended=_str(doc.get("ended")),
            report_path=_str(doc.get("report_path")),
            watch_verdicts=tuple(_str(a.get("watch_verdict")) for a in attempts if isinstance(a, dict)),
            incident=Incident.from_json(incident) if isinstance(incident, dict) else None,
            doc=doc,
        )


def report_target(root: RunRoot, when: datetime) -> str:
    """``<root>/.ckptctl/recovery-<UTC stamp>.json``, ``-2``, ``-3`` ... when taken.

    The stamp has one-second resolution and two recoveries can end in the same
    second (a job-fault refusal takes well under one): a later report must never
    overwrite an earlier one that the audit log points at. Recoveries hold the
    run-root lock while writing, so checking before writing is enough.
    """
    base = audit.state_path(root, f"{REPORT_PREFIX}{when.strftime('%Y%m%dT%H%M%SZ')}")
    target, n = f"{base}.json", 1
    while root.storage.exists(target):
        n += 1
        target = f"{base}-{n}.json"
    return target


def write_report_doc(root: RunRoot, target: str, doc: dict[str, Any]) -> None:
    """Write a report document at ``target`` (from ``report_target``)."""
    root.storage.write_bytes(target, (json.dumps(doc, indent=2) + "\n").encode())


def report_view_target(target: str) -> str:
    """The HTML view beside the report at ``target`` (``recovery-<UTC>.html``)."""
    return target.removesuffix(".json") + ".html"


def write_report_view(root: RunRoot, target: str, html: str) -> None:
    """Write a report's HTML view at ``target`` (from ``report_view_target``)."""
    root.storage.write_bytes(target, html.encode("utf-8"))


def reports(root: RunRoot) -> list[StoredReport]:
    """Every recovery report the audit log names, oldest first (unreadable ones left out)."""
    out = []
    for entry in recovery_entries(root):
        if entry.report is None:
            continue
        name = entry.report.rstrip("/").rsplit("/", 1)[-1]
        doc = _read_json(root, name)
        if doc is not None:
            out.append(StoredReport.from_json(doc))
    return out


def incidents(root: RunRoot) -> list[Incident]:
    """The incident ledger: each stored report's ``incident`` record, oldest first."""
    return [r.incident for r in reports(root) if r.incident is not None]


# -- files -------------------------------------------------------------------------------------


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


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


def _write_json(root: RunRoot, name: str, doc: dict[str, Any]) -> None:
    root.storage.write_bytes(audit.state_path(root, name), (json.dumps(doc, indent=2) + "\n").encode())
