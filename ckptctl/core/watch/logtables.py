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


#: Box-drawing verticals framing a table printed in a box (a terminal UI's panel: ``│step loss│``).
_BOX_BORDERS = "\u2502\u2503\u2551 \t"


def _cells(text: str) -> list[str]:
    if is_markdown_row(text):
        return [c.strip(_CELL_STRIP) for c in text[1:-1].split("|")]
    return text.strip(_BOX_BORDERS).split()


def _column_key(cell: str) -> str:
    return "_".join(cell.lower().split())


def table_header(text: str) -> tuple[str, ...] | None:
    """The column keys of a header line (words only, a step or epoch and a loss among them), else None.

    Column names of two or three plain words (spaCy's ``E    #       LOSS TOK2VEC  LOSS NER  ENTS_F
    SCORE``, ``Epoch  Train Loss  Val Loss``) are read when the header's columns are set apart by runs
    of blanks: the header is split at the runs when that names a step (or epoch) and a loss and the
    names holding a blank are plain words (no ``_`` or ``/``: identifiers are set apart by single
    blanks, LlamaBoard's ``current_steps total_steps loss   lr``). A column named ``#`` counts the
    records (the step), ``E`` beside it the epoch."""
    if ("  " in text or "\t" in text) and not is_markdown_row(text):
        cells = _WIDE_GAP_RE.split(text.strip(_BOX_BORDERS))
        spaced = [c for c in cells if " " in c]
        # (a name of a few plain words: identifiers with "_" or "/" are set apart by single blanks too)
        if spaced and all(len(c.split()) <= 3 and "_" not in c and "/" not in c for c in spaced):
            keys = _header_keys(cells)
            if keys is not None:
                return keys
    return _header_keys(_cells(text))


#: The gap between the columns of a header whose names hold single blanks: two blanks or a tab.
_WIDE_GAP_RE = re.compile(r"[ \t]{2,}|\t")
#: Column names that abbreviate a position: ``#`` (the record's number: the step), ``E`` (epoch).
_ABBREVIATIONS = {"#": "step", "e": "epoch"}


def _header_keys(cells: list[str]) -> tuple[str, ...] | None:
    if not 2 <= len(cells) <= MAX_COLUMNS or any(parse_float(c) is not None for c in cells if c):
        return None
    keys = tuple(_column_key(c) for c in cells)
    if "#" in keys:
        keys = tuple(_ABBREVIATIONS.get(k, k) for k in keys)
    kinds = {m[0] for m in (lk.classify_key(k) for k in keys if k) if m}
    if lk.LOSS not in kinds and "total" in keys and len(_COMPONENTS.intersection(keys)) >= 2:
        # the loss's components named without the word (old YOLO's "GIoU obj cls total", "xy wh conf
        # cls total"): the column "total" beside them is the loss
        keys = tuple("total_loss" if k == "total" else k for k in keys)
        kinds.add(lk.LOSS)
    if lk.LOSS not in kinds and _TRAIN_SPLITS.intersection(keys) and _EVAL_SPLITS.intersection(keys):
        # the splits' losses named by the split alone (a run's notes: "| Step | Train | Val | Gap |"): the
        # bare split words side by side are the loss of each split; a metric is named (acc, bleu, ppl)
        keys = tuple(_split_loss_key(k) for k in keys)
        kinds.add(lk.LOSS)
    if lk.LOSS in kinds and (lk.STEP in kinds or lk.EPOCH in kinds):
        return keys
    return None


#: A split named alone as a column (the same words as ``logsplits``'s row names).
_TRAIN_SPLITS = frozenset({"train", "training", "trn"})
_EVAL_SPLITS = frozenset({"val", "vali", "valid", "validation", "dev", "test", "eval"})


def _split_loss_key(key: str) -> str:
    return key + "_loss" if key in _TRAIN_SPLITS or key in _EVAL_SPLITS else key


#: Loss components a detector's table names without the word "loss" (ultralytics YOLOv3/v5's early
#: ``('Epoch', 'gpu_mem', 'GIoU', 'obj', 'cls', 'total', ...)``, ``('xy', 'wh', 'conf', 'cls', 'total')``).
_COMPONENTS = frozenset({"giou", "box", "obj", "cls", "xy", "wh", "conf", "iou", "l1", "dfl", "seg", "kpt"})


#: A cell with a unit glued to its number (YOLO's ``GPU_mem`` ``10.2G``): not a number, not prose.
_UNIT_CELL_RE = re.compile(r"(?<![\d.])\d{1,15}(?:\.\d{1,15})?[KMGT]i?B?")  # (?<!) and bounds: linear in a search too
#: A clock cell (``11:52:54``, ``0:01:47``: an elapsed or remaining time column): no number, no prose.
_CLOCK_CELL_RE = re.compile(r"\d{1,4}(?::\d{2}){1,2}")  # used whole (fullmatch): linear
#: A position cell ``N/T`` (YOLO's epoch ``3/299``).
_COUNT_CELL_RE = re.compile(r"(?<!\d)(\d{1,9})/(\d{1,9})")


def table_row(text: str, columns: tuple[str, ...], *, markdown: bool) -> tuple[Field, ...] | None:
    """The fields of a row under ``columns``, else None.

    Blank-separated rows: every cell a number, or (YOLO's ``  3/299  10.2G  0.0863  0.0324
    0.0395  23  640: 100% 15/15 [00:08<00:00]``, its header printed again before every epoch) a
    position cell ``N/T`` (the epoch N of T), cells with a unit glued (``10.2G``), and after the
    last cell a ``:`` and a progress bar, which is no cell."""
    if markdown != is_markdown_row(text):
        return None
    cells = _cells(text)
    if not markdown and len(cells) > len(columns):
        head, colon, _bar = text.partition(":")
        cells = head.split() if colon else cells
    if len(cells) != len(columns):
        return None
    fields: list[Field] = []
    for key, cell in zip(columns, cells, strict=True):
        cell = cell if markdown or cell[:1] != "*" else cell.strip("*")  # Markdown emphasis kept in a pasted row
        value = parse_float(cell) if cell else None
        if value is None:
            if markdown:
                continue
            count = _COUNT_CELL_RE.fullmatch(cell)
            if count is not None and lk.classify_key(key) in ((lk.EPOCH, 0), (lk.STEP, 0), (lk.STEP, 2), (lk.STEP, 3)):
                fields.append(Field(key, float(count.group(1)), float(count.group(2))))
            elif _UNIT_CELL_RE.fullmatch(cell) is None and _CLOCK_CELL_RE.fullmatch(cell) is None:
                return None
            continue
        fields.append(Field(key, value))
    return tuple(fields) if fields else None
