"""Open local files for reading without ever blocking on a special file.

A FIFO named ``latest`` or ``ckptctl.json`` blocks ``open()`` until a writer appears; a
device can be read forever. ``open_regular`` refuses anything that is not a regular file
after ``stat`` (before any open), then opens with ``O_NONBLOCK`` and checks ``fstat``
again, in case the path was swapped in between.
"""

from __future__ import annotations

import errno
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
    return _open_regular_fd(path, flags)


def _regular_nofollow(path: str, flags: int) -> int:
    try:
        return _open_regular_fd(path, flags | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LinkRefusedError(f"{path}: is a symbolic link (refused, not read)") from e
        raise


def _open_regular_fd(path: str, flags: int) -> int:
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


def open_regular(path: str, buffering: int = -1, *, nofollow: bool = False) -> IO[bytes]:
    """Open a local file for reading, refusing special files: ``stat`` first (a FIFO would block
    ``open``), then ``O_NONBLOCK`` and ``fstat`` again (it may have been swapped in between).
    ``nofollow``: a symbolic link is refused too (ckptctl's own files under ``.ckptctl/``)."""
    st = os.lstat(path) if nofollow else os.stat(path)
    if nofollow and stat_mod.S_ISLNK(st.st_mode):
        raise LinkRefusedError(f"{path}: is a symbolic link (refused, not read)")
    kind = _kind_of(st.st_mode)
    if kind is not None:
        raise SpecialFileError(f"{path}: is {kind}, not a regular file (refused without reading it)")
    return open(path, "rb", buffering=buffering, opener=_regular_nofollow if nofollow else _regular_only)


# ---------------------------------------------------------------------------------------
# Links: never followed out of the directory a command was pointed at; never written through
# ---------------------------------------------------------------------------------------


class LinkRefusedError(SpecialFileError):
    """A symbolic link ckptctl will not follow (out of the run root, a loop) or write through."""


def inside(real: str, base_real: str) -> bool:
    """Is the resolved path ``real`` the resolved directory ``base_real`` or under it?"""
    return real == base_real or real.startswith(base_real.rstrip(os.sep) + os.sep)


def link_problem(path: str, base_real: str | None) -> str:
    """Why the symbolic link at ``path`` is not followed ('' when it may be).

    A loop (``step_30 -> step_30``, or a link to a folder holding it: ``step_30 -> ..``), or a
    target outside ``base_real`` (the resolved run root;
    None: no confinement). A dangling link is no problem here: it reads as missing.
    """
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link loop (not followed)"
        return ""
    real = os.path.realpath(path)
    if inside(os.path.realpath(os.path.dirname(path) or "."), real):
        return "a symbolic link to a folder that holds it: a loop (not followed)"
    if base_real is None:
        return ""
    if not inside(real, base_real):
        return "a symbolic link out of the run root (not followed)"
    return ""


def _realpath_below(path: str, base: str, base_real: str) -> str:
    """``os.path.realpath(path)`` for ``path`` under ``base``: ``base_real``, then only the
    components below ``base`` looked at (``lstat``). realpath would ``lstat`` every component of
    the run root's own path again for each file (9 calls a shard here). A link, ``.``, ``..`` or
    a missing component below ``base``: realpath itself."""
    cur = base_real
    for part in path[len(base.rstrip("/")) + 1 :].split("/") if path != base else ():
        cur = os.path.join(cur, part)
        try:
            if part in ("", ".", "..") or stat_mod.S_ISLNK(os.lstat(cur).st_mode):
                return os.path.realpath(path)
        except OSError:
            return os.path.realpath(path)
    return cur


def check_confined(path: str, base: str, base_real: str) -> None:
    """Refuse ``path`` (under ``base``, the run root as named) if it resolves outside ``base_real``."""
    if not (path == base or path.startswith(base.rstrip("/") + "/")):
        return
    real = _realpath_below(path, base, base_real)
    if not inside(real, base_real):
        raise LinkRefusedError(f"{path}: leads out of the run root through a symbolic link (refused, not read)")


def check_no_link_dirs(path: str, base: str | None) -> None:
    """Refuse a write whose folders below ``base`` (the run root; else only the parent) are links."""
    parent = os.path.dirname(path)
    if base is not None and parent.startswith(base.rstrip("/") + "/"):
        rel = parent[len(base.rstrip("/")) + 1 :].split("/")
        dirs = [os.path.join(base, *rel[: i + 1]) for i in range(len(rel))]
    else:
        dirs = [parent]
    for d in dirs:
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            return  # created by the caller (as a real folder)
        if stat_mod.S_ISLNK(st.st_mode):
            raise LinkRefusedError(f"{d}: is a symbolic link; ckptctl never writes through one (refused)")
        if not stat_mod.S_ISDIR(st.st_mode):
            raise SpecialFileError(f"{d}: is not a directory")


_WRITE_FLAGS = os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def open_for_write(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` for writing without following a link and without blocking on a FIFO; a regular
    file only (``SpecialFileError`` / ``LinkRefusedError`` otherwise). Returns the descriptor."""
    try:
        fd = os.open(path, _WRITE_FLAGS | flags, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LinkRefusedError(f"{path}: is a symbolic link; ckptctl never writes through one (refused)") from e
        if e.errno == errno.ENXIO:  # a FIFO with no reader: opening it for writing would block
            raise SpecialFileError(f"{path}: is a FIFO (named pipe), not a regular file (refused)") from e
        raise
    try:
        kind = _kind_of(os.fstat(fd).st_mode)
        if kind is not None or stat_mod.S_ISDIR(os.fstat(fd).st_mode):
            raise SpecialFileError(f"{path}: is {kind or 'a directory'}, not a regular file (refused)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (a non-blocking descriptor on a regular file never writes short, but check)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
