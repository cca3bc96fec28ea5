"""Tables of splits: one table per epoch (or step), a row per data split, a column per metric.

Pure, stdlib only. Some trainers print each evaluation round as a box-drawn table (Python's
``tabulate``, ``tablefmt="fancy_grid"``): Ludwig prints, under its ``Epoch 4`` heading (or
``Running evaluation for step: 1500, epoch: 23``), one table per output feature and one for the
combined loss::

    ╒══════════╤════════╤════════════╕
    │ rating   │   loss │   accuracy │
    ╞══════════╪════════╪════════════╡
    │ train    │ 1.1529 │     0.3988 │
    ├──────────┼────────┼────────────┤
    │ vali     │ 1.2190 │     0.2708 │
    ...

The header's first cell names the table (a feature, ``combined``), the others the metrics, a
loss among them and no step or epoch (a table with its own step column is ``logtables``'s). A
row's first cell names a split: the ``train`` row's loss is the training loss of the record the
heading above opened (its position: the heading's epoch or step); the other splits are
evaluations. One training loss per heading: the first ``train`` row (the same table printed
again through a logger, the combined table after the feature's, add nothing). A heading is a
record the reader opened without a loss (``LossLogParser.head``) at most ``MAX_SPAN_LINES``
lines above the row.
"""

from __future__ import annotations

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch.logplan import Record
from ckptctl.core.watch.logtokens import parse_float

#: The verticals of a box-drawn row (light, heavy, double): a row starts with one.
VERTICALS = "\u2502\u2503\u2551"
_SPLIT = str.maketrans({c: "\u2502" for c in VERTICALS[1:]})
#: A row's split names: the training split, and the evaluation ones (no training loss).
TRAIN_SPLITS = frozenset({"train", "training", "trn"})
EVAL_SPLITS = frozenset({"vali", "valid", "validation", "val", "dev", "test", "testing", "eval", "evaluation"})
#: Most lines between the heading and a ``train`` row read as its record.
MAX_SPAN_LINES = 64
_MAX_CELLS = 32


def _cells(text: str) -> list[str] | None:
    """The cells of a box-drawn row (``│ a │ b │``), else None."""
    inner = text.strip().translate(_SPLIT)
    if len(inner) < 3 or inner[0] != "\u2502" or inner[-1] != "\u2502":
        return None
    cells = [c.strip() for c in inner[1:-1].split("\u2502")]
    return cells if 2 <= len(cells) <= _MAX_CELLS else None


def split_header(text: str) -> tuple[str, ...] | None:
    """The metric keys of a split table's header (its first cell, the table's name, as ``""``), else None."""
    cells = _cells(text)
    if cells is None or not all(cells) or any(parse_float(c) is not None for c in cells):
        return None
    keys = ("", *("_".join(c.lower().split()) for c in cells[1:]))
    kinds = [lk.classify_key(k) for k in keys[1:]]
    if not any(m is not None and m[0] == lk.LOSS for m in kinds):
        return None
    if any(m is not None and m[0] in (lk.STEP, lk.EPOCH) for m in kinds):
        return None  # a table with its own position column (logtables)
    return keys


class SplitTables:
    """The state of a log's split tables: the header in force, the heading last read."""

    def __init__(self) -> None:
        self.columns: tuple[str, ...] | None = None
        self._used: int | None = None
        """The line of the heading whose training loss was taken."""

    def row(self, text: str, head: Record | None, line_no: int) -> tuple[bool, Record | None]:
        """(whether the line belongs to a split table, the record of its ``train`` row if any).

        A header sets the columns; a rule line (``├───┼───┤``) or another split's row gives
        nothing; the ``train`` row under a recent heading gives a record at its position."""
        header = split_header(text)
        if header is not None:
            self.columns = header
            return True, None
        if self.columns is None:
            return False, None
        cells = _cells(text)
        if cells is None or len(cells) != len(self.columns):
            return False, None
        name = cells[0].lower()
        if name in EVAL_SPLITS:
            return True, None
        if name not in TRAIN_SPLITS:
            return False, None
        if head is None or head.step is None or self._used == head.line_no or line_no - head.line_no > MAX_SPAN_LINES:
            return True, None
        values = {k: parse_float(c) for k, c in zip(self.columns[1:], cells[1:], strict=True)}
        loss_key, loss_rank = "", 99
        for key, value in values.items():
            meaning = lk.classify_key(key)
            if value is not None and meaning is not None and meaning[0] == lk.LOSS and meaning[1] < loss_rank:
                loss_key, loss_rank = key, meaning[1]
        if not loss_key:
            return True, None
        self._used = head.line_no
        return True, Record(
            step=head.step,
            loss=values[loss_key],
            loss_rank=loss_rank,
            epoch=head.epoch,
            rank=head.rank,
            line_no=line_no,
            fmt="columns",
            axis=head.axis,
        )
