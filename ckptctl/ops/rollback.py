"""rollback / undo: quarantine a checkpoint reversibly, under the run-root lock, with an audit record.

Opens the run root once (``runroot.RunRoot``), gathers facts from one listing
(``runroot.candidates``: the same walk ``locate`` makes), lets
``ckptctl.core.rollback.plan`` decide, then applies the plan through
``runroot.mutate`` (one rename, one audit record). Returns result objects with
``to_json()``; never prints.

Order of a real run (``dry_run=False``)::

    take the lock  ->  inspect (newest complete, then the newest complete older
    than it)  ->  plan (refuse if there is no earlier complete checkpoint)  ->
    rename  ->  append the audit record  ->  locate again  ->  release the lock

The plan is made under the lock, so two rollbacks cannot both pick the same
target. A dry run makes the same plan without the lock and changes nothing.

For ``recover``: call ``rollback(run_root, held_lock=held)`` from inside your own
``runroot.lock.hold(...)`` block to quarantine without taking the lock a second time;
``root`` may be the ``RunRoot`` already open (a URL is opened once here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ckptctl.adapters.audit import AuditLog, current_actor
from ckptctl.adapters.runlock import HeldLock
from ckptctl.core.names import STAMP_FORMAT
from ckptctl.core.rollback.model import COMPLETE, QUARANTINE, Refusal, RollbackPlan
from ckptctl.core.rollback.plan import plan_rollback, plan_undo
from ckptctl.runroot import audit, lock, mutate
from ckptctl.runroot.candidates import RootFacts, rollback_facts, undo_facts
from ckptctl.runroot.inspect import scan_root
from ckptctl.runroot.locate import find_latest_complete
from ckptctl.runroot.reports import CheckOptions, PointerHint, ProgressFn
from ckptctl.runroot.root import RunRoot, as_run_root

ROLLBACK = "rollback"
UNDO = "undo"

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _noop(_: int) -> None:
    return None


@dataclass(slots=True)
class RollbackResult:
    """What a rollback or undo decided and did."""

    operation: str
    """``rollback`` or ``undo``."""
    root: str
    dry_run: bool
    plan: RollbackPlan | None = None
    refusal: Refusal | None = None
    done: bool = False
    """The rename happened and its audit record was written."""
    locate: str | None = None
    """Path ``locate`` returns now (after a real run: checked by locating again;
    dry run: the plan's prediction; refusal: unchanged)."""
    warnings: list[str] = field(default_factory=list)
    lock: HeldLock | None = None
    audit_log: str | None = None
    """URL of the audit log."""

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "root": self.root,
            "dry_run": self.dry_run,
            "done": self.done,
            "refused": self.refusal.to_json() if self.refusal else None,
            "plan": self.plan.to_json() if self.plan else None,
            "locate": self.locate,
            "warnings": self.warnings,
            "lock": self.lock.to_json() if self.lock else None,
            "audit_log": self.audit_log,
        }


def _stamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime(STAMP_FORMAT)


# ---------------------------------------------------------------------------------------
# use cases
# ---------------------------------------------------------------------------------------


def rollback(
    root: str | RunRoot,
    *,
    step: int | None = None,
    reason: str | None = None,
    deep: bool = False,
    world_size: int | None = None,
    dry_run: bool = False,
    held_lock: HeldLock | None = None,
    now: Clock = _utc_now,
    progress: ProgressFn = _noop,
) -> RollbackResult:
    """Quarantine the newest complete checkpoint (or the one at ``step``) under ``root``.

    ``deep`` verifies the fallback deeply (every byte). Refuses (``result.refusal``,
    nothing renamed) when no complete checkpoint older than the target exists.
    ``held_lock``: the caller already holds the run-root lock (``recover``).
    """
    options = CheckOptions(deep=deep, world_size=world_size)
    return _run(
        ROLLBACK,
        root,
        dry_run=dry_run,
        held_lock=held_lock,
        now=now,
        facts=lambda rr: rollback_facts(rr, step=step, options=options, progress=progress),
        decide=lambda known, url, stamp: plan_rollback(
            known.candidates,
            root=url,
            now_stamp=stamp,
            actor=current_actor(),
            step=step,
            reason=reason,
            other_names=known.other_names,
            vanished=known.vanished,
        ),
        progress=progress,
    )


def undo(
    root: str | RunRoot,
    *,
    step: int | None = None,
    reason: str | None = None,
    dry_run: bool = False,
    held_lock: HeldLock | None = None,
    now: Clock = _utc_now,
    progress: ProgressFn = _noop,
) -> RollbackResult:
    """Restore the most recently quarantined checkpoint (or the newest-stamped one at ``step``)."""
    return _run(
        UNDO,
        root,
        dry_run=dry_run,
        held_lock=held_lock,
        now=now,
        facts=lambda rr: undo_facts(rr, step=step, progress=progress),
        decide=lambda known, url, stamp: plan_undo(
            known.candidates,
            root=url,
            now_stamp=stamp,
            actor=current_actor(),
            step=step,
            reason=reason,
            other_names=known.other_names,
            vanished=known.vanished,
        ),
        progress=progress,
    )


@dataclass(frozen=True, slots=True)
class _Prepared:
    plan: RollbackPlan
    known: dict[str, str | None]
    """Statuses the plan saw (a --deep verdict included)."""


Facts = Callable[[RunRoot], RootFacts]
Decide = Callable[[RootFacts, str, str], "RollbackPlan | Refusal"]


def _run(
    operation: str,
    root: str | RunRoot,
    *,
    dry_run: bool,
    held_lock: HeldLock | None,
    now: Clock,
    facts: Facts,
    decide: Decide,
    progress: ProgressFn,
) -> RollbackResult:
    rr = as_run_root(root)
    url = rr.url
    result = RollbackResult(operation=operation, root=url, dry_run=dry_run, audit_log=audit.log_url(rr))

    def plan() -> _Prepared | None:
        """Decide, and record the plan or the refusal; the rename to apply, if any."""
        known = facts(rr)
        note = known.note()
        if note is not None:
            result.warnings.append(note)
        cands = known.candidates
        decision = decide(known, url, _stamp(now()))
        if isinstance(decision, Refusal):
            result.refusal = decision
            result.locate = _path(url, decision.current_locate)
            return None
        result.plan = decision
        result.warnings.extend(decision.notes)
        result.locate = decision.path(decision.next_locate)
        return _Prepared(decision, {c.name: c.status for c in cands})

    def apply(prepared: _Prepared) -> None:
        act = mutate.quarantine if prepared.plan.action == QUARANTINE else mutate.restore
        act(rr, prepared.plan.record)
        result.done = True
        _check_after(result, prepared.plan, prepared.known, rr, progress)

    if dry_run:
        holder = lock.holder(rr)
        if holder is not None:
            result.warnings.append(f"the run root is locked ({holder.describe()}): a real run would be refused now")
        plan()
        return result
    if held_lock is not None:
        prepared = plan()
        if prepared is not None:
            apply(prepared)
        return result
    if not scan_root(rr.storage, rr.path).candidates:
        # Not a run root (maybe a checkpoint directory) or an empty one: refuse
        # without writing a lock file into that directory.
        if plan() is None:
            return result
        result.plan, result.warnings = None, []  # something appeared: decide again, locked
    with lock.hold(rr, operation, clock=now) as held:
        result.lock = held
        if held.broke_stale is not None:
            # runroot.lock has written the break-lock audit record
            result.warnings.append(f"removed a stale lock: {held.broke_stale.describe()}; that process is gone")
        result.warnings.extend(held.notes)
        # Decided under the lock: a concurrent rollback cannot have picked the same target.
        prepared = plan()
        if prepared is not None:
            apply(prepared)
    return result


def _check_after(
    result: RollbackResult,
    plan: RollbackPlan,
    known: dict[str, str | None],
    root: RunRoot,
    progress: ProgressFn,
) -> None:
    """Locate again (quick, as `ckptctl locate` does) and compare with the plan."""
    located = find_latest_complete(root, progress=progress)
    after = located.checkpoint
    if plan.action == QUARANTINE:
        for p in located.pointers:
            if _names(p, plan.source, plan.step):
                result.warnings.append(
                    f"the framework pointer file {p.file} still names {p.names!r}, now quarantined: "
                    f"a resume that trusts it will fail or pick the wrong step; point it at "
                    f"{plan.next_locate} (ckptctl never edits framework files)"
                )
    after_name = after.name if after else None
    if after_name == plan.next_locate:
        result.locate = after.path if after else None
        return
    if after_name is not None and known.get(after_name) not in (None, COMPLETE):
        # The plan saw a stronger verdict (--deep) than a quick locate can: keep to it.
        result.locate = plan.path(plan.next_locate)
        result.warnings.append(
            f"a plain `ckptctl locate` returns {after_name}: it passes the quick check but failed "
            f"the --deep check; the newest deeply verified checkpoint is {plan.next_locate}. Resume "
            f"from that path (or use `ckptctl locate --deep`), or roll {after_name} back too"
        )
        return
    result.locate = after.path if after else None
    result.warnings.append(
        f"locate now returns {after_name or 'nothing'}, not {plan.next_locate} as planned: the run "
        "root changed while we worked (is a training job still writing to it?)"
    )


def _names(pointer: PointerHint, name: str, step: int) -> bool:
    """Does a framework 'latest' file name this checkpoint (by directory name or step)?"""
    text = pointer.names.strip()
    return text.rstrip("/").split("/")[-1] == name or (text.isdigit() and int(text) == step)


def _path(url: str, name: str | None) -> str | None:
    return f"{url.rstrip('/')}/{name}" if name else None


def read_audit(root: str | RunRoot) -> AuditLog:
    """The run root's audit log, oldest record first (empty when there is none)."""
    return audit.read(as_run_root(root))
