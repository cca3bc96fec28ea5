"""The run root's audit log file: ``<root>/.ckptctl/audit.jsonl``, one JSON object per line.

This is the file primitive (append one line, read them back, who is acting). The
records themselves are typed, one frozen dataclass per action, in
``ckptctl.runroot.audit``; write through ``runroot.audit.write``. Every mutation
ckptctl makes to a run root appends one record; the schema is in docs/rollback.md
and is a contract (add keys, never rename). Appends happen while the run-root lock is held, which
matters on object stores: there an append is a read-modify-write of the whole
object, so two unlocked writers could lose a line.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ckptctl import __version__
from ckptctl.adapters.storage import Storage
from ckptctl.core.names import STATE_DIR_NAME
from ckptctl.core.rollback.model import Who

__all__ = [
    "AUDIT_LOG_NAME",
    "AuditLog",
    "append_record",
    "audit_log_path",
    "current_actor",
    "current_user",
    "iso_utc",
    "read_log",
    "state_dir",
    "utc_now",
]

AUDIT_LOG_NAME = "audit.jsonl"


def state_dir(storage: Storage, root: str) -> str:
    return storage.join(root, STATE_DIR_NAME)


def audit_log_path(storage: Storage, root: str) -> str:
    return storage.join(root, STATE_DIR_NAME, AUDIT_LOG_NAME)


def current_user() -> str:
    """The login name (LOGNAME/USER/... first, then the password database)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container uid with no passwd entry and no $USER
        return f"uid-{os.getuid()}" if hasattr(os, "getuid") else "unknown"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso_utc(when: datetime) -> str:
    """``2026-11-21T03:12:00Z``: the ``time`` field of every record."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def current_actor(clock: Callable[[], datetime] = utc_now) -> Who:
    """Who is acting, now (``clock``), for audit records, lock files and the active job."""
    return Who(
        time=iso_utc(clock()), user=current_user(), host=socket.gethostname(), pid=os.getpid(), ckptctl_version=__version__
    )


def append_record(storage: Storage, root: str, record: Mapping[str, Any]) -> None:
    """Append one record as a single JSON line (ASCII, no newlines inside)."""
    line = json.dumps(dict(record), ensure_ascii=True, sort_keys=False, default=str)
    storage.append_line(audit_log_path(storage, root), line)


@dataclass(slots=True)
class AuditLog:
    """The records of one run root's audit log, oldest first."""

    path: str
    """URL of the log."""
    exists: bool
    records: list[dict[str, Any]] = field(default_factory=list)
    num_unreadable: int = 0
    """Lines that are not a JSON object (kept in the file, skipped here)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "exists": self.exists,
            "records": self.records,
            "unreadable_lines": self.num_unreadable,
        }


def read_log(storage: Storage, root: str) -> AuditLog:
    path = audit_log_path(storage, root)
    log = AuditLog(path=storage.url(path), exists=False)
    if storage.info(path) is None:
        return log
    log.exists = True
    for raw in storage.read_bytes(path).decode("utf-8", "replace").splitlines():
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            log.num_unreadable += 1
            continue
        if isinstance(rec, dict):
            log.records.append(rec)
        else:
            log.num_unreadable += 1
    return log
