"""Tables in training logs: a header line naming the columns, rows of numbers under it.

Pure, stdlib only. Two shapes: columns separated by blanks (``step loss lr sec/it`` then
``100 2.3456 3.0e-04 0.512``) and Markdown tables (``| step | loss | lr |``, a ``|---|``
rule, ``| 1,200 | 2.31 | 3.0e-04 |``; a trainer prints the header again at each launch).
A header names a step (or an epoch) and a training loss among its columns; a row has a
number in those two cells (other cells may hold anything). Also here: Markdown code
fences (a log pasted into notes), read by the parser as a mode.
"""

from __future__ import annotations

import re

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch.logtokens import Field, parse_float

#: Most columns a table header may have.
MAX_COLUMNS = 32
_FENCE_RE = re.compile(r"(?<![ \t])[ \t]*(?:```|~~~)[\w+.-]*[ \t]*")  # used whole (fullmatch); (?<!): linear in a search too
_CELL_STRIP = " \t*`_"


def is_fence(text: str) -> bool:
    """A Markdown code fence line (```` ``` ````, ```` ```text ````, ``~~~``)."""
    return text[:1] in ("`", "~", " ", "\t") and _FENCE_RE.fullmatch(text) is not None


def is_markdown_row(text: str) -> bool:
    return len(text) >= 3 and text[0] == "|" and text[-1] == "|"


def _cells(text: str) -> list[str]:
    if is_markdown_row(text):
        return [c.strip(_CELL_STRIP) for c in text[1:-1].split("|")]
    return text.split()


def _column_key(cell: str) -> str:
    return "_".join(cell.lower().split())


def table_header(text: str) -> tuple[str, ...] | None:
    """The column keys of a header line (words only, a step or epoch and a loss among them), else None."""
    cells = _cells(text)
    if not 2 <= len(cells) <= MAX_COLUMNS or any(parse_float(c) is not None for c in cells if c):
        return None
    keys = tuple(_column_key(c) for c in cells)
    kinds = {m[0] for m in (lk.classify_key(k) for k in keys if k) if m}
    if lk.LOSS in kinds and (lk.STEP in kinds or lk.EPOCH in kinds):
        return keys
    return None


def table_row(text: str, columns: tuple[str, ...], *, markdown: bool) -> tuple[Field, ...] | None:
    """The fields of a row under ``columns`` (blank-separated rows: every cell a number), else None."""
    if markdown != is_markdown_row(text):
        return None
    cells = _cells(text)
    if len(cells) != len(columns):
        return None
    fields: list[Field] = []
    for key, cell in zip(columns, cells, strict=True):
        value = parse_float(cell) if cell else None
        if value is None:
            if not markdown:
                return None
            continue
        fields.append(Field(key, value))
    return tuple(fields) if fields else None
