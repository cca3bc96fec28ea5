"""The audit log's records, typed: one frozen dataclass per kind of action.

Every change ckptctl makes to a run root writes exactly one record to
``<root>/.ckptctl/audit.jsonl`` (the file primitive is ``ckptctl.adapters.audit``).
The set of actions is closed (``ACTIONS``); each record's ``to_json()`` gives the
JSON keys, which are a contract: add, never rename (schema: docs/rollback.md,
"The audit log", and docs/architecture.md).

| action | record | written by |
| --- | --- | --- |
| ``quarantine``, ``restore`` | ``core.rollback.model.AuditRecord`` (a plan carries it) | ``runroot.mutate.rename_step`` (rollback, undo) |
| ``break-lock`` | ``BreakLock`` | ``runroot.lock.hold`` |
| ``retention-delete`` | ``StepRemoved`` | ``runroot.mutate.hide`` (training retention) |
| ``supersede`` | ``StepSuperseded`` | ``runroot.mutate.supersede`` (training save) |
| ``drain`` | ``Drain`` | ``recover`` (``--execute-drain``) |
| ``launch`` | ``Launch`` | ``recover`` (the job exists: its backend and id) |
| ``recover`` | ``Recovery`` | ``recover`` (it ended; the report's URL) |
| ``stop-job`` | ``JobStopped`` | ``recover``/``launch --replace`` (a live job of the run root stopped first) |
| ``supersede-job`` | ``JobSuperseded`` | ``recover``/``launch`` (a job record whose job has ended, closed) |

Records of changes to step directories (the first four rows) also carry
``outcome`` (``done`` | ``failed``) and, when failed, ``error``, added by ``write``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal, cast, get_args

from ckptctl.adapters import audit as log_file
from ckptctl.adapters.audit import AuditLog
from ckptctl.core.rollback.model import AuditRecord, Who, step_record
from ckptctl.runroot.root import RunRoot

AuditAction = Literal[
    "quarantine", "restore", "break-lock", "retention-delete", "supersede", "drain", "launch", "recover",
    "stop-job", "supersede-job",
]
ACTIONS: frozenset[str] = frozenset(get_args(AuditAction))
#: What a record's action changed. Declared once for every action (a test keeps it whole):
#: readers choose records by subject (``records(..., subjects=...)``), not by action strings.
Subject = Literal["checkpoint", "host", "job", "lock", "recovery"]
SUBJECT_OF: dict[str, Subject] = {
    "quarantine": "checkpoint", "restore": "checkpoint", "retention-delete": "checkpoint", "supersede": "checkpoint",
    "drain": "host",
    "launch": "job", "stop-job": "job", "supersede-job": "job",
    "break-lock": "lock",
    "recover": "recovery",
}  # fmt: skip
Outcome = Literal["done", "failed"]
#: The ``actor`` field of records the training library writes.
TRAINING_ACTOR = "ckptctl.training"

Clock = Callable[[], datetime]


@dataclass(frozen=True, kw_only=True, slots=True)
class BreakLock:
    """A stale run-root lock (its holder provably gone) was removed."""

    action: ClassVar[AuditAction] = "break-lock"
    who: Who
    root: str
    reason: str
    stale_lock: dict[str, Any]
    """The removed lock file's contents."""

    def to_json(self) -> dict[str, Any]:
        return {
            **step_record(self.who, self.action, from_=None, to=None, step=None, reason=self.reason, root=self.root),
            "stale_lock": self.stale_lock,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRemoved:
    """Retention deleted a checkpoint directory (hidden first, then purged)."""

    action: ClassVar[AuditAction] = "retention-delete"
    who: Who
    root: str
    name: str
    step: int | None
    reason: str
    actor: str = TRAINING_ACTOR

    def to_json(self) -> dict[str, Any]:
        return {
            **step_record(self.who, self.action, from_=self.name, to=None, step=self.step, reason=self.reason,
                           root=self.root),
            "actor": self.actor,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class StepSuperseded:
    """A new save at an existing step moved the older directory aside (never deleted)."""

    action: ClassVar[AuditAction] = "supersede"
    who: Who
    root: str
    from_name: str
    to_name: str
    step: int | None
    reason: str
    actor: str = TRAINING_ACTOR

    def to_json(self) -> dict[str, Any]:
        return {
            **step_record(self.who, self.action, from_=self.from_name, to=self.to_name, step=self.step,
                           reason=self.reason, root=self.root),
            "actor": self.actor,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Drain:
    """``recover`` ran a drain command (scontrol / kubectl) for a bad host."""

    action: ClassVar[AuditAction] = "drain"
    who: Who
    argv: Sequence[str]
    ok: bool
    hosts: Sequence[str] = ()
    """The hosts the command drains (added after the first version: older records lack it)."""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.who.head(),
            "action": self.action,
            "argv": list(self.argv),
            "ok": self.ok,
            "ckptctl_version": self.who.ckptctl_version,
            "hosts": list(self.hosts),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Launch:
    """``recover`` started a job through its backend (the job exists; who owns it is ``who``)."""

    action: ClassVar[AuditAction] = "launch"
    who: Who
    backend: str
    """``local`` | ``slurm``."""
    job_id: str
    """Slurm's job id, or the local torchrun's pid."""
    script: str | None
    """The batch script submitted (slurm), else None."""
    detached: bool
    started: str
    resume_from: str | None
    log: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.who.head(),
            "action": self.action,
            "backend": self.backend,
            "job_id": self.job_id,
            "script": self.script,
            "detached": self.detached,
            "started": self.started,
            "resume_from": self.resume_from,
            "log": self.log,
            "ckptctl_version": self.who.ckptctl_version,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Recovery:
    """``recover`` finished (its outcome, not the append's) and wrote its report."""

    action: ClassVar[AuditAction] = "recover"
    who: Who
    outcome: str
    reason: str | None
    report: str | None
    """URL of the recovery report."""
    job: dict[str, Any] | None = None
    """The last attempt's job as the backend recorded it (``{backend, job_id, script, state, still_running}``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.who.head(),
            "action": self.action,
            "outcome": self.outcome,
            "reason": self.reason,
            "report": self.report,
            "job": self.job,
            "ckptctl_version": self.who.ckptctl_version,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class _JobAct:
    """A change to the run root's job record (``job.json``): the two kinds below share its keys."""

    action: ClassVar[AuditAction]
    who: Who
    backend: str
    job_id: str
    reason: str
    state: str | None
    """The job's state when it was found (its backend's word), then how it ended."""
    job: dict[str, Any]
    """The job record (``job.json``) as it was."""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.who.head(),
            "action": self.action,
            "backend": self.backend,
            "job_id": self.job_id,
            "reason": self.reason,
            "state": self.state,
            "job": self.job,
            "ckptctl_version": self.who.ckptctl_version,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class JobStopped(_JobAct):
    """``--replace``: the run root's live job (``job.json``) was stopped before a new one starts."""

    action: ClassVar[AuditAction] = "stop-job"


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSuperseded(_JobAct):
    """A job record whose job is no longer alive (dead pid, finished Slurm job) was closed."""

    action: ClassVar[AuditAction] = "supersede-job"


AuditEntry = (
    AuditRecord | BreakLock | StepRemoved | StepSuperseded | Drain | Launch | Recovery | JobStopped | JobSuperseded
)
_STEP_CHANGES = (AuditRecord, BreakLock, StepRemoved, StepSuperseded)


def write(
    root: RunRoot,
    record: AuditEntry,
    *,
    outcome: Outcome = "done",
    error: str | None = None,
    best_effort: bool = False,
) -> None:
    """Append one record. Changes to step directories carry ``outcome`` (and ``error``).

    ``best_effort``: the change already happened and the caller must not fail on a
    log it could not write (the training library); the record is then lost.
    """
    doc = record.to_json()
    if doc.get("action") not in ACTIONS:
        raise ValueError(f"audit action {doc.get('action')!r} is not one of {sorted(ACTIONS)}")
    if isinstance(record, _STEP_CHANGES):
        doc["outcome"] = outcome
        if error is not None:
            doc["error"] = error
    if best_effort:
        with contextlib.suppress(Exception):
            log_file.append_record(root.storage, root.path, doc)
        return
    log_file.append_record(root.storage, root.path, doc)


def check_writable(root: RunRoot) -> None:
    """Raise ``StorageError`` now if a record could not be appended (a link, a FIFO, a device)."""
    root.storage.check_appendable(log_file.audit_log_path(root.storage, root.path))


def read(root: RunRoot) -> AuditLog:
    """The root's audit log, oldest record first (records as written, any version)."""
    return log_file.read_log(root.storage, root.path)


@dataclass(frozen=True, slots=True)
class Logged:
    """One record as read back: its action (None: not one this version writes), what it
    changed (``SUBJECT_OF``), and the JSON as written (any version: keys are only added)."""

    action: AuditAction | None
    subject: Subject | None
    doc: dict[str, Any]

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Logged:
        raw = doc.get("action")
        action = cast(AuditAction, raw) if isinstance(raw, str) and raw in ACTIONS else None
        return cls(action=action, subject=SUBJECT_OF.get(action) if action else None, doc=doc)


def records(root: RunRoot, *, subjects: Collection[Subject] | None = None) -> list[Logged]:
    """The root's audit records, oldest first, typed; ``subjects``: only those that changed these."""
    out = [Logged.of(doc) for doc in read(root).records]
    return out if subjects is None else [r for r in out if r.subject in subjects]


def state_path(root: RunRoot, name: str) -> str:
    """Path (inside the storage) of ``name`` in the root's ``.ckptctl/`` folder (reports, ``job.json``)."""
    return root.storage.join(log_file.state_dir(root.storage, root.path), name)


def log_url(root: RunRoot) -> str:
    return root.storage.url(log_file.audit_log_path(root.storage, root.path))
