"""The values of rollback and undo: candidates, who acts (``Who``), the audit record, a plan, a refusal.

Pure data (stdlib only, no I/O); ``ckptctl.core.rollback.plan`` makes the plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptctl.core.names import parse_checkpoint_name

__all__ = [
    "AMBIGUOUS_STEP",
    "COMPLETE",
    "NAME_TAKEN",
    "NOTHING_TO_ROLL_BACK",
    "NOTHING_TO_UNDO",
    "NO_FALLBACK",
    "NO_SUCH_STEP",
    "QUARANTINE",
    "RESTORE",
    "ROOT_CHANGED",
    "AuditRecord",
    "Candidate",
    "Refusal",
    "RollbackPlan",
    "Who",
    "step_record",
]

#: Audit actions a plan can carry (the audit log's ``action`` field).
QUARANTINE = "quarantine"
RESTORE = "restore"

#: The only status a fallback (or the next ``locate``) may have.
COMPLETE = "complete"

# Refusal codes (the JSON ``refused.code`` field): a contract, add, never rename.
NOTHING_TO_ROLL_BACK = "nothing-to-roll-back"
NO_FALLBACK = "no-fallback"
NO_SUCH_STEP = "no-such-step"
AMBIGUOUS_STEP = "ambiguous-step"
NOTHING_TO_UNDO = "nothing-to-undo"
NAME_TAKEN = "name-taken"
ROOT_CHANGED = "root-changed"


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One checkpoint directory in the run root, as the planner sees it."""

    name: str
    """Directory name (no slashes), e.g. ``step_30`` or ``step_30.quarantined-...``."""
    step: int
    is_temp: bool = False
    """A temp/in-progress name: never complete, never a rollback target."""
    is_quarantined: bool = False
    """Already quarantined: never a target of rollback nor a fallback; the target of undo."""
    status: str | None = None
    """Verified status of the directory's CONTENT (complete/incomplete/corrupt/unsupported);
    for a quarantined directory, the status it would have under its original name.
    ``None``: not inspected (the planner refuses to decide on an uninspected candidate)."""

    @property
    def is_live(self) -> bool:
        """Could ``locate`` return this directory (a final, unquarantined name)?"""
        return not (self.is_temp or self.is_quarantined)

    @classmethod
    def from_name(cls, name: str, status: str | None = None) -> Candidate | None:
        """Build from a directory name; None if the name is not a checkpoint name."""
        cn = parse_checkpoint_name(name)
        if cn is None:
            return None
        return cls(
            name=name,
            step=cn.step,
            is_temp=cn.is_temp,
            is_quarantined=cn.is_quarantined,
            status=status,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Who:
    """Who acted, and when: the one identity type of ckptctl. The first fields of every audit
    record (``runroot.audit``), the owner of a job (``runroot.state.ActiveJob``); gathered by
    ``adapters.audit.current_actor``."""

    time: str
    """UTC, ISO 8601 extended, to the second: ``2026-11-21T03:12:00Z``."""
    user: str
    host: str
    pid: int
    ckptctl_version: str

    def head(self) -> dict[str, Any]:
        """The leading keys of every audit record."""
        return {"time": self.time, "user": self.user, "host": self.host, "pid": self.pid}


def step_record(
    who: Who, action: str, *, from_: str | None, to: str | None, step: int | None, reason: str | None, root: str
) -> dict[str, Any]:
    """The keys (in order) every audit record about a step directory (or the lock) starts with:
    the one schema of ``quarantine``, ``restore``, ``break-lock``, ``retention-delete``, ``supersede``."""
    return {
        **who.head(),
        "action": action,
        "from": from_,
        "to": to,
        "step": step,
        "reason": reason,
        "ckptctl_version": who.ckptctl_version,
        "root": root,
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditRecord:
    """The audit record of a rollback or undo rename (schema in docs/rollback.md)."""

    who: Who
    action: str
    """``quarantine`` | ``restore``."""
    from_name: str
    """Directory name before the rename."""
    to_name: str
    """Directory name after the rename."""
    step: int | None
    reason: str | None
    root: str
    """The run root as the user named it (URL form)."""

    def to_json(self) -> dict[str, Any]:
        return step_record(
            self.who, self.action, from_=self.from_name, to=self.to_name, step=self.step, reason=self.reason, root=self.root
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RollbackPlan:
    """One rename, decided: ``source`` -> ``destination`` under ``root``, and its record."""

    action: str
    """``quarantine`` (rollback) or ``restore`` (undo)."""
    root: str
    source: str
    """Directory name renamed from."""
    destination: str
    """Directory name renamed to."""
    step: int
    source_status: str | None
    """Verified content status of the directory being renamed."""
    fallback: str | None
    """Rollback: the newest complete checkpoint older than ``source`` (always set)."""
    next_locate: str | None
    """The directory ``locate`` returns once the plan is applied (None: none at all)."""
    record: AuditRecord
    notes: tuple[str, ...] = ()

    def path(self, name: str | None) -> str | None:
        """``root``/``name`` in the user's URL form (``s3://b/run`` + ``/step_20``)."""
        if name is None:
            return None
        return f"{self.root.rstrip('/')}/{name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "root": self.root,
            "step": self.step,
            "source": {"name": self.source, "path": self.path(self.source), "status": self.source_status},
            "destination": {"name": self.destination, "path": self.path(self.destination)},
            "fallback": {"name": self.fallback, "path": self.path(self.fallback)} if self.fallback else None,
            "next_locate": (
                {"name": self.next_locate, "path": self.path(self.next_locate)} if self.next_locate else None
            ),
            "audit_record": self.record.to_json(),
            "notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Refusal:
    """Why a plan could not be made; nothing is renamed. Exit code 3."""

    code: str
    """One of the refusal codes above (stable, for scripts)."""
    message: str
    hint: str
    current_locate: str | None = None
    """What ``locate`` returns now (unchanged by the refusal)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "current_locate": self.current_locate,
        }
