"""The one output sink.

Data goes to stdout (a rich table/text for people, or exactly one JSON document
with ``--json``); progress, warnings and errors go to stderr. Output is ASCII:
it gets pasted into tickets.

rich is imported on first use (a console, ``escape``, a progress bar), never at import:
it costs ~60 ms of every start, and ``--json`` or a plain line needs none of it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

# C0 controls but newline and tab, DEL, C1 controls (ESC, CSI...), and the bidi overrides
# that reorder what a terminal shows: text from a log, a checkpoint or a user could
# otherwise move the cursor, retitle the window or hide part of a line.
_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F),
             *range(0x2066, 0x206A)]  # fmt: skip
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CONTROLS}


def escape_controls(text: str) -> str:
    """``text`` with every control character shown as ``\\xNN`` (newlines and tabs kept)."""
    return text.translate(_ESCAPES)


# names and paths are one line: newlines, tabs and the Unicode line separators escaped too
_ESCAPES_ALL = {**_ESCAPES, 0x09: "\\x09", 0x0A: "\\x0a", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def shown(text: str) -> str:
    """A name or path as one printable line: every control character (newline and tab too) escaped."""
    return text.translate(_ESCAPES_ALL)


def has_controls(text: str) -> bool:
    """Would ``shown`` change ``text``?"""
    return shown(text) != text


def escape(text: str) -> str:
    """``text`` with rich markup escaped (``[red]`` shown as typed), for text given to a console."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


_CONSOLE_CLASS: list[type[Console]] = []


def _safe_console(**kwargs: Any) -> Console:
    """A console that shows control characters in any text it renders instead of sending them.

    Every string rich renders (printed text, table cells) goes through ``render_str``;
    styles are applied after, so colours still work.
    """
    if not _CONSOLE_CLASS:
        from rich.console import Console

        class _SafeConsole(Console):
            def render_str(self, text: str, *args: Any, **kw: Any) -> Any:
                return super().render_str(escape_controls(text), *args, **kw)

        _CONSOLE_CLASS.append(_SafeConsole)
    return _CONSOLE_CLASS[0](**kwargs)


_out: Console | None = None
_err: Console | None = None


def out() -> Console:
    """Console for data (stdout)."""
    global _out
    if _out is None:
        # Not a terminal (a pipe, a ticket, CI): do not wrap tables at 80 columns.
        width = None if sys.stdout.isatty() else 200
        _out = _safe_console(file=sys.stdout, highlight=False, soft_wrap=True, emoji=False, width=width)
    return _out


def err() -> Console:
    """Console for chatter (stderr)."""
    global _err
    if _err is None:
        _err = _safe_console(file=sys.stderr, highlight=False, soft_wrap=True, emoji=False)
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
    """A plain line on stdout, no markup processing (paths, scriptable values); controls escaped."""
    sys.stdout.write(escape_controls(text) + "\n")
    sys.stdout.flush()


def print_loss_chart(watch: dict[str, Any], indent: str = "") -> None:
    """The chart of the losses around a resume (``cli.loss_chart``) on stdout, if the watch has a curve.

    A terminal gets rich text (colours, Unicode glyphs); anything else the plain ASCII grid.
    """
    from ckptctl.cli import loss_chart

    console = out()
    lines = loss_chart.chart_lines(watch, unicode=console.is_terminal)
    if not lines:
        return
    if console.is_terminal:
        for text in loss_chart.as_text(lines):
            console.print(indent, text, sep="", soft_wrap=True)
    else:
        for line in loss_chart.as_plain(lines):
            print_line(indent + line)


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
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

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
