"""Rollback and undo as pure plans: which directory is renamed, what ``locate`` returns next.

The ops layer gathers plain facts (the run root's checkpoint names and, for the
ones it inspected, their verified status) and these functions decide. A plan is
a value: ``ckptctl rollback --dry-run`` prints it, a real run applies exactly
it (STYLE.md habit 2). Nothing here does I/O or reads a clock: the caller passes
``now_stamp`` and who is acting.

Rules (DESIGN.md, "Data-safety rules"):

- Rollback quarantines: it renames ``step_30`` to
  ``step_30.quarantined-20261121T031200Z``. A quarantined name is never complete,
  so ``locate`` skips it; nothing is deleted and the rename is reversed by undo.
- Rollback refuses when no COMPLETE checkpoint older than the one it would
  quarantine exists: falling back onto nothing is worse than not rolling back.
- Undo restores the most recently quarantined checkpoint (by the UTC stamp in
  its name; or the one at ``step``) and refuses when its original name is taken.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ckptctl.core.names import (
    QUARANTINE_TAG,
    STAMP_FORMAT,
    parse_checkpoint_name,
    quarantine_name,
    unquarantine_name,
)

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
class Actor:
    """Who is acting, for the audit record (gathered by the ops layer)."""

    user: str
    host: str
    pid: int
    tool_version: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditRecord:
    """One line of ``<root>/.ckptctl/audit.jsonl`` (schema in docs/rollback.md)."""

    time: str
    """UTC, ISO 8601 extended, to the second: ``2026-11-21T03:12:00Z``."""
    user: str
    host: str
    pid: int
    action: str
    """``quarantine`` | ``restore`` (| ``break-lock``, written by the ops layer)."""
    from_name: str
    """Directory name before the rename."""
    to_name: str
    """Directory name after the rename."""
    step: int | None
    reason: str | None
    ckptctl_version: str
    root: str
    """The run root as the user named it (URL form)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "user": self.user,
            "host": self.host,
            "pid": self.pid,
            "action": self.action,
            "from": self.from_name,
            "to": self.to_name,
            "step": self.step,
            "reason": self.reason,
            "ckptctl_version": self.ckptctl_version,
            "root": self.root,
        }


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


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def stamp_to_iso(now_stamp: str) -> str:
    """``20261121T031200Z`` -> ``2026-11-21T03:12:00Z``; ValueError if malformed."""
    try:
        dt = datetime.strptime(now_stamp, STAMP_FORMAT)
    except ValueError as e:
        raise ValueError(f"now_stamp {now_stamp!r} is not of the form 20261121T031200Z") from e
    if dt.strftime(STAMP_FORMAT) != now_stamp:  # strptime accepts '0312' for %H%M%S
        raise ValueError(f"now_stamp {now_stamp!r} is not of the form 20261121T031200Z")
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp_of(name: str) -> str:
    """The quarantine stamp in a quarantined name ('' when it is not one)."""
    return name.split(QUARANTINE_TAG, 1)[1] if QUARANTINE_TAG in name else ""


def _newest_first(candidates: Iterable[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (-c.step, c.name))


def _first_complete(ordered: Iterable[Candidate]) -> Candidate | None:
    """Walk newest first, as ``locate`` does, to the first complete candidate.

    Every candidate passed on the way must have been inspected: the ops layer
    probes newest first, so an uninspected one here is a bug, not a user error.
    """
    for c in ordered:
        if c.status is None:
            raise ValueError(f"candidate {c.name!r} was not inspected: cannot decide past it")
        if c.status == COMPLETE:
            return c
    return None


def _free_name(base: str, stamp: str, taken: Collection[str]) -> str:
    """``quarantine_name`` made unique: a second rollback of the same name within
    the same second gets ``...Z-2`` (still sorts after ``...Z``)."""
    name = quarantine_name(base, stamp)
    n = 2
    while name in taken:
        name = quarantine_name(base, f"{stamp}-{n}")
        n += 1
    return name


def _record(
    action: str, *, root: str, src: str, dst: str, step: int, now_stamp: str, actor: Actor, reason: str | None
) -> AuditRecord:
    return AuditRecord(
        time=stamp_to_iso(now_stamp),
        user=actor.user,
        host=actor.host,
        pid=actor.pid,
        action=action,
        from_name=src,
        to_name=dst,
        step=step,
        reason=reason,
        ckptctl_version=actor.tool_version,
        root=root,
    )


# ---------------------------------------------------------------------------------------
# plans
# ---------------------------------------------------------------------------------------


def plan_rollback(
    candidates: Sequence[Candidate],
    *,
    root: str,
    now_stamp: str,
    actor: Actor,
    step: int | None = None,
    reason: str | None = None,
    other_names: Collection[str] = (),
) -> RollbackPlan | Refusal:
    """Quarantine the newest complete checkpoint (or the one at ``step``).

    ``candidates``: every checkpoint directory in the root (any order). Those that
    ``locate`` walks past must carry a status. ``other_names``: any other names in
    the root (files, non-checkpoint dirs), so the new name collides with nothing.
    """
    stamp_to_iso(now_stamp)  # validate before deciding anything
    live = _newest_first(c for c in candidates if c.is_live)
    current = _first_complete(live)
    current_name = current.name if current else None
    notes: list[str] = []

    if step is None:
        if current is None:
            return Refusal(
                code=NOTHING_TO_ROLL_BACK,
                message="no complete checkpoint in the run root: nothing to roll back",
                hint=f"run `ckptctl list {root}` to see every checkpoint and why it is not complete",
            )
        target = current
    else:
        matches = [c for c in live if c.step == step]
        if not matches:
            quarantined = sorted(c.name for c in candidates if c.is_quarantined and c.step == step)
            temps = sorted(c.name for c in candidates if c.is_temp and c.step == step)
            detail = ""
            if quarantined:
                detail = f" (already quarantined: {', '.join(quarantined)})"
            elif temps:
                detail = f" (only a temporary directory: {', '.join(temps)}; locate already skips it)"
            return Refusal(
                code=NO_SUCH_STEP,
                message=f"no checkpoint at step {step} to roll back{detail}",
                hint=f"run `ckptctl list {root}` to see the steps there are",
                current_locate=current_name,
            )
        if len(matches) > 1:
            return Refusal(
                code=AMBIGUOUS_STEP,
                message=f"more than one checkpoint directory at step {step}: "
                + ", ".join(c.name for c in matches),
                hint="rename the one that is not the run's checkpoint by hand, then retry",
                current_locate=current_name,
            )
        target = matches[0]
        if target.status is None:
            raise ValueError(f"candidate {target.name!r} was not inspected: cannot plan its rollback")
        if target.status != COMPLETE:
            notes.append(
                f"{target.name} is already not complete ({target.status}): locate skips it even "
                "without a quarantine; quarantining it only marks it bad for people and tools"
            )

    # The safety rule: a COMPLETE checkpoint older than the target must exist.
    older = [c for c in live if c.step < target.step]
    fallback = _first_complete(older)
    if fallback is None:
        return Refusal(
            code=NO_FALLBACK,
            message=f"refusing to roll back {target.name}: no complete checkpoint older than step "
            f"{target.step} to fall back to",
            hint=f"nothing was renamed; run `ckptctl list {root}` to see why the older checkpoints "
            "are not complete",
            current_locate=current_name,
        )

    next_locate = _first_complete(c for c in live if c.name != target.name)
    if next_locate is not None and next_locate.name != fallback.name:
        notes.append(
            f"{next_locate.name} is newer than {target.name} and complete: locate will still return "
            f"it; roll back without --step to fall back from the newest"
        )
    earlier = sorted(
        c.name for c in candidates if c.is_quarantined and unquarantine_name(c.name) == target.name
    )
    if earlier:
        notes.append(
            f"{target.name} was quarantined before ({', '.join(earlier)}): either it was saved "
            "again after that rollback, or a rename on an object store was interrupted; "
            "see the audit log"
        )

    taken = {c.name for c in candidates} | set(other_names)
    destination = _free_name(target.name, now_stamp, taken)
    return RollbackPlan(
        action=QUARANTINE,
        root=root,
        source=target.name,
        destination=destination,
        step=target.step,
        source_status=target.status,
        fallback=fallback.name,
        next_locate=next_locate.name if next_locate else None,
        record=_record(
            QUARANTINE,
            root=root,
            src=target.name,
            dst=destination,
            step=target.step,
            now_stamp=now_stamp,
            actor=actor,
            reason=reason,
        ),
        notes=tuple(notes),
    )


def plan_undo(
    candidates: Sequence[Candidate],
    *,
    root: str,
    now_stamp: str,
    actor: Actor,
    step: int | None = None,
    reason: str | None = None,
    other_names: Collection[str] = (),
) -> RollbackPlan | Refusal:
    """Restore the most recently quarantined checkpoint (or the newest-stamped one at ``step``).

    Most recent = the latest stamp in the quarantined name; at equal stamps the
    lower step (successive rollbacks go back in steps). Quarantined candidates
    must carry their content status, and live ones the status ``locate`` walks.
    """
    stamp_to_iso(now_stamp)
    live = _newest_first(c for c in candidates if c.is_live)
    current = _first_complete(live)
    current_name = current.name if current else None
    quarantined = [c for c in candidates if c.is_quarantined and (step is None or c.step == step)]
    if not quarantined:
        where = f" at step {step}" if step is not None else ""
        return Refusal(
            code=NOTHING_TO_UNDO,
            message=f"no quarantined checkpoint{where} in the run root: nothing to undo",
            hint=f"`ckptctl audit {root}` shows past rollbacks",
            current_locate=current_name,
        )
    target = max(quarantined, key=lambda c: (stamp_of(c.name), -c.step))
    original = unquarantine_name(target.name)
    assert original is not None  # is_quarantined guarantees the tag
    taken = {c.name for c in candidates} | set(other_names)
    if original in taken:
        return Refusal(
            code=NAME_TAKEN,
            message=f"cannot restore {target.name}: {original} exists (saved again since the rollback?)",
            hint=f"nothing was renamed; to restore the old one anyway, first rename {original} "
            f"aside by hand (e.g. to {original}.replaced), then undo again",
            current_locate=current_name,
        )
    if target.status is None:
        raise ValueError(f"candidate {target.name!r} was not inspected: cannot predict its restore")
    notes: list[str] = []
    restored = Candidate(name=original, step=target.step, status=target.status)
    next_locate = _first_complete(_newest_first([*live, restored]))
    if target.status != COMPLETE:
        notes.append(
            f"{target.name} is not complete ({target.status}): it is restored, but locate will "
            "not return it"
        )
    return RollbackPlan(
        action=RESTORE,
        root=root,
        source=target.name,
        destination=original,
        step=target.step,
        source_status=target.status,
        fallback=None,
        next_locate=next_locate.name if next_locate else None,
        record=_record(
            RESTORE,
            root=root,
            src=target.name,
            dst=original,
            step=target.step,
            now_stamp=now_stamp,
            actor=actor,
            reason=reason,
        ),
        notes=tuple(notes),
    )
