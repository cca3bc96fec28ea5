"""Apply ``keep_last=K`` to a run root: list, ask the pure policy, then delete.

Only names ckptctl writes are considered: ``step_N`` and ``step_N.tmp-<token>``.
Everything else (other frameworks' directories, ``.quarantined-`` ones left by
``ckptctl rollback``, files) is never touched. A final-named directory counts as
complete only if ckptctl's verifier says so; the policy keeps every directory
that is not complete unless it is a superseded temporary.

Deleting is made safe for readers first: on POSIX the directory is renamed to a
temporary name (atomic; ``locate`` never considers it again) and then removed;
on object stores the commit marker is removed first, so a half-deleted
directory is uncommitted, never "complete with files missing". Every deletion is
appended to ``<root>/.ckptctl/audit.jsonl``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ckptctl.adapters.storage import Storage
from ckptctl.core.names import parse_own_name
from ckptctl.core.rollback.retention import RetentionCandidate, RetentionPolicy, plan_retention
from ckptctl.runroot import lock, mutate
from ckptctl.runroot.root import RunRoot


@dataclass(slots=True)
class RetentionResult:
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None
    """Why the pass did nothing: another operation holds the run-root lock."""


def _default_is_complete(url: str) -> bool:
    from ckptctl.runroot.locate import verify_checkpoint

    return verify_checkpoint(url).is_complete


def scan_candidates(
    storage: Storage,
    root: str,
    *,
    in_flight: Collection[str] = (),
    known_complete: Collection[str] = (),
    is_complete: Callable[[str], bool] = _default_is_complete,
) -> list[RetentionCandidate]:
    """What the policy needs to know about each ckptctl-named directory under ``root``."""
    out: list[RetentionCandidate] = []
    for entry in storage.list_dir(root):
        if not entry.is_dir:
            continue
        own = parse_own_name(entry.name)
        if own is None:
            continue
        complete = False
        if not own.is_temp:
            complete = entry.name in known_complete or is_complete(storage.url(entry.path))
        out.append(
            RetentionCandidate(
                name=entry.name,
                step=own.step,
                is_complete=complete,
                is_temp=own.is_temp,
                is_in_flight=entry.name in in_flight,
            )
        )
    return out


def apply_retention(
    root_url: str,
    policy: RetentionPolicy,
    *,
    in_flight: Collection[str] = (),
    known_complete: Collection[str] = (),
    is_complete: Callable[[str], bool] = _default_is_complete,
    dry_run: bool = False,
) -> RetentionResult:
    """Delete what ``plan_retention`` says to delete under ``root_url`` (nothing if ``dry_run``).

    The decision, the hiding (rename or marker removal) and the audit records happen under
    the run-root lock, so ``ckptctl rollback`` never plans against a directory retention is
    taking away; the bulk removal of hidden directories happens after the lock is released
    (a hidden directory is never a candidate for ``locate`` or ``rollback``). When another
    operation holds the lock, the pass is skipped (``result.skipped`` says why) and the next
    save's pass catches up. Renames and removals go through ``ckptctl.runroot.mutate``.
    """
    root = RunRoot.for_url(root_url)
    result = RetentionResult()
    doomed: list[tuple[str, str]] = []
    with contextlib.ExitStack() as stack:
        if not dry_run:
            refusal = lock.hold_for_pass(stack, root, "retention")
            if refusal is not None:
                result.skipped = refusal
                return result
        candidates = scan_candidates(
            root.storage,
            root.path,
            in_flight=in_flight,
            known_complete=known_complete,
            is_complete=is_complete,
        )
        decisions = plan_retention(candidates, policy)
        for cand, keep in zip(candidates, decisions, strict=True):
            if keep:
                result.kept.append(cand.name)
                continue
            if dry_run:
                result.deleted.append(cand.name)
                continue
            try:
                hidden = mutate.hide(root, cand.name, step=cand.step, reason=_reason(cand, policy))
            except Exception as e:  # retention must never take training down
                result.errors.append(f"{cand.name}: {e}")
                continue
            doomed.append((cand.name, hidden))
    for name, hidden in doomed:
        try:
            mutate.purge(root, hidden)
        except Exception as e:
            result.errors.append(f"{name}: hidden as {Storage.basename(hidden)} but not removed: {e}")
            continue
        result.deleted.append(name)
    return result


def _reason(cand: RetentionCandidate, policy: RetentionPolicy) -> str:
    if cand.is_complete:
        return f"complete, beyond keep_last={policy.keep_last}"
    return "temporary directory superseded by a complete checkpoint"
