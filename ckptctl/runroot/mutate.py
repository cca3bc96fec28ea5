"""The only code that renames or removes a step directory in a run root; each act is audited.

| act | what happens | audit action | called by |
| --- | --- | --- | --- |
| ``quarantine`` / ``restore`` | rename ``step_30`` <-> ``step_30.quarantined-<stamp>`` | ``quarantine`` / ``restore`` (done or failed) | rollback, undo |
| ``hide`` | POSIX: rename to ``step_N.tmp-deleting-<hex>``; object store: remove the commit marker | ``retention-delete`` | training retention |
| ``purge`` | remove a hidden directory's tree | (recorded by ``hide``) | training retention |
| ``supersede`` | move an older ``step_N`` aside to ``step_N.quarantined-superseded-<token>`` | ``supersede`` | training save at an existing step |
| ``commit`` | rename a finished save ``step_N.tmp-<token>`` to ``step_N`` | none: a save adds a checkpoint, it changes none | training save (POSIX) |

Mutations by rollback happen under the run-root lock (``runroot.lock``); retention
hides under it and purges after it (a hidden directory is never a candidate:
its name is temporary, or its commit marker is gone). Names come from
``ckptctl.core.names``.
"""

from __future__ import annotations

import secrets

from ckptctl.adapters.audit import current_actor
from ckptctl.core.names import deleting_name, parse_own_name, superseded_name
from ckptctl.core.rollback.model import QUARANTINE, RESTORE, AuditRecord
from ckptctl.core.verify.manifest import COMMIT_MARKER_NAME
from ckptctl.errors import StorageError
from ckptctl.runroot import audit
from ckptctl.runroot.root import RunRoot


def quarantine(root: RunRoot, record: AuditRecord) -> None:
    """Apply a rollback plan: rename ``record.from_name`` to its quarantined name."""
    if record.action != QUARANTINE:
        raise ValueError(f"not a quarantine record: {record.action!r}")
    _rename_audited(root, record)


def restore(root: RunRoot, record: AuditRecord) -> None:
    """Apply an undo plan: rename a quarantined directory back to its original name."""
    if record.action != RESTORE:
        raise ValueError(f"not a restore record: {record.action!r}")
    _rename_audited(root, record)


def _rename_audited(root: RunRoot, record: AuditRecord) -> None:
    """One rename, then its audit record. A failed rename is logged too, then re-raised."""
    storage = root.storage
    try:
        storage.rename(root.child(record.from_name), root.child(record.to_name))
    except StorageError as e:
        audit.write(root, record, outcome="failed", error=e.message)
        both = (
            ""
            if storage.is_local
            else " On an object store a rename is copy-then-delete: both copies may now exist, "
            "never neither; the quarantined name is never complete, so a leftover copy is harmless."
        )
        raise StorageError(
            f"could not rename {record.from_name} to {record.to_name}: {e.message}.{both}",
            hint=f"run `ckptctl list {root.url}` to see the state; see docs/rollback.md "
            "(interrupted renames) before retrying",
        ) from e
    storage.invalidate_cache(root.path)
    audit.write(root, record)


def hide(root: RunRoot, name: str, *, step: int | None, reason: str) -> str:
    """Make one checkpoint directory invisible to readers; return the path left to ``purge``.

    POSIX: rename to ``<name>.tmp-deleting-<hex>`` (atomic; a temporary name is never
    complete, and a later pass removes it if the purge never happens); a directory that
    already has a temporary name stays as it is. Object stores: remove the commit marker,
    so the directory is uncommitted before any shard goes. Audited (best effort: the
    caller is a training job that must not fail on its log).
    """
    storage = root.storage
    path = root.child(name)
    if storage.is_local:
        own = parse_own_name(name)
        if own is not None and own.is_temp:
            hidden = path
        else:
            hidden = root.child(deleting_name(name, secrets.token_hex(4)))
            storage.rename(path, hidden)
    else:
        storage.remove_file(storage.join(path, COMMIT_MARKER_NAME))
        hidden = path
    audit.write(
        root,
        audit.StepRemoved(who=current_actor(), root=root.url, name=name, step=step, reason=reason),
        best_effort=True,
    )
    return hidden


def purge(root: RunRoot, hidden: str) -> None:
    """Remove a directory ``hide`` returned (its audit record is already written)."""
    root.storage.remove_tree(hidden)


def supersede(root: RunRoot, name: str, token: str, *, step: int | None, reason: str) -> str:
    """Move an existing ``name`` aside before a new save takes its name; return the new name.

    Never deletes. The commit marker left at the old path (an interrupted copy-then-delete
    on an object store) is removed, so no old marker ever sits beside new shards.
    """
    storage = root.storage
    aside = superseded_name(name, token)
    storage.rename(root.child(name), root.child(aside))
    audit.write(
        root,
        audit.StepSuperseded(
            who=current_actor(), root=root.url, from_name=name, to_name=aside, step=step, reason=reason
        ),
        best_effort=True,
    )
    storage.remove_file(storage.join(root.child(name), COMMIT_MARKER_NAME))
    return aside


def commit(root: RunRoot, temp_name: str, final_name: str) -> None:
    """POSIX commit of a finished save: the atomic rename of its temporary directory."""
    root.storage.rename(root.child(temp_name), root.child(final_name))
