"""rollback / undo: quarantine a checkpoint reversibly, under the run-root lock, with an audit record.

Gathers facts through ``Storage`` and ``ckptctl.ops.checkpoints`` (the same
verification ``locate`` uses), lets ``ckptctl.core.rollback`` decide, then
applies the plan: one rename and one audit record. Returns result objects with
``to_json()``; never prints.

Order of a real run (``dry_run=False``)::

    take the lock  ->  inspect (newest complete, then the newest complete older
    than it)  ->  plan (refuse if there is no earlier complete checkpoint)  ->
    rename  ->  append the audit record  ->  locate again  ->  release the lock

The plan is made under the lock, so two rollbacks cannot both pick the same
target. A dry run makes the same plan without the lock and changes nothing.

For ``recover``: call ``rollback(root, held_lock=held)`` from inside your own
``run_lock(...)`` block to quarantine without taking the lock a second time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from ckptctl.adapters import audit
from ckptctl.adapters.runlock import HeldLock, read_lock, run_lock
from ckptctl.adapters.storage import Storage
from ckptctl.core import rollback as plan_core
from ckptctl.core import verify as v
from ckptctl.core.rollback import Candidate, Refusal, RollbackPlan
from ckptctl.errors import StorageError
from ckptctl.ops.checkpoints import (
    CheckOptions,
    CheckpointReport,
    LocateResult,
    PointerHint,
    ProgressFn,
    find_latest_complete,
    inspect_checkpoint,
    scan_root,
)

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


# ---------------------------------------------------------------------------------------
# facts
# ---------------------------------------------------------------------------------------


def _open(url: str) -> tuple[Storage, str]:
    return Storage.open_directory(url)


def _stamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime(plan_core.STAMP_FORMAT)


def _content_status(report: CheckpointReport) -> str:
    """Status of a quarantined directory's content, as if it had its original name."""
    if not report.is_quarantined:
        return report.status
    kept = [p for p in report.problem_details if p.code != v.QUARANTINED]
    return v.status_of(kept)


def _reports(*located: LocateResult) -> Iterable[CheckpointReport]:
    for loc in located:
        yield from loc.skipped
        if loc.checkpoint is not None:
            yield loc.checkpoint


def _candidates(
    storage: Storage, root: str, statuses: dict[str, str]
) -> tuple[list[Candidate], list[str], dict[str, str]]:
    """Every checkpoint directory (with the statuses known so far), other names, name -> path."""
    entries = storage.list_dir(root)
    scan = scan_root(storage, root, entries)
    cands = []
    paths = {}
    for cn, e in scan.candidates:
        cands.append(
            Candidate(
                name=cn.name,
                step=cn.step,
                is_temp=cn.is_temp,
                is_quarantined=cn.is_quarantined,
                status=statuses.get(cn.name),
            )
        )
        paths[cn.name] = e.path
    named = {c.name for c in cands}
    others = [e.name for e in entries if e.name not in named]
    return cands, others, paths


def _rollback_facts(
    storage: Storage, root: str, url: str, step: int | None, options: CheckOptions, progress: ProgressFn
) -> tuple[list[Candidate], list[str], dict[str, str]]:
    """Inspect what the rollback decision walks past, newest first, as ``locate`` would."""
    current = find_latest_complete(url, options=CheckOptions(world_size=options.world_size), progress=progress)
    statuses: dict[str, str] = {r.name: r.status for r in _reports(current)}
    cands, others, paths = _candidates(storage, root, statuses)
    target: Candidate | None = None
    if step is None:
        newest = current.checkpoint.name if current.checkpoint else None
        target = next((c for c in cands if c.name == newest), None)
    else:
        matches = [c for c in cands if c.is_live and c.step == step]
        if len(matches) == 1:
            target = matches[0]
            if target.status is None:
                report = inspect_checkpoint(storage, paths[target.name], options=options, progress=progress)
                statuses[target.name] = report.status
    if target is not None:
        # The safety rule, checked by the same code `locate --before` runs.
        older = find_latest_complete(url, options=options, before_step=target.step, progress=progress)
        statuses.update({r.name: r.status for r in _reports(older)})
    cands = [_with_status(c, statuses) for c in cands]
    return cands, others, paths


def _with_status(c: Candidate, statuses: dict[str, str]) -> Candidate:
    return replace(c, status=statuses.get(c.name, c.status))


def _undo_facts(
    storage: Storage, root: str, url: str, step: int | None, progress: ProgressFn
) -> tuple[list[Candidate], list[str], dict[str, str]]:
    current = find_latest_complete(url, progress=progress)
    statuses: dict[str, str] = {r.name: r.status for r in _reports(current)}
    cands, others, paths = _candidates(storage, root, statuses)
    for c in cands:
        if c.is_quarantined and (step is None or c.step == step):
            report = inspect_checkpoint(storage, paths[c.name], progress=progress)
            statuses[c.name] = _content_status(report)
    return [_with_status(c, statuses) for c in cands], others, paths


# ---------------------------------------------------------------------------------------
# apply
# ---------------------------------------------------------------------------------------


def _apply(storage: Storage, root: str, plan: RollbackPlan, paths: dict[str, str]) -> None:
    """One rename, then its audit record. A failed rename is logged too, then re-raised."""
    src = paths[plan.source]
    dst = storage.join(root, plan.destination)
    try:
        storage.rename(src, dst)
    except StorageError as e:
        audit.append_record(
            storage, root, {**plan.record.to_json(), "outcome": "failed", "error": e.message}
        )
        both = (
            ""
            if storage.is_local
            else " On an object store a rename is copy-then-delete: both copies may now exist, "
            "never neither; the quarantined name is never complete, so a leftover copy is harmless."
        )
        raise StorageError(
            f"could not rename {plan.source} to {plan.destination}: {e.message}.{both}",
            hint=f"run `ckptctl list {storage.url(root)}` to see the state; see docs/rollback.md "
            "(interrupted renames) before retrying",
        ) from e
    storage.invalidate_cache(root)
    audit.append_record(storage, root, {**plan.record.to_json(), "outcome": "done"})


def _log_broken_lock(storage: Storage, root: str, url: str, held: HeldLock, now: datetime) -> None:
    stale = held.broke_stale
    if stale is None:
        return
    actor = audit.current_actor()
    audit.append_record(
        storage,
        root,
        {
            "time": plan_core.stamp_to_iso(_stamp(now)),
            "user": actor.user,
            "host": actor.host,
            "pid": actor.pid,
            "action": "break-lock",
            "from": None,
            "to": None,
            "step": None,
            "reason": f"stale lock: holder pid {stale.pid} on {stale.host} is gone",
            "ckptctl_version": actor.tool_version,
            "root": url,
            "stale_lock": stale.to_json(),
            "outcome": "done",
        },
    )


# ---------------------------------------------------------------------------------------
# use cases
# ---------------------------------------------------------------------------------------


def rollback(
    root: str,
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
        facts=lambda storage, path: _rollback_facts(storage, path, root, step, options, progress),
        decide=lambda cands, others, url, stamp: plan_core.plan_rollback(
            cands,
            root=url,
            now_stamp=stamp,
            actor=audit.current_actor(),
            step=step,
            reason=reason,
            other_names=others,
        ),
        progress=progress,
    )


def undo(
    root: str,
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
        facts=lambda storage, path: _undo_facts(storage, path, root, step, progress),
        decide=lambda cands, others, url, stamp: plan_core.plan_undo(
            cands,
            root=url,
            now_stamp=stamp,
            actor=audit.current_actor(),
            step=step,
            reason=reason,
            other_names=others,
        ),
        progress=progress,
    )


@dataclass(frozen=True, slots=True)
class _Prepared:
    plan: RollbackPlan
    known: dict[str, str | None]
    """Statuses the plan saw (a --deep verdict included)."""
    paths: dict[str, str]
    """Directory name -> storage path."""


Facts = Callable[[Storage, str], tuple[list[Candidate], list[str], dict[str, str]]]
Decide = Callable[[list[Candidate], list[str], str, str], "RollbackPlan | Refusal"]


def _run(
    operation: str,
    root: str,
    *,
    dry_run: bool,
    held_lock: HeldLock | None,
    now: Clock,
    facts: Facts,
    decide: Decide,
    progress: ProgressFn,
) -> RollbackResult:
    storage, path = _open(root)
    url = storage.url(path)
    result = RollbackResult(
        operation=operation, root=url, dry_run=dry_run, audit_log=storage.url(audit.audit_log_path(storage, path))
    )

    def plan() -> _Prepared | None:
        """Decide, and record the plan or the refusal; the rename to apply, if any."""
        cands, others, paths = facts(storage, path)
        decision = decide(cands, others, url, _stamp(now()))
        if isinstance(decision, Refusal):
            result.refusal = decision
            result.locate = _path(url, decision.current_locate)
            return None
        result.plan = decision
        result.warnings.extend(decision.notes)
        result.locate = decision.path(decision.next_locate)
        return _Prepared(decision, {c.name: c.status for c in cands}, paths)

    def apply(prepared: _Prepared) -> None:
        _apply(storage, path, prepared.plan, prepared.paths)
        result.done = True
        _check_after(result, prepared.plan, prepared.known, root, progress)

    if dry_run:
        holder = read_lock(storage, path)
        if holder is not None:
            result.warnings.append(f"the run root is locked ({holder.describe()}): a real run would be refused now")
        plan()
        return result
    if held_lock is not None:
        prepared = plan()
        if prepared is not None:
            apply(prepared)
        return result
    if not scan_root(storage, path).candidates:
        # Not a run root (maybe a checkpoint directory) or an empty one: refuse
        # without writing a lock file into that directory.
        if plan() is None:
            return result
        result.plan, result.warnings = None, []  # something appeared: decide again, locked
    with run_lock(storage, path, operation=operation) as held:
        result.lock = held
        if held.broke_stale is not None:
            result.warnings.append(f"removed a stale lock: {held.broke_stale.describe()}; that process is gone")
            _log_broken_lock(storage, path, url, held, now())
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
    root: str,
    progress: ProgressFn,
) -> None:
    """Locate again (quick, as `ckptctl locate` does) and compare with the plan."""
    located = find_latest_complete(root, progress=progress)
    after = located.checkpoint
    if plan.action == plan_core.QUARANTINE:
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
    if after_name is not None and known.get(after_name) not in (None, plan_core.COMPLETE):
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


def read_audit(root: str) -> audit.AuditLog:
    """The run root's audit log, oldest record first (empty when there is none)."""
    storage, path = _open(root)
    return audit.read_log(storage, path)
