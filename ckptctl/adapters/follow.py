"""Read a log as lines: a local file, an fsspec URL or stdin; all of it, or following it as it grows.

``LineReader`` yields ``str`` lines (terminator removed) and, only when
following, ``None`` each time it has caught up with the writer, so the caller
can decide on what it has before waiting for more. The deadline
(``timeout_s``) ends the iteration and sets ``timed_out``.

Following polls the file's size through ``ckptctl.adapters.storage.Storage``
(local files and object stores alike) and reads only the new bytes. A file that
shrinks was truncated or rotated (``copytruncate``): reading starts again from
its beginning. A file that does not exist yet is waited for: ``--follow`` can be
started before the relaunched job opens its log. Lines end at ``\\n`` only; a
progress bar redrawn with ``\\r`` is seen when its line ends.

Bounded: a line longer than ``MAX_LINE_CHARS`` keeps its first ``MAX_LINE_CHARS``
characters and the rest is skipped as it streams by, so a 200 MB single line costs
one pass and about a chunk of memory. A gzip file (by its magic bytes) is
decompressed as it streams, in bounded pieces (no whole-file inflation).
"""

from __future__ import annotations

import codecs
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import IO

from ckptctl.adapters.storage import Storage
from ckptctl.core.watch.logtokens import MAX_LINE_CHARS
from ckptctl.errors import UsageError

#: Bytes read per request.
CHUNK_BYTES = 1 << 20
STDIN = "-"
_GZIP_MAGIC = b"\x1f\x8b"


def open_lines(
    path: str,
    *,
    follow: bool = False,
    timeout_s: float | None = None,
    poll_interval_s: float = 0.5,
    stdin: IO[str] | None = None,
) -> LineReader:
    """A ``LineReader`` over ``path`` (plain or gzip text, a URL, or ``-``)."""
    return LineReader(path, follow=follow, timeout_s=timeout_s, poll_interval_s=poll_interval_s, stdin=stdin)


class LineReader:
    """Iterate the lines of ``path`` (``-`` is stdin); see the module docstring."""

    def __init__(
        self,
        path: str,
        *,
        follow: bool = False,
        timeout_s: float | None = None,
        poll_interval_s: float = 0.5,
        stdin: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError("poll_interval_s must be positive")
        self.path = path
        self.follow = follow
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self._stdin = stdin
        self._clock = clock
        self._sleep = sleep
        self.timed_out = False
        """True when the deadline ended the iteration."""
        self.num_truncations = 0
        """Times the followed file shrank and was read again from the start."""
        self._deadline: float | None = None

    @property
    def is_stdin(self) -> bool:
        return self.path == STDIN

    def __iter__(self) -> Iterator[str | None]:
        self._deadline = (
            self._clock() + self.timeout_s if self.timeout_s is not None and self.follow else None
        )
        if self.is_stdin:
            return self._iter_stdin()
        storage, inner = Storage.for_url(self.path)
        if self.follow:
            return self._iter_follow(storage, inner)
        return self._iter_whole(storage, inner)

    # -- helpers ---------------------------------------------------------------------------

    def _expired(self) -> bool:
        if self._deadline is not None and self._clock() >= self._deadline:
            self.timed_out = True
            return True
        return False

    def _iter_whole(self, storage: Storage, path: str) -> Iterator[str | None]:
        splitter = _LineSplitter()
        with storage.open_read(path) as f:
            first = f.read(CHUNK_BYTES)
            chunks: Iterator[bytes] = _chunks(f, first)
            if first.startswith(_GZIP_MAGIC):
                chunks = _gunzip(chunks)
            for chunk in chunks:
                yield from splitter.feed(chunk)
        tail = splitter.flush()
        if tail is not None:
            yield tail

    def _iter_follow(self, storage: Storage, path: str) -> Iterator[str | None]:
        splitter = _LineSplitter()
        position = 0
        while True:
            entry = storage.info(path)
            size = entry.size_bytes if entry is not None and not entry.is_dir else None
            if size is not None and size < position:
                # Truncated or rotated in place: the new content starts at 0.
                self.num_truncations += 1
                position = 0
                splitter = _LineSplitter()
            if size is not None and size > position:
                end = min(size, position + CHUNK_BYTES)
                data = storage.read_bytes(path, position, end)
                if position == 0 and data.startswith(_GZIP_MAGIC):
                    raise UsageError(f"{self.path} is gzip-compressed: a finished log; read it without --follow")
                position += len(data)
                yield from splitter.feed(data)
                if position < size:
                    continue  # more already written: read on before reporting idle
            yield None  # caught up with the writer
            if self._expired():
                return
            self._sleep(self.poll_interval_s)
            if self._expired():
                return

    def _iter_stdin(self) -> Iterator[str | None]:
        import sys

        stream = self._stdin if self._stdin is not None else sys.stdin
        if not self.follow:
            splitter = _LineSplitter()
            while True:
                text = stream.read(CHUNK_BYTES)
                if not text:
                    break
                yield from splitter.feed_text(text)
            tail = splitter.flush()
            if tail is not None:
                yield tail
            return
        # A pipe has no size to poll: a reader thread hands lines over a queue so
        # the deadline holds even while the writer is silent.
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            try:
                for line in stream:
                    lines.put(line[:MAX_LINE_CHARS].rstrip("\n"))
            finally:
                lines.put(None)

        threading.Thread(target=pump, name="ckptctl-watch-stdin", daemon=True).start()
        while True:
            try:
                item = lines.get(timeout=self.poll_interval_s)
            except queue.Empty:
                yield None
                if self._expired():
                    return
                continue
            if item is None:  # end of input
                return
            yield item
            if lines.empty():
                yield None
            if self._expired():
                return


def _chunks(f: IO[bytes], first: bytes) -> Iterator[bytes]:
    chunk = first
    while chunk:
        yield chunk
        chunk = f.read(CHUNK_BYTES)


def _gunzip(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Decompress a gzip stream (members one after the other) in pieces of at most a chunk."""
    d = zlib.decompressobj(wbits=31)
    for data in chunks:
        while data:
            out = d.decompress(data, CHUNK_BYTES)
            if out:
                yield out
            data = d.unconsumed_tail
            if d.eof:
                data = d.unused_data + data if d.unused_data else data
                d = zlib.decompressobj(wbits=31)
                if not data.startswith(_GZIP_MAGIC):
                    return  # trailing garbage after the last member
    while True:
        out = d.decompress(b"", CHUNK_BYTES) if not d.eof else b""
        if not out:
            return
        yield out


class _LineSplitter:
    """Bytes in, complete lines out; UTF-8 with replacement (logs are not always clean).

    A line is kept to its first ``MAX_LINE_CHARS`` characters; the rest of it is
    dropped as it arrives, so memory stays near one chunk whatever the line length.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        self._overflow = False

    def feed(self, data: bytes) -> list[str]:
        return self.feed_text(self._decoder.decode(data))

    def feed_text(self, data: str) -> list[str]:
        if self._overflow:
            cut = data.find("\n")
            if cut < 0:
                return []  # still inside an over-long line
            data, self._overflow = data[cut + 1 :], False
        text = self._partial + data
        parts = text.split("\n")
        self._partial = parts.pop()
        if len(self._partial) > MAX_LINE_CHARS:
            parts.append(self._partial[:MAX_LINE_CHARS])
            self._partial, self._overflow = "", True
        return [p[:-1] if p.endswith("\r") else p for p in parts]

    def flush(self) -> str | None:
        text = self._partial + self._decoder.decode(b"", final=True)
        self._partial = ""
        return text if text else None
