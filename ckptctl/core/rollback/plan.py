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

The values (``Candidate``, ``AuditRecord``, ``RollbackPlan``, ``Refusal``, the
codes) live in ``ckptctl.core.rollback.model``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from ckptctl.core.names import (
    STAMP_FORMAT,
    quarantine_name,
    stamp_of,
    unquarantine_name,
)
from ckptctl.core.rollback.model import (
    AMBIGUOUS_STEP,
    COMPLETE,
    NAME_TAKEN,
    NO_FALLBACK,
    NO_SUCH_STEP,
    NOTHING_TO_ROLL_BACK,
    NOTHING_TO_UNDO,
    QUARANTINE,
    RESTORE,
    ROOT_CHANGED,
    AuditRecord,
    Candidate,
    Refusal,
    RollbackPlan,
    Who,
)

__all__ = [
    "plan_rollback",
    "plan_undo",
    "stamp_to_iso",
]


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
    action: str, *, root: str, src: str, dst: str, step: int, now_stamp: str, actor: Who, reason: str | None
) -> AuditRecord:
    return AuditRecord(
        who=replace(actor, time=stamp_to_iso(now_stamp)),
        action=action,
        from_name=src,
        to_name=dst,
        step=step,
        reason=reason,
        root=root,
    )


def _root_changed(root: str, gone: Sequence[str], current_locate: str | None) -> Refusal:
    return Refusal(
        code=ROOT_CHANGED,
        message=f"the run root changed while it was being inspected: {', '.join(gone)} disappeared "
        "(a training job's retention, or someone else, is changing it); nothing was renamed",
        hint=f"run `ckptctl list {root}` to see the run root now, then retry",
        current_locate=current_locate,
    )


# ---------------------------------------------------------------------------------------
# plans
# ---------------------------------------------------------------------------------------


def plan_rollback(
    candidates: Sequence[Candidate],
    *,
    root: str,
    now_stamp: str,
    actor: Who,
    step: int | None = None,
    reason: str | None = None,
    other_names: Collection[str] = (),
    vanished: Collection[Candidate] = (),
) -> RollbackPlan | Refusal:
    """Quarantine the newest complete checkpoint (or the one at ``step``).

    ``candidates``: every checkpoint directory in the root (any order). Those that
    ``locate`` walks past must carry a status. ``other_names``: any other names in
    the root (files, non-checkpoint dirs), so the new name collides with nothing.
    ``vanished``: directories the listing named that were gone when inspected (a
    training job's retention, someone's ``rm``): one at or newer than the target
    makes the decision unsafe (the "newest" may not be what the user saw), so the
    plan is refused; older ones only shorten the walk to the fallback.
    """
    stamp_to_iso(now_stamp)  # validate before deciding anything
    live = _newest_first(c for c in candidates if c.is_live)
    current = _first_complete(live)
    current_name = current.name if current else None
    notes: list[str] = []
    gone = sorted(c.name for c in vanished if c.is_live)
    if gone and current is None and step is None:
        return _root_changed(root, gone, current_name)

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
    newer_gone = sorted(c.name for c in vanished if c.is_live and c.step >= target.step)
    if newer_gone:
        return _root_changed(root, newer_gone, current_name)

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
    actor: Who,
    step: int | None = None,
    reason: str | None = None,
    other_names: Collection[str] = (),
    vanished: Collection[Candidate] = (),
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
    gone = sorted(c.name for c in vanished if c.is_quarantined and (step is None or c.step == step))
    if gone:
        # which quarantine is "the most recent" is no longer known
        return _root_changed(root, gone, current_name)
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
