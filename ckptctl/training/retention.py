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
import os
import re
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ckptctl.adapters import audit
from ckptctl.adapters.runlock import INHERITED_TOKEN_ENV, read_lock, run_lock
from ckptctl.adapters.storage import Storage
from ckptctl.core.manifest import COMMIT_MARKER_NAME
from ckptctl.core.retention import RetentionCandidate, RetentionPolicy, plan_retention
from ckptctl.errors import LockHeldError

FINAL_NAME_RE = re.compile(r"^step_(?P<step>\d+)$")
TEMP_NAME_RE = re.compile(r"^step_(?P<step>\d+)\.tmp-[0-9A-Za-z-]+$")


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
        final = FINAL_NAME_RE.match(entry.name)
        temp = TEMP_NAME_RE.match(entry.name) if final is None else None
        m = final or temp
        if m is None:
            continue
        complete = False
        if final is not None:
            complete = entry.name in known_complete or is_complete(storage.url(entry.path))
        out.append(
            RetentionCandidate(
                name=entry.name,
                step=int(m.group("step")),
                is_complete=complete,
                is_temp=temp is not None,
                is_in_flight=entry.name in in_flight,
            )
        )
    return out


def hide_checkpoint_dir(storage: Storage, path: str) -> str:
    """Make one checkpoint directory invisible to readers; return the path left to purge.

    POSIX: rename to ``<name>.tmp-deleting-<hex>`` (atomic; a temporary name is never
    complete, and a later pass removes it if the purge never happens). Object stores: remove
    the commit marker, so the directory is uncommitted before any shard goes.
    """
    if storage.is_local:
        if TEMP_NAME_RE.match(Storage.basename(path)):
            return path
        doomed = f"{path}.tmp-deleting-{secrets.token_hex(4)}"
        storage.rename(path, doomed)
        return doomed
    storage.remove_file(Storage.join(path, COMMIT_MARKER_NAME))
    return path


def _enter_lock(stack: contextlib.ExitStack, storage: Storage, root: str) -> str | None:
    """Take the run-root lock for this pass; return why not when someone else holds it.

    A job launched by ``ckptctl recover`` runs while recover holds the lock; recover passes
    its token in ``CKPTCTL_RUN_LOCK_TOKEN``, and a holder with that token is our supervisor,
    which only acts on the run root when the job is stopped.
    """
    try:
        stack.enter_context(run_lock(storage, root, operation="retention"))
        return None
    except LockHeldError as e:
        inherited = os.environ.get(INHERITED_TOKEN_ENV)
        holder = read_lock(storage, root)
        if inherited and holder is not None and holder.token == inherited:
            return None
        return e.message


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
    taking away; the bulk removal of hidden directories happens after the lock is released.
    When another operation holds the lock, the pass is skipped (``result.skipped`` says why)
    and the next save's pass catches up.
    """
    storage, root = Storage.for_url(root_url)
    result = RetentionResult()
    doomed: list[tuple[str, str]] = []
    with contextlib.ExitStack() as stack:
        if not dry_run:
            refusal = _enter_lock(stack, storage, root)
            if refusal is not None:
                result.skipped = refusal
                return result
        candidates = scan_candidates(
            storage, root, in_flight=in_flight, known_complete=known_complete, is_complete=is_complete
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
                hidden = hide_checkpoint_dir(storage, Storage.join(root, cand.name))
            except Exception as e:  # retention must never take training down
                result.errors.append(f"{cand.name}: {e}")
                continue
            doomed.append((cand.name, hidden))
            _audit(storage, root, cand, policy)
    for name, hidden in doomed:
        try:
            storage.remove_tree(hidden)
        except Exception as e:
            result.errors.append(f"{name}: hidden as {Storage.basename(hidden)} but not removed: {e}")
            continue
        result.deleted.append(name)
    return result


def _audit(storage: Storage, root: str, cand: RetentionCandidate, policy: RetentionPolicy) -> None:
    reason = (
        f"complete, beyond keep_last={policy.keep_last}"
        if cand.is_complete
        else "temporary directory superseded by a complete checkpoint"
    )
    record_event(
        storage,
        root,
        action="retention-delete",
        from_name=cand.name,
        to_name=None,
        step=cand.step,
        reason=reason,
    )


def record_event(
    storage: Storage,
    root: str,
    *,
    action: str,
    from_name: str,
    to_name: str | None,
    step: int | None,
    reason: str,
) -> None:
    """Append one audit record (the schema ``ckptctl rollback`` uses); never raises."""
    # The mutation already happened; a failed audit append must not fail training.
    with contextlib.suppress(Exception):
        actor = audit.current_actor()
        audit.append_record(
            storage,
            root,
            {
                "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "user": actor.user,
                "host": actor.host,
                "pid": actor.pid,
                "action": action,
                "from": from_name,
                "to": to_name,
                "step": step,
                "reason": reason,
                "ckptctl_version": actor.tool_version,
                "root": storage.url(root),
                "actor": "ckptctl.training",
                "outcome": "done",
            },
        )
