"""Open local files for reading without ever blocking on a special file.

A FIFO named ``latest`` or ``ckptctl.json`` blocks ``open()`` until a writer appears; a
device can be read forever. ``open_regular`` refuses anything that is not a regular file
after ``stat`` (before any open), then opens with ``O_NONBLOCK`` and checks ``fstat``
again, in case the path was swapped in between.
"""

from __future__ import annotations

import os
import stat as stat_mod
from typing import IO

from ckptctl.errors import StorageError


class SpecialFileError(StorageError):
    """A FIFO, socket or device where a regular file was expected: refused without opening it."""


def _kind_of(mode: int) -> str | None:
    """What a non-regular, non-directory file is ("a FIFO"...), or None for regular files and dirs."""
    if stat_mod.S_ISREG(mode) or stat_mod.S_ISDIR(mode):
        return None
    if stat_mod.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat_mod.S_ISSOCK(mode):
        return "a socket"
    if stat_mod.S_ISCHR(mode) or stat_mod.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _regular_only(path: str, flags: int) -> int:
    """``open``'s opener: ``O_NONBLOCK`` (a FIFO cannot block the open), then ``fstat``.

    The descriptor stays non-blocking: that changes nothing for regular files, and a
    procfs-like file that would block a read fails with EAGAIN instead of hanging.
    """
    fd = os.open(path, flags | os.O_NONBLOCK)
    try:
        kind = _kind_of(os.fstat(fd).st_mode)
        if kind is not None:  # swapped for a special file after the stat below
            raise SpecialFileError(f"{path}: is {kind}, not a regular file (refused without reading it)")
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_regular(path: str, buffering: int = -1) -> IO[bytes]:
    """Open a local file for reading, refusing special files: ``stat`` first (a FIFO would block
    ``open``), then ``O_NONBLOCK`` and ``fstat`` again (it may have been swapped in between)."""
    kind = _kind_of(os.stat(path).st_mode)
    if kind is not None:
        raise SpecialFileError(f"{path}: is {kind}, not a regular file (refused without reading it)")
    return open(path, "rb", buffering=buffering, opener=_regular_only)
