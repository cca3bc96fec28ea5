"""A Python stack dump on request, for ``ckptctl recover``'s hang evidence (issue 20).

``install()`` does nothing unless ``CKPTCTL_STACK_DUMP_DIR`` is set (recover sets it for
the job it launches). Then it registers ``faulthandler`` on ``SIGUSR2`` (every thread's
stack, written from the signal handler in C: it works while Python code is blocked in a
collective or in I/O, and the process carries on), and leaves an *armed* record
``armed-rank<R>-pid<P>.json`` beside the dump file so recover signals only processes that
answer SIGUSR2 with a dump (its default action would kill them). Call it once per rank,
early (``examples/train.py`` does after ``init_process_group``); it never raises.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import socket
from typing import IO

from ckptctl.core.recover.evidence import (
    STACK_DUMP_DIR_ENV,
    STACK_DUMP_SIGNAL,
    armed_name,
    stack_name,
)

__all__ = ["install"]

_kept: list[IO[str]] = []  # faulthandler writes to the file object's fd: keep it open


def install(rank: int | None = None) -> str | None:
    """Arm the dump (see the module docstring); returns the dump file's path, or None when off."""
    where = os.environ.get(STACK_DUMP_DIR_ENV)
    sig = getattr(signal, STACK_DUMP_SIGNAL, None)
    if not where or sig is None or not hasattr(faulthandler, "register"):
        return None
    if rank is None:
        env_rank = os.environ.get("RANK", "")
        rank = int(env_rank) if env_rank.isdigit() else None
    pid = os.getpid()
    try:
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, stack_name(rank, pid))
        f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for faulthandler
        faulthandler.register(sig, file=f, all_threads=True, chain=False)
        _kept.append(f)
        record = {"rank": rank, "pid": pid, "host": socket.gethostname(), "signal": STACK_DUMP_SIGNAL}
        # one write: a reader that catches it half-written sees bad JSON and skips it
        fd = os.open(os.path.join(where, armed_name(rank, pid)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, json.dumps(record).encode())
        finally:
            os.close(fd)
    except OSError:
        with contextlib.suppress(Exception):
            faulthandler.unregister(sig)
        return None
    return path
