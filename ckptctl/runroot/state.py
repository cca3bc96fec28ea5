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
``recoveries(root)`` pairs each ``recover`` record with its report (None when the
report is unreadable: the record still says a failure happened), and
``recover_acts(root)`` gathers what recover processes left (lock, ``drain``,
``launch``, a broken lock) so ``core.recover.ledger`` can tell a recovery that died.
Keys are a contract: added, never renamed. Readers never fail on an odd file: a
missing or unreadable one is ``None`` (or left out of a list).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ckptctl.core.launch.job import JobRef
from ckptctl.core.recover.incidents import Incident, make_incident
from ckptctl.core.recover.ledger import RecordedRecovery, RecoverAct
from ckptctl.core.rollback.model import Who
from ckptctl.core.verify import jsonsafe
from ckptctl.errors import CkptctlError
from ckptctl.runroot import audit, lock
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
    supervisor_log: str | None = None
    """The event log of the recovery supervisor that owns the job while it watches it
    (``ops.recover_supervisor``; ``owner.pid`` is that supervisor's pid)."""

    @classmethod
    def from_launch(
        cls, launch: audit.Launch, *, attempt: int | None = None, supervisor_log: str | None = None
    ) -> ActiveJob:
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
            supervisor_log=supervisor_log,
        )

    def describe(self) -> str:
        """``local job 1234 (attempt 1, from step_30) started 2026-...Z by alice on login1``."""
        extra = [f"attempt {self.attempt}"] if self.attempt is not None else []
        if self.resume_from:
            extra.append("from " + self.resume_from.rstrip("/").rsplit("/", 1)[-1])
        shown = f" ({', '.join(extra)})" if extra else ""
        who = f" by {self.owner.user}" if self.owner.user else ""
        where = f" on {self.owner.host}" if self.owner.host else ""
        return f"{self.backend} job {self.job_id}{shown} started {self.started or '?'}{who}{where}"

    @property
    def host(self) -> str:
        """The host ckptctl started it from."""
        return self.owner.host

    def ref(self) -> JobRef:
        """The job as its backend knows it (ask ``backend.state(ref)`` whether it is alive)."""
        return JobRef(backend=self.backend, job_id=self.job_id, host=self.owner.host or None)

    @staticmethod
    def ref_of(backend: str, job_id: str) -> JobRef:
        """A job this host's ckptctl just started (its ``ref()`` before a record exists)."""
        return JobRef(backend=backend, job_id=job_id, host=socket.gethostname())

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
        if self.supervisor_log is not None:
            doc["supervisor_log"] = self.supervisor_log
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
                pid=jsonsafe.bounded_int(pid, hi=2**31 - 1) or 0,
                ckptctl_version="",
            ),
            detached=bool(doc.get("detached")),
            started=_str(doc.get("started")) or "",
            resume_from=_str(doc.get("resume_from")),
            log=_str(doc.get("log")),
            attempt=jsonsafe.bounded_int(doc.get("attempt")),
            ended=_str(doc.get("ended")),
            end_reason=_str(doc.get("end_reason")),
            supervisor_log=_str(doc.get("supervisor_log")),
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


def clear_active_job(root: RunRoot, *, ended: str, reason: str, job_id: str | None = None) -> ActiveJob | None:
    """Close the recorded job (kept, with ``ended`` and ``end_reason``: ``status`` still shows
    it, nothing is deleted). Returns the closed record; None when there was none (or, with
    ``job_id``, when the open record is another job's: a later recovery's, left alone)."""
    job = read_active_job(root)
    if job is None or (job_id is not None and job.job_id != job_id):
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
    host: str | None = None
    pid: int | None = None
    """The process that wrote the record."""

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
    recoveries: tuple[audit.Subject, ...] = ("recovery",)
    for rec in (r.doc for r in audit.records(root, subjects=recoveries)):
        out.append(
            RecoveryEntry(
                time=_str(rec.get("time")),
                outcome=_str(rec.get("outcome")),
                reason=_str(rec.get("reason")),
                report=_str(rec.get("report")),
                job=rec.get("job") if isinstance(rec.get("job"), dict) else None,
                host=_str(rec.get("host")),
                pid=_int(rec.get("pid")),
            )
        )
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredAttempt:
    """One attempt of a stored report: the job it ran and what the loss watch said of it."""

    number: int | None
    checkpoint_step: int | None
    watch_verdict: str | None
    backend: str | None
    job_id: str | None
    log: str | None
    still_running: bool

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> StoredAttempt:
        found = doc.get("job")
        job: dict[str, Any] = found if isinstance(found, dict) else {}
        job_id = job.get("job_id")
        return cls(
            number=_int(doc.get("number")),
            checkpoint_step=_int(doc.get("checkpoint_step")),
            watch_verdict=_str(doc.get("watch_verdict")),
            backend=_str(job.get("backend")),
            job_id=None if job_id is None else str(job_id),
            log=_str(doc.get("log")),
            still_running=bool(doc.get("still_running")),
        )


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
    started: str | None = None
    attempts: tuple[StoredAttempt, ...] = ()

    def attempt_of(self, backend: str, job_id: str) -> StoredAttempt | None:
        """The attempt that ran this job, if this recovery started it."""
        for a in self.attempts:
            if a.job_id == job_id and a.backend in (None, backend):
                return a
        return None

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
            started=_str(doc.get("started")),
            attempts=tuple(StoredAttempt.from_json(a) for a in attempts if isinstance(a, dict)),
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


def recoveries(root: RunRoot) -> list[tuple[RecoveryEntry, StoredReport | None]]:
    """Each ``recover`` record of the audit log with its report (None: missing or unreadable), oldest first."""
    out: list[tuple[RecoveryEntry, StoredReport | None]] = []
    for entry in recovery_entries(root):
        doc = None
        if entry.report is not None:
            doc = _read_json(root, entry.report.rstrip("/").rsplit("/", 1)[-1])
        out.append((entry, None if doc is None else StoredReport.from_json(doc)))
    return out


def reports(root: RunRoot) -> list[StoredReport]:
    """Every recovery report the audit log names, oldest first (unreadable ones left out)."""
    return [r for _e, r in recoveries(root) if r is not None]


def reported_incidents(root: RunRoot) -> tuple[list[Incident], list[RecordedRecovery]]:
    """The incident of every finished recovery (a report's record; a ``recover`` record whose
    report is unreadable gives one from the record itself), and the finished recoveries."""
    found: list[Incident] = []
    recorded: list[RecordedRecovery] = []
    for entry, report in recoveries(root):
        recorded.append(RecordedRecovery(
            host=entry.host, pid=entry.pid, time=entry.time,
            started=report.started if report else None, ended=report.ended if report else None,
        ))
        if report is not None and report.incident is not None:
            found.append(report.incident)
            continue
        when = entry.when
        if when is None:
            continue
        job_id = (entry.job or {}).get("job_id")
        found.append(replace(
            make_incident(
                outcome=entry.outcome or "unknown", category=None, failure_time=None, detected=when, drained=None,
                capacity=None, relaunched=None, first_step=None, crash_step=None, checkpoint_step=None,
                verdicts=(), drained_hosts=(), job_id=None if job_id is None else str(job_id),
            ),
            source="audit",
            note=f"its report {entry.report or '(none)'} could not be read: only the audit record is left"
            if report is None else "its report has no incident record (written by an older ckptctl)",
        ))
    return found, recorded


def incidents(root: RunRoot) -> list[Incident]:
    """Each stored report's ``incident`` record, oldest first (the whole ledger, with the
    recoveries that died and the scheduler's restarts: ``ops.ledger``)."""
    return [r.incident for r in reports(root) if r.incident is not None]


def recover_acts(root: RunRoot) -> list[RecoverAct]:
    """What recover processes left: ``drain``/``launch`` records, recover locks a later process
    broke (``break-lock``), and the lock file there now when a recover holds it."""
    out = []
    for rec in audit.read(root).records:
        action, host, pid = rec.get("action"), _str(rec.get("host")), _int(rec.get("pid"))
        time = _str(rec.get("time"))
        if action in (audit.Drain.action, audit.Launch.action) and host and pid is not None and time:
            out.append(RecoverAct(
                time=time, host=host, pid=pid, kind=str(action),
                job_id=None if rec.get("job_id") is None else str(rec.get("job_id")),
                resume_from=_str(rec.get("resume_from")),
            ))
        elif action == audit.BreakLock.action and isinstance(rec.get("stale_lock"), dict):
            stale = rec["stale_lock"]
            s_host, s_pid, s_time = _str(stale.get("host")), _int(stale.get("pid")), _str(stale.get("started"))
            if stale.get("operation") == "recover" and s_host and s_pid is not None and s_time:
                out.append(RecoverAct(time=s_time, host=s_host, pid=s_pid, kind="lock"))
    held = lock.holder(root)
    if held is not None and held.operation == "recover":
        out.append(RecoverAct(
            time=held.started, host=held.host, pid=held.pid, kind="lock",
            holder_alive=lock.holder_alive(held), current_lock=True,
        ))
    return out


# -- files -------------------------------------------------------------------------------------


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_json(root: RunRoot, name: str) -> dict[str, Any] | None:
    """``<root>/.ckptctl/<name>`` as a JSON object; None when missing or unreadable."""
    storage, path = root.storage, audit.state_path(root, name)
    try:
        if storage.info(path) is None:
            return None
        # nofollow: ckptctl's own file, never read through a link; size and depth limits
        doc = jsonsafe.loads(storage.read_bytes(path, max_bytes=jsonsafe.MAX_JSON_BYTES, nofollow=True))
    except (CkptctlError, ValueError, OSError):
        return None
    return doc if isinstance(doc, dict) else None


def _write_json(root: RunRoot, name: str, doc: dict[str, Any]) -> None:
    root.storage.write_bytes(audit.state_path(root, name), (json.dumps(doc, indent=2) + "\n").encode())
