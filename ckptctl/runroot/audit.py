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

Records of changes to step directories (the first four rows) also carry
``outcome`` (``done`` | ``failed``) and, when failed, ``error``, added by ``write``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal, get_args

from ckptctl.adapters import audit as log_file
from ckptctl.adapters.audit import AuditLog
from ckptctl.core.rollback.model import AuditRecord, Who, step_record
from ckptctl.runroot.root import RunRoot

AuditAction = Literal[
    "quarantine", "restore", "break-lock", "retention-delete", "supersede", "drain", "launch", "recover"
]
ACTIONS: frozenset[str] = frozenset(get_args(AuditAction))
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

    def to_json(self) -> dict[str, Any]:
        return {
            **self.who.head(),
            "action": self.action,
            "argv": list(self.argv),
            "ok": self.ok,
            "ckptctl_version": self.who.ckptctl_version,
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


AuditEntry = AuditRecord | BreakLock | StepRemoved | StepSuperseded | Drain | Launch | Recovery
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


def read(root: RunRoot) -> AuditLog:
    """The root's audit log, oldest record first (records as written, any version)."""
    return log_file.read_log(root.storage, root.path)


def state_path(root: RunRoot, name: str) -> str:
    """Path (inside the storage) of ``name`` in the root's ``.ckptctl/`` folder (reports, ``job.json``)."""
    return root.storage.join(log_file.state_dir(root.storage, root.path), name)


def log_url(root: RunRoot) -> str:
    return root.storage.url(log_file.audit_log_path(root.storage, root.path))
