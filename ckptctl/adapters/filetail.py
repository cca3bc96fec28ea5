"""Lines appended to a file, read as they come (a job's output file, a supervisor's event log).

The file may not exist yet (nothing is read then); each ``read`` returns the complete lines
written since the last one. A line longer than ``MAX_PARTIAL_BYTES`` without its newline is
handed over in pieces of that size, so a writer that never ends a line costs bounded memory.
"""

from __future__ import annotations

from typing import Any

from ckptctl.core.verify import jsonsafe

__all__ = ["MAX_PARTIAL_BYTES", "EventTail", "FileTail"]

#: The most bytes of one unfinished line kept between two reads.
MAX_PARTIAL_BYTES = 1 << 20
#: The most bytes one ``read`` takes from the file.
READ_BYTES = 1 << 22


class FileTail:
    """The lines appended to ``path``, as text (UTF-8, undecodable bytes replaced)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pos = 0
        self.partial = b""

    def read_raw(self) -> list[bytes]:
        """The complete lines appended since the last read (without their newline)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read(READ_BYTES)
        except OSError:
            return []
        self.pos += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        while len(self.partial) > MAX_PARTIAL_BYTES:
            lines.append(self.partial[:MAX_PARTIAL_BYTES])
            self.partial = self.partial[MAX_PARTIAL_BYTES:]
        return lines

    def read(self) -> list[str]:
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in self.read_raw()]

    def rest(self) -> list[str]:
        """``read``, then the last line even without its newline (the writer has ended)."""
        lines = self.read()
        if self.partial:
            lines.append(self.partial.decode("utf-8", "replace"))
            self.partial = b""
        return lines


class EventTail(FileTail):
    """The complete JSON-object lines appended to ``path`` (any other line is skipped)."""

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.read_raw():
            try:
                doc = jsonsafe.loads(line, max_bytes=MAX_PARTIAL_BYTES)
            except jsonsafe.JsonError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out
