"""A job's output file on this host, read for what ckptctl's records need (bounded).

``read_tail``: the last lines of a log (the newest step a failed run logged is near its
end). ``scan_starts``: every ``JOB_START_TAG`` line a batch script printed (one per start
of the job: ``core.launch.job``), each with the lines just before it (what the run the
restart ended logged last). Both read at most a fixed number of bytes and keep a fixed
number of lines, whatever the file's size; a file that cannot be read gives nothing.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass

from ckptctl.core.launch.job import JOB_START_TAG, JobStart, parse_job_start

#: Bytes of a log's end ``read_tail`` reads.
TAIL_BYTES = 4 << 20
#: Bytes of a job's output ``scan_starts`` reads at most (its start lines beyond are not seen).
SCAN_BYTES = 512 << 20
#: Lines kept before each start line (the end of the run before it).
CONTEXT_LINES = 2000
_TAG = JOB_START_TAG.encode()
_LINE_BYTES = 1 << 16


def read_tail(path: str, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last ``max_bytes`` of a local file as lines (the first, likely cut, dropped); [] when unreadable."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if size > max_bytes else lines


@dataclass(frozen=True, kw_only=True, slots=True)
class StartSeen:
    start: JobStart
    before: tuple[str, ...]
    """Up to ``CONTEXT_LINES`` lines just before the start line."""


def scan_starts(path: str, *, max_bytes: int = SCAN_BYTES, context_lines: int = CONTEXT_LINES) -> list[StartSeen]:
    """Every job start line of a local job output, in order; [] when the file cannot be read."""
    out: list[StartSeen] = []
    recent: deque[str] = deque(maxlen=context_lines)
    read = 0
    try:
        with open(path, "rb") as f:
            n = 0
            while read < max_bytes:
                raw = f.readline(_LINE_BYTES)  # a longer line comes in pieces: memory stays bounded
                if not raw:
                    break
                n += 1
                read += len(raw)
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if _TAG in raw:
                    start = parse_job_start(line, n)
                    if start is not None:
                        out.append(StartSeen(start=start, before=tuple(recent)))
                        recent.clear()
                        continue
                recent.append(line)
    except OSError:
        return out
    return out
