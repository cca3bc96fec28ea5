"""CSV exports read by the watch: Lightning's ``metrics.csv``, W&B and TensorBoard scalar exports.

Pure, stdlib only: a header names the step and training-loss columns; rows under it are read.
A header with an epoch column and no step column is an epoch-indexed table (Keras's
``CSVLogger``: ``epoch,accuracy,loss,val_accuracy,val_loss``; a script's ``Epoch ,LR ,RMSE_Train``):
the epoch is the position. A loss column of another name than the usual ones counts when its
words name the training loss (``logkeys.classify_key``: ``xent``, ``rmse_train``; never ``val_*``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

from ckptctl.core.watch.logkeys import LOSS, classify_key
from ckptctl.core.watch.logtokens import parse_float


@dataclass(frozen=True, slots=True)
class CsvHeader:
    step_col: int
    loss_col: int
    epoch_col: int | None
    num_cols: int
    names: tuple[str, ...]
    epoch_axis: bool = False
    """No step column: the epoch column is the position (``step_col`` is it)."""


def csv_row(text: str) -> list[str] | None:
    if "," not in text:
        return None
    try:
        rows = list(csv.reader([text]))
    except csv.Error:
        return None
    return rows[0] if rows else None


#: CSV columns read as the step, in order of preference (compared case-insensitively).
CSV_STEP_KEYS: tuple[str, ...] = (
    "step", "_step", "global_step", "trainer/global_step", "train/global_step", "iteration", "iter",
)  # fmt: skip
#: CSV columns read as the training loss, in order of preference: the per-step value
#: before the plain name, never ``*_epoch`` averages; Megatron-style names.
CSV_LOSS_KEYS: tuple[str, ...] = (
    "train_loss_step", "train/loss_step", "loss_step", "train_loss", "train/loss", "loss",
    "lm_loss", "lm loss", "train/lm_loss",
)  # fmt: skip


def csv_name(cell: str) -> str:
    # W&B's export names a column "<run name> - train/loss" (and adds __MIN/__MAX columns)
    name = cell.strip().lower()
    return name.rsplit(" - ", 1)[-1] if " - " in name else name


def csv_header(row: list[str]) -> CsvHeader | None:
    names = [csv_name(c) for c in row]
    step_col = next((names.index(k) for k in CSV_STEP_KEYS if k in names), None)
    epoch_col = names.index("epoch") if "epoch" in names else None
    if (step_col is None and epoch_col is None) or any(parse_float(c) is not None for c in names if c):
        return None  # no step (or epoch) column, or a row of numbers
    keys = CSV_LOSS_KEYS
    if names == ["wall time", "step", "value"]:
        keys = ("value",)  # TensorBoard's scalar export: its one value column is the curve
    loss_col = next((names.index(k) for k in keys if k in names), None)
    if loss_col is None:
        ranked = [(m[1], i) for i, n in enumerate(names) if (m := classify_key(n.replace(" ", "_"))) is not None and m[0] == LOSS]
        loss_col = min(ranked)[1] if ranked and min(ranked)[0] <= 2 else None
    if loss_col is None:
        return None
    if step_col is None:
        assert epoch_col is not None
        return CsvHeader(epoch_col, loss_col, epoch_col, len(names), tuple(names), epoch_axis=True)
    return CsvHeader(step_col, loss_col, epoch_col, len(names), tuple(names))
