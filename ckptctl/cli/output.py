"""The one output sink.

Data goes to stdout (a rich table/text for people, or exactly one JSON document
with ``--json``); progress, warnings and errors go to stderr. Output is ASCII:
it gets pasted into tickets.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

_out: Console | None = None
_err: Console | None = None


def out() -> Console:
    """Console for data (stdout)."""
    global _out
    if _out is None:
        # Not a terminal (a pipe, a ticket, CI): do not wrap tables at 80 columns.
        width = None if sys.stdout.isatty() else 200
        _out = Console(file=sys.stdout, highlight=False, soft_wrap=True, emoji=False, width=width)
    return _out


def err() -> Console:
    """Console for chatter (stderr)."""
    global _err
    if _err is None:
        _err = Console(file=sys.stderr, highlight=False, soft_wrap=True, emoji=False)
    return _err


def reset() -> None:
    """Forget the consoles (tests swap sys.stdout/sys.stderr between invocations)."""
    global _out, _err
    _out = None
    _err = None


def emit_json(document: Any) -> None:
    """Write one JSON document to stdout."""
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def print_line(text: str) -> None:
    """A plain line on stdout, no markup processing (paths, scriptable values)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def info(message: str) -> None:
    err().print(escape(message))


def warn(message: str) -> None:
    err().print(f"[yellow]warning:[/yellow] {escape(message)}")


def error(message: str, hint: str | None = None) -> None:
    err().print(f"[red]error:[/red] {escape(message)}")
    if hint:
        err().print(f"[dim]hint: {escape(hint)}[/dim]")


def progress_enabled() -> bool:
    """Progress bars only on an interactive stderr, and never when CKPTCTL_NO_PROGRESS is set."""
    return sys.stderr.isatty() and not os.environ.get("CKPTCTL_NO_PROGRESS")


class ByteProgress:
    """Callback object handed to long operations: ``advance(num_bytes)``."""

    def __init__(self, progress: Progress | None, task_id: Any) -> None:
        self._progress = progress
        self._task_id = task_id

    def advance(self, num_bytes: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task_id, advance=num_bytes)

    def set_total(self, total_bytes: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task_id, total=total_bytes)


@contextmanager
def byte_progress(description: str, total_bytes: int | None = None) -> Iterator[ByteProgress]:
    """A rich progress bar on stderr with bytes and bytes/s (no-op when not a TTY)."""
    if not progress_enabled():
        yield ByteProgress(None, None)
        return
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err(),
        transient=True,
    )
    with progress:
        task_id = progress.add_task(description, total=total_bytes)
        yield ByteProgress(progress, task_id)
