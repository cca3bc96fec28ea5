"""The run-root lock as the use cases take it: one mutating operation at a time per root.

The lock-file protocol (exclusive create, S3 conditional PUT, stale-lock breaking)
is ``ckptctl.adapters.runlock``; this module is what ``rollback``, ``recover`` and
training retention call, so they agree on one rule:

- ``hold(root, operation)``: take it or raise ``LockHeldError`` (exit 4); a broken
  stale lock is written to the audit log (``break-lock``) here, once, for everyone.
- ``hold_for_pass(stack, root, operation)``: for a background pass that must never
  fail the job (training retention): take it, or return why not and let the caller
  skip the pass. A holder whose token the job inherited (``recover`` launched the job
  and passes its token in ``CKPTCTL_RUN_LOCK_TOKEN``) counts as held by us.
- ``holder(root)``: who holds it now (dry runs warn with it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ckptctl.adapters.audit import current_actor, utc_now
from ckptctl.adapters.runlock import (
    INHERITED_TOKEN_ENV,
    HeldLock,
    LockInfo,
    read_lock,
    run_lock,
)
from ckptctl.errors import LockHeldError
from ckptctl.runroot import audit
from ckptctl.runroot.root import RunRoot

__all__ = [
    "hold",
    "hold_for_pass",
    "holder",
]


def holder(root: RunRoot) -> LockInfo | None:
    """The current holder, if any (None also when the lock file is unreadable)."""
    return read_lock(root.storage, root.path)


@contextlib.contextmanager
def hold(root: RunRoot, operation: str, *, clock: audit.Clock = utc_now) -> Iterator[HeldLock]:
    """Hold the lock for the block; ``LockHeldError`` when someone else holds it."""
    with run_lock(root.storage, root.path, operation=operation) as held:
        if held.broke_stale is not None:
            _log_broken(root, held.broke_stale, clock)
        yield held


def hold_for_pass(stack: contextlib.ExitStack, root: RunRoot, operation: str) -> str | None:
    """Take the lock for a pass (entered on ``stack``); return why not when it is held."""
    try:
        stack.enter_context(hold(root, operation))
        return None
    except LockHeldError as e:
        inherited = os.environ.get(INHERITED_TOKEN_ENV)
        current = holder(root)
        if inherited and current is not None and current.token == inherited:
            # our supervisor (recover) holds it, and acts on the root only while we are stopped
            return None
        return e.message


def _log_broken(root: RunRoot, stale: LockInfo, clock: audit.Clock) -> None:
    audit.write(
        root,
        audit.BreakLock(
            who=current_actor(clock),
            root=root.url,
            reason=f"stale lock: holder pid {stale.pid} on {stale.host} is gone",
            stale_lock=stale.to_json(),
        ),
    )
