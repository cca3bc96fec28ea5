"""Sequential readers over one byte range of a file: what ``Storage.open_range`` yields.

``LocalRange`` reads a local file with positioned reads, probing the page cache first
and asking the kernel to read ahead only where it misses; ``RangedGets`` reads an
object with ranged GETs, a few in flight ahead of the reader. Both are built by
``ckptctl.adapters.storage`` (which maps errors to ``StorageError``); the deep check
(``runroot.deep``) reads its segments through them.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol, TypeVar

T = TypeVar("T")

#: Object stores: bytes per GET, and GETs in flight ahead of one reader.
RANGE_GET_BYTES = 8 << 20
RANGE_GETS_IN_FLIGHT = 2
#: Local files: how far ahead of a reader the kernel is asked to read where the cache misses.
READ_AHEAD_BYTES = 64 << 20

HAS_FADVISE = hasattr(os, "posix_fadvise")
_HAS_PREADV = hasattr(os, "preadv")
_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None) if _HAS_PREADV else None


class RangeReader(Protocol):
    """Sequential ``readinto`` from the range's start."""

    def readinto(self, buffer: memoryview, /) -> int:
        """Fill the start of ``buffer``; the number of bytes, 0 at the end."""
        ...


class LocalRange:
    """A local file from ``start``: positioned reads, the disk kept busy ahead of them.

    Each read first asks for bytes already in the page cache only (``preadv`` with
    ``RWF_NOWAIT``): a warm file is read with nothing else. Where the cache misses, the
    kernel is asked to fetch the next ``READ_AHEAD_BYTES`` (``posix_fadvise(WILLNEED)``:
    it starts the disk reads and returns), then the read waits for its own bytes: on a
    cold file the disk works on the window while this thread copies and CRCs, instead of
    the two alternating. (``WILLNEED`` on cached pages is not free, ~25 us per MiB of
    page-cache lookups, hence the probe first.) File systems without ``RWF_NOWAIT``:
    every read is advised ahead. ``call`` runs each read (the storage maps its errors).
    """

    nowait: int | None = _NOWAIT

    def __init__(self, fd: int, start: int, end: int, call: Callable[[Callable[[], int]], int]) -> None:
        self._fd = fd
        self._pos = start
        self._end = end
        self._advised = start
        self._ahead = READ_AHEAD_BYTES if HAS_FADVISE else 0
        self._call = call

    def _advise(self) -> None:
        target = min(self._end, self._pos + self._ahead)
        frm = max(self._pos, self._advised)
        if target - self._advised >= self._ahead // 4 or (target == self._end and target > self._advised):
            with contextlib.suppress(OSError):
                os.posix_fadvise(self._fd, frm, target - frm, os.POSIX_FADV_WILLNEED)
            self._advised = target

    def _read(self, buffer: memoryview) -> int:
        flags = self.nowait
        if flags is not None:
            try:
                return os.preadv(self._fd, [buffer], self._pos, flags)
            except BlockingIOError:
                pass  # not (all) in the page cache: fetch ahead, then wait for these bytes
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
                self.nowait = None  # this file system has no RWF_NOWAIT
        if self._ahead and self._pos < self._end:
            self._advise()
        if _HAS_PREADV:
            return os.preadv(self._fd, [buffer], self._pos)
        os.lseek(self._fd, self._pos, os.SEEK_SET)
        return os.readv(self._fd, [buffer])

    def readinto(self, buffer: memoryview, /) -> int:
        n = int(self._call(lambda: self._read(buffer)))
        self._pos += n
        return n


class RangedGets:
    """``[start, end)`` of an object as ranged GETs, ``RANGE_GETS_IN_FLIGHT`` ahead of the reader.

    ``get(a, b)`` fetches ``[a, b)`` in one request. Memory: at most ``RANGE_GETS_IN_FLIGHT
    + 1`` GETs' bytes per reader. A GET that comes back short is the object's end: nothing
    after it is asked for. Never reads past ``end``.
    """

    def __init__(self, get: Callable[[int, int], bytes], start: int, end: int) -> None:
        self._get, self._end = get, end
        self._next = start
        self._pending: deque[tuple[Future[bytes], int]] = deque()
        self._pool: ThreadPoolExecutor | None = None
        self._view = memoryview(b"")
        self._eof = start >= end

    def _top_up(self) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=RANGE_GETS_IN_FLIGHT, thread_name_prefix="ckptctl-get")
        while not self._eof and len(self._pending) < RANGE_GETS_IN_FLIGHT and self._next < self._end:
            b = min(self._end, self._next + RANGE_GET_BYTES)
            self._pending.append((self._pool.submit(self._get, self._next, b), b - self._next))
            self._next = b

    def readinto(self, buffer: memoryview, /) -> int:
        if not len(self._view):
            self._top_up()
            if not self._pending:
                return 0
            fut, asked = self._pending.popleft()
            data = fut.result()
            if len(data) < asked:
                # the object ends here (shorter than listed): no more GETs
                self._eof = True
                for f, _n in self._pending:
                    f.cancel()
                self._pending.clear()
            self._top_up()
            self._view = memoryview(data)
            if not data:
                return 0
        n = min(len(buffer), len(self._view))
        buffer[:n] = self._view[:n]
        self._view = self._view[n:]
        return n

    def close(self) -> None:
        for f, _n in self._pending:
            f.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
