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
"""

from __future__ import annotations

import codecs
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

from ckptctl.adapters.storage import Storage

#: Bytes read per request.
CHUNK_BYTES = 1 << 20
STDIN = "-"


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
            while True:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    break
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
            for line in stream:
                yield line.rstrip("\r\n") if line.endswith("\r\n") else line.rstrip("\n")
            return
        # A pipe has no size to poll: a reader thread hands lines over a queue so
        # the deadline holds even while the writer is silent.
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            try:
                for line in stream:
                    lines.put(line.rstrip("\n"))
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


class _LineSplitter:
    """Bytes in, complete lines out; UTF-8 with replacement (logs are not always clean)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, data: bytes) -> list[str]:
        text = self._partial + self._decoder.decode(data)
        parts = text.split("\n")
        self._partial = parts.pop()
        return [p[:-1] if p.endswith("\r") else p for p in parts]

    def flush(self) -> str | None:
        text = self._partial + self._decoder.decode(b"", final=True)
        self._partial = ""
        return text if text else None
