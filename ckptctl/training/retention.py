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
import re
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ckptctl.adapters import audit
from ckptctl.adapters.storage import Storage
from ckptctl.core.manifest import COMMIT_MARKER_NAME
from ckptctl.core.retention import RetentionCandidate, RetentionPolicy, plan_retention

FINAL_NAME_RE = re.compile(r"^step_(?P<step>\d+)$")
TEMP_NAME_RE = re.compile(r"^step_(?P<step>\d+)\.tmp-[0-9A-Za-z-]+$")


@dataclass(slots=True)
class RetentionResult:
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _default_is_complete(url: str) -> bool:
    from ckptctl.ops.checkpoints import verify_checkpoint

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


def delete_checkpoint_dir(storage: Storage, path: str) -> None:
    """Delete one checkpoint directory so that no reader ever sees it half-deleted as complete."""
    if storage.is_local:
        doomed = (
            f"{path}.tmp-deleting-{secrets.token_hex(4)}"
            if not TEMP_NAME_RE.match(Storage.basename(path))
            else path
        )
        if doomed != path:
            storage.rename(path, doomed)
        storage.remove_tree(doomed)
        return
    marker = Storage.join(path, COMMIT_MARKER_NAME)
    storage.remove_file(marker)
    storage.remove_tree(path)


def apply_retention(
    root_url: str,
    policy: RetentionPolicy,
    *,
    in_flight: Collection[str] = (),
    known_complete: Collection[str] = (),
    is_complete: Callable[[str], bool] = _default_is_complete,
    dry_run: bool = False,
) -> RetentionResult:
    """Delete what ``plan_retention`` says to delete under ``root_url`` (nothing if ``dry_run``)."""
    storage, root = Storage.for_url(root_url)
    candidates = scan_candidates(
        storage, root, in_flight=in_flight, known_complete=known_complete, is_complete=is_complete
    )
    decisions = plan_retention(candidates, policy)
    result = RetentionResult()
    for cand, keep in zip(candidates, decisions, strict=True):
        if keep:
            result.kept.append(cand.name)
            continue
        if dry_run:
            result.deleted.append(cand.name)
            continue
        path = Storage.join(root, cand.name)
        try:
            delete_checkpoint_dir(storage, path)
        except Exception as e:  # retention must never take training down
            result.errors.append(f"{cand.name}: {e}")
            continue
        result.deleted.append(cand.name)
        _audit(storage, root, cand, policy)
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
