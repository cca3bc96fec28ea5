"""One mutating ckptctl operation at a time per run root: ``<root>/.ckptctl/lock``.

API (all a caller needs; ``ckptctl rollback`` and ``ckptctl recover`` use it)::

    with run_lock(storage, root, operation="rollback") as held:
        ...  # decide, then act; held.info says who we are, held.broke_stale
             # names a dead holder whose lock was removed on the way in

- Acquiring never waits: a lock held by someone else raises ``LockHeldError``
  (exit code 4) naming the holder (operation, user, host, pid) and since when.
- The lock file is JSON: ``{pid, host, user, started, operation, token,
  ckptctl_version, proc_start}``; ``read_lock`` returns it for display.
- Released on leaving the block (also on an exception), and only if the file
  still carries our token: we never delete someone else's lock.

How the create is made exclusive (``HeldLock.method``):

- local disk (``exclusive-create``): the lock is written to a private temporary
  file and ``link(2)``-ed to its name: atomic on a local filesystem and on NFS, and
  the file is never seen empty (``open(O_CREAT | O_EXCL)`` where hard links are
  not supported).
- S3 (``conditional-put``): ``PUT`` with ``If-None-Match: *`` (s3fs
  ``pipe_file(mode="create")``); the store answers 412 to all but one of
  concurrent creators. AWS S3, MinIO and moto honour it. A store that rejects
  the header (501) falls back to the next method, with a note.
- other fsspec stores (``write-read-back``): check that no lock exists, write
  ours, read it back and compare tokens. Weaker: two writers that both pass the
  check before either writes and each read back its own write before the other
  lands can both believe they hold it. An S3-compatible store that silently
  ignores ``If-None-Match`` degrades to this too; every remote create is read
  back for that reason.

Stale locks: a lock whose holder ran on THIS host and whose pid is no longer
alive (or is alive but is a different process: its start time differs) is
stale. It is removed, with a clear message (``HeldLock.broke_stale``), under a
short-lived guard file (``lock.break``, created the same exclusive way) so two
processes breaking the same stale lock cannot delete a fresh one. A lock from
another host, or one that cannot be parsed, is never broken automatically: the
refusal says how to remove it by hand if its holder is truly gone.

Test hook: with ``CKPTCTL_TEST_HOLD_LOCK_UNTIL=PATH`` the holder waits, right
after acquiring, until PATH exists (at most 60 s), so a test can make two real
processes overlap deterministically on a loaded machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ckptctl.adapters.audit import current_actor
from ckptctl.adapters.storage import Storage
from ckptctl.core.names import STATE_DIR_NAME
from ckptctl.errors import LockHeldError, NotFoundError, StorageError, StorageUnreachableError

LOCK_NAME = "lock"
_GUARD_SUFFIX = ".break"
#: Test hook: after acquiring, wait until this file exists (at most 60 s).
HOLD_ENV = "CKPTCTL_TEST_HOLD_LOCK_UNTIL"
_HOLD_MAX_S = 60.0
#: Protocols whose object store honours S3's ``If-None-Match: *`` through s3fs.
_CONDITIONAL_PUT_PROTOCOLS = frozenset({"s3", "s3a"})
_GUARD_WAIT_S = 2.0
#: Set by ``ckptctl recover`` for the job it launches: the token of the lock recover holds.
#: The job's own retention (``ckptctl.training``) then knows the holder is its supervisor.
INHERITED_TOKEN_ENV = "CKPTCTL_RUN_LOCK_TOKEN"

EXCLUSIVE_CREATE = "exclusive-create"
CONDITIONAL_PUT = "conditional-put"
WRITE_READ_BACK = "write-read-back"


@dataclass(frozen=True, kw_only=True, slots=True)
class LockInfo:
    """What a lock file says about its holder."""

    pid: int
    host: str
    user: str
    started: str
    """UTC ISO time the lock was taken."""
    operation: str
    """What the holder is doing: ``rollback``, ``recover``, ..."""
    token: str
    """Random; lets a holder recognise its own lock file."""
    ckptctl_version: str = ""
    proc_start: str | None = None
    """The holder process's start time (Linux /proc), to tell pid reuse from a live holder."""

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "host": self.host,
            "user": self.user,
            "started": self.started,
            "operation": self.operation,
            "token": self.token,
            "ckptctl_version": self.ckptctl_version,
            "proc_start": self.proc_start,
        }

    def describe(self) -> str:
        return f"{self.operation} by {self.user} on {self.host} (pid {self.pid}) since {self.started}"

    @classmethod
    def parse(cls, data: bytes) -> LockInfo | None:
        """None when the bytes are not a lock file ckptctl wrote."""
        try:
            obj = json.loads(data.decode("utf-8"))
            return cls(
                pid=int(obj["pid"]),
                host=str(obj["host"]),
                user=str(obj.get("user", "?")),
                started=str(obj.get("started", "?")),
                operation=str(obj.get("operation", "?")),
                token=str(obj.get("token", "")),
                ckptctl_version=str(obj.get("ckptctl_version", "")),
                proc_start=None if obj.get("proc_start") is None else str(obj["proc_start"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


@dataclass(frozen=True, kw_only=True, slots=True)
class HeldLock:
    """A lock we hold (yielded by ``run_lock``)."""

    path: str
    """The lock file's path as the storage knows it (no protocol)."""
    url: str
    """The same, in the user's URL form."""
    info: LockInfo
    method: str
    """``exclusive-create`` | ``conditional-put`` | ``write-read-back`` (see module doc)."""
    broke_stale: LockInfo | None = None
    """A dead holder's lock that was removed before ours was taken (log it)."""
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.url,
            "method": self.method,
            "holder": self.info.to_json(),
            "broke_stale": self.broke_stale.to_json() if self.broke_stale else None,
            "notes": list(self.notes),
        }


def lock_path(storage: Storage, root: str) -> str:
    return storage.join(root, STATE_DIR_NAME, LOCK_NAME)


def read_lock(storage: Storage, root: str) -> LockInfo | None:
    """The current holder, if any (None also when the file is unreadable)."""
    data = _read(storage, lock_path(storage, root))
    return LockInfo.parse(data) if data is not None else None


@contextmanager
def run_lock(storage: Storage, root: str, *, operation: str) -> Iterator[HeldLock]:
    """Hold the run root's lock for the duration of the block (see module doc)."""
    held = _acquire(storage, root, operation)
    try:
        _test_hold()
        yield held
    finally:
        _release(storage, held)


def _test_hold() -> None:
    release_file = os.environ.get(HOLD_ENV)
    if not release_file:
        return
    deadline = time.monotonic() + _HOLD_MAX_S
    while not os.path.exists(release_file) and time.monotonic() < deadline:
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------
# acquire / release
# ---------------------------------------------------------------------------------------


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _proc_start(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return True
    return True


def _is_stale(holder: LockInfo, host: str) -> bool:
    """Provably dead holder: same host, and its pid is gone or now another process."""
    if holder.host != host or holder.pid <= 0:
        return False
    if not _is_alive(holder.pid):
        return True
    if holder.proc_start is not None:
        now_start = _proc_start(holder.pid)
        return now_start is not None and now_start != holder.proc_start
    return False


def _held_error(storage: Storage, path: str, holder: LockInfo | None, raw: bytes | None) -> LockHeldError:
    url = storage.url(path)
    rm = f"rm {url}" if storage.is_local else f"delete the object {url}"
    if holder is None:
        shown = (raw or b"")[:80].decode("utf-8", "replace")
        return LockHeldError(
            f"run root is locked: {url} exists but is not a ckptctl lock file ({shown!r})",
            hint=f"if no ckptctl operation is running on this run root, {rm} and retry",
        )
    where = "on this host, still running" if holder.host == current_actor().host else "on another host"
    return LockHeldError(
        f"run root is locked: {holder.describe()} ({where}); lock file {url}",
        hint=f"wait for it to finish; if that process is truly gone, {rm} and retry",
    )


def _acquire(storage: Storage, root: str, operation: str) -> HeldLock:
    actor = current_actor()
    path = lock_path(storage, root)
    info = LockInfo(
        pid=actor.pid,
        host=actor.host,
        user=actor.user,
        started=_now_iso(),
        operation=operation,
        token=uuid.uuid4().hex,
        ckptctl_version=actor.ckptctl_version,
        proc_start=_proc_start(actor.pid),
    )
    data = json.dumps(info.to_json(), ensure_ascii=True).encode() + b"\n"
    broke: LockInfo | None = None
    notes: list[str] = []
    # A few rounds: a holder may release between our failed create and our read,
    # and a stale lock takes one round to break.
    for _ in range(4):
        method = _create(storage, path, data, info.token, notes)
        if method is not None:
            return HeldLock(
                path=path, url=storage.url(path), info=info, method=method, broke_stale=broke, notes=tuple(notes)
            )
        raw = _read(storage, path)
        if raw is None:
            continue  # released in between: try again
        holder = LockInfo.parse(raw)
        if holder is None or not _is_stale(holder, actor.host):
            raise _held_error(storage, path, holder, raw)
        if _break_stale(storage, path, raw, actor.pid):
            broke = holder
    raise LockHeldError(
        f"could not take the run-root lock {storage.url(path)}: it keeps changing hands",
        hint="another ckptctl is starting on this run root; retry in a moment",
    )


def _release(storage: Storage, held: HeldLock) -> None:
    path = held.path
    raw = _read(storage, path)
    holder = LockInfo.parse(raw) if raw is not None else None
    if holder is None or holder.token != held.info.token:
        return  # not ours any more (someone broke it by hand): leave theirs alone
    _remove(storage, path)


# ---------------------------------------------------------------------------------------
# primitives
# ---------------------------------------------------------------------------------------


def _read(storage: Storage, path: str) -> bytes | None:
    try:
        return storage.read_bytes(path)
    except NotFoundError:
        return None


def _remove(storage: Storage, path: str) -> None:
    storage.remove_file(path)


def _create(storage: Storage, path: str, data: bytes, token: str, notes: list[str]) -> str | None:
    """Create ``path`` holding ``data`` only if it does not exist; the method used, or None."""
    if storage.is_local:
        return _create_local(path, data, token)
    method = WRITE_READ_BACK
    if storage.protocol in _CONDITIONAL_PUT_PROTOCOLS:
        try:
            storage.fs.pipe_file(path, data, mode="create")
            method = CONDITIONAL_PUT
        except FileExistsError:
            return None
        except (StorageUnreachableError, StorageError):
            raise
        except Exception as e:
            code, status = store_error(e)
            if code == "ConditionalRequestConflict" or status == 409:
                # AWS: another conditional write to this key is in flight; one of them wins
                return None
            if code != "NotImplemented" and status != 501:
                raise StorageError(f"{storage.url(path)}: cannot create the lock file: {e}") from e
            notes.append(
                "the object store rejects conditional writes (If-None-Match): "
                "fell back to write-then-read-back, which two simultaneous starts can both pass"
            )
    if method == WRITE_READ_BACK:
        if storage.exists(path):
            return None
        storage.write_bytes(path, data)
    storage.invalidate_cache(storage.parent(path))
    # Read back: catches a store that ignored the condition and a racing writer that landed first.
    back = _read(storage, path)
    holder = LockInfo.parse(back) if back is not None else None
    if holder is None or holder.token != token:
        return None
    return method


def store_error(exc: BaseException) -> tuple[str | None, int | None]:
    """The object store's error code and HTTP status behind an exception, if it carries them.

    s3fs raises Python exceptions (``OSError``...) whose ``__cause__`` is botocore's
    ``ClientError``; its ``response`` holds ``Error.Code`` and the HTTP status. Decisions
    use these, never the message text.
    """
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        response = getattr(cur, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            meta = response.get("ResponseMetadata") or {}
            code = error.get("Code") if isinstance(error, dict) else None
            status = meta.get("HTTPStatusCode") if isinstance(meta, dict) else None
            return (
                str(code) if code is not None else None,
                status if isinstance(status, int) else None,
            )
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return None, None


def _create_local(path: str, data: bytes, token: str) -> str | None:
    """Exclusive create whose content is whole the moment the name appears.

    The lock is written to a private temporary file, then ``link(2)``-ed to its name:
    atomic, refused when the name exists (also on NFS), and a reader never sees the
    empty file that ``O_CREAT | O_EXCL`` followed by a write shows for a moment (a
    contender reading then would take it for a foreign file and refuse wrongly).
    Filesystems without hard links fall back to ``O_EXCL``.
    """
    tmp = f"{path}.{token}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageError(f"{path}: cannot create the lock file: {e.strerror or e}") from e
    try:
        os.link(tmp, path)
        return EXCLUSIVE_CREATE
    except FileExistsError:
        return None
    except OSError:
        return _create_excl(path, data)  # no hard links here
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _create_excl(path: str, data: bytes) -> str | None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    except OSError as e:
        raise StorageError(f"{path}: cannot create the lock file: {e.strerror or e}") from e
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return EXCLUSIVE_CREATE


def _break_stale(storage: Storage, path: str, stale_raw: bytes, my_pid: int) -> bool:
    """Remove a stale lock if it still holds ``stale_raw``; True if we removed it.

    The guard file makes the read-compare-delete exclusive among breakers, so a
    breaker can never delete a lock that another process created after the stale
    one was removed.
    """
    guard = path + _GUARD_SUFFIX
    actor = current_actor()
    guard_info = LockInfo(
        pid=my_pid,
        host=actor.host,
        user=actor.user,
        started=_now_iso(),
        operation="break-stale-lock",
        token=uuid.uuid4().hex,
        proc_start=_proc_start(my_pid),
    )
    guard_data = json.dumps(guard_info.to_json()).encode()
    deadline = time.monotonic() + _GUARD_WAIT_S
    while _create(storage, guard, guard_data, guard_info.token, []) is None:
        raw = _read(storage, guard)
        holder = LockInfo.parse(raw) if raw is not None else None
        if holder is not None and _is_stale(holder, actor.host):
            _remove(storage, guard)  # a breaker died mid-break (held for milliseconds)
            continue
        if time.monotonic() > deadline:
            raise LockHeldError(
                f"{storage.url(guard)} is held: another ckptctl is breaking a stale lock",
                hint=f"retry in a moment; if no ckptctl is running, remove {storage.url(guard)}",
            )
        time.sleep(0.05)
    try:
        if _read(storage, path) != stale_raw:
            return False  # someone else broke it (and maybe re-took it) first
        _remove(storage, path)
        return True
    finally:
        _remove(storage, guard)
