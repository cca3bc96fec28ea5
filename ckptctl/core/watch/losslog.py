"""Training-log lines -> loss points (with their step and metrics) and checkpoint markers.

Pure: a ``LossLogParser`` is fed one line at a time and returns what it found; it
reads nothing and keeps only small state (a CSV or column header, the current
epoch of a progress bar, a multi-line record being assembled, the format auto
detection locked onto). Stdlib only.

How a line is read (one mechanism for every logger; ``ckptctl.core.watch.logtokens``):

1. Split on carriage returns (tqdm redraws); strip ANSI colours and torchrun's
   ``[default0]:`` / ``[rank0]:`` tags (the tag's number is the rank unless the
   payload names one); read a leading timestamp.
2. A restore line (``loaded/restored/resumed ... checkpoint``, ``Continuing training
   from ...``) or a save line (``Saving checkpoint ...``) is a *marker* with the step
   it names, never a sample, whatever numbers it carries.
3. Otherwise the line's fields (``key=value``, ``key: value``, ``key value``, dicts,
   a CSV row under its header, a row of columns under a header line) are classified
   by their words: a step (``step``, ``iter``, ``iteration``, ``global_step``,
   ``num_updates``; else a progress bar's ``N/T`` inside an ``Epoch E``), a training
   loss (``loss`` first, then ``total_loss``/``train_loss``/``lm loss``, then any
   other ``*loss``; never eval/val/aux/scale), and metrics: learning rate, tokens or
   samples seen, throughput, time per step, loss scale, grad norm. Lines naming an
   evaluation are skipped.
4. A line with a step and no loss opens a record; the lines after it (no step of
   their own) add their loss and metrics (Coqui's ``--> STEP`` + ``| > loss:``,
   DeepSpeed's ``step=N, lr=`` + ``steps: N loss:``). A record is emitted when the
   next step, marker or evaluation arrives, or at ``flush()``.

``format`` names the logger a line looks like (``FORMATS``, detection data in
``DIALECTS``); ``auto`` locks onto the first one that gave a point so one stray
line of another shape cannot mix in. ``--pattern REGEX`` (named groups ``loss``,
``step``, ``rank``, ``epoch``) reads anything else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.logcsv import CsvHeader, csv_header, csv_row
from ckptctl.core.watch.logevents import MARKER_HINTS as _MARKER_HINTS
from ckptctl.core.watch.logevents import (
    METRICS,
    LogEvent,
    LossPoint,
    RestartDetector,
    match_marker,
)
from ckptctl.core.watch.logtokens import MAX_LINE_CHARS, clean_line, parse_float

__all__ = [
    "AUTO",
    "FORMATS",
    "PATTERN",
    "LossLogParser",
    "PatternError",
    "compile_pattern",
    "parse_lines",
]

AUTO = "auto"
PATTERN = "pattern"

#: How a line is recognised as one logger's (naming only: reading is the same for all).
#: Ordered: the first match names the line.
DIALECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ckptctl", re.compile(r"ckptctl-train")),
    ("megatron", re.compile(r"\biteration\s+[\d,]+\s*/\s*[\d,]+\s*\|")),
    ("torchtitan", re.compile(r"(?:^|[\s\]-])step:\s*\d+\s+loss:")),
    ("nanogpt", re.compile(r"(?:^|\s)iter \d+: loss ")),
    ("detectron2", re.compile(r"\biter: \d+\s+total_loss:")),
    ("fairseq", re.compile(r"\bnum_updates[=\s]\d")),
    ("deepspeed", re.compile(r"(?:^|\s)steps: \d+ loss: |\bstep=\d+, skipped=\d+")),
    ("coqui", re.compile(r"GLOBAL_STEP:")),
    ("keras", re.compile(r"(?<!\d)\d+/\d+ (?:\u2501|\[[=>.]*\])")),  # (?<!\d), \A(?>.*?A): linear
    ("lightning", re.compile(r"\A(?>.*?Epoch \d+:).*\|")),  # (tests/test_hostile_regex.py)
)
#: Every format name (``--format``): the dialects, dict lines, CSV and column tables, the rest.
FORMATS: tuple[str, ...] = (
    *(name for name, _ in DIALECTS),
    "jsonl",
    "hf",
    "lightning-csv",
    "columns",
    "generic",
)

class PatternError(ValueError):
    """The user's ``--pattern`` is not a usable regular expression; the message says why."""


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a user pattern; it must have a named group ``loss`` (``step``, ``rank``, ``epoch`` optional)."""
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise PatternError(f"--pattern is not a valid regular expression: {e}") from e
    if "loss" not in compiled.groupindex:
        raise PatternError("--pattern needs a named group 'loss', e.g. (?P<loss>[0-9.eE+-]+|nan)")
    unknown = set(compiled.groupindex) - {"loss", "step", "rank", "epoch"}
    if unknown:
        raise PatternError(
            f"--pattern has unknown named group(s) {sorted(unknown)}; use loss, step, rank, epoch"
        )
    return compiled


@dataclass(slots=True)
class _Record:
    """What one line (or a record of several) says."""

    step: int | None = None
    loss: float | None = None
    loss_rank: int = 99
    epoch: float | None = None
    rank: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    wall: float | None = None
    line_no: int = 0
    fmt: str = "generic"
    from_bar: bool = False

    def merge(self, other: _Record) -> None:
        """Add a later line of the same record (its loss only if better ranked)."""
        if other.loss is not None and other.loss_rank < self.loss_rank:
            self.loss, self.loss_rank = other.loss, other.loss_rank
        for k, v in other.metrics.items():
            self.metrics.setdefault(k, v)
        self.epoch = self.epoch if self.epoch is not None else other.epoch
        self.rank = self.rank if self.rank is not None else other.rank
        self.wall = self.wall if self.wall is not None else other.wall


#: A record waits at most this many lines for its loss.
_RECORD_SPAN_LINES = 40


class LossLogParser:
    """Incremental parser: ``feed(line)`` returns the points and markers it completed."""

    def __init__(self, fmt: str = AUTO, pattern: str | None = None) -> None:
        if pattern is not None:
            self._pattern: re.Pattern[str] | None = compile_pattern(pattern)
            fmt = PATTERN
        else:
            self._pattern = None
            if fmt != AUTO and fmt not in FORMATS:
                raise ValueError(f"unknown log format {fmt!r}; expected auto or one of {FORMATS}")
        self._requested = fmt
        self._locked: str | None = None if fmt in (AUTO, "generic") else fmt
        self._csv: CsvHeader | None = None
        self._columns: tuple[str, ...] | None = None
        self._epoch_ctx: int | None = None
        self._last_bar_step: int | None = None
        self._pending: _Record | None = None
        self._dialects: dict[object, str] = {}
        self._known: list[tuple[object, bool]] = []
        """Templates of plain lines (and whether they read as nothing while no record is open), last used first."""
        """The dialect of each line template seen (the dialect regexes read a template's
        numbers only by their form, which the template fixes; see ``logtokens``)."""
        self._in_eval = False
        self._restarts = RestartDetector()
        self._indented = False
        self.num_lines = 0
        self.num_long_lines = 0
        """Lines cut at ``MAX_LINE_CHARS``."""
        self.unread_samples: list[str] = []
        """A few lines that looked like metrics but gave no loss (for the error message)."""

    @property
    def format(self) -> str | None:
        """The format in use: the requested one, or the one auto-detection locked onto (None yet)."""
        if self._requested == "generic":
            return "generic" if self._locked is not None else None
        return self._locked

    # -- feeding -------------------------------------------------------------------------

    def feed(self, line: str) -> list[LogEvent]:
        """Parse one physical line (its trailing newline optional)."""
        self.num_lines += 1
        line_no = self.num_lines
        if len(line) > MAX_LINE_CHARS:
            self.num_long_lines += 1
            line = line[:MAX_LINE_CHARS]
        events: list[LogEvent] = []
        parts = line.rstrip("\n").split("\r")
        for part in parts:
            if not part.strip():
                continue
            text, tag_rank = clean_line(part)
            if text:
                self._indented = part[:1].isspace() or text[:1] in "|>-*"
                found = self._feed_text(text, tag_rank, line_no)
                # (a progress bar's redraws, parts of one line, are never start-up lines)
                restart = self._restarts.see(text, found, line_no, self._pending is not None) if len(parts) == 1 or found else None
                if restart is not None:
                    found = [*self._emit_pending(), restart]
                events.extend(found)
                if not found and len(self.unread_samples) < 3 and _looks_like_metrics(text):
                    self.unread_samples.append(f"line {line_no}: {text[:80]!r}")
        return events

    def flush(self) -> list[LogEvent]:
        """The record still being assembled, if it has a loss (end of input)."""
        return self._emit_pending()

    def peek(self) -> LossPoint | None:
        """The record being assembled as a point (not consumed), for a live evaluation."""
        rec = self._pending
        return None if rec is None or rec.loss is None else self._point(rec, redraw=False)

    # -- one piece of text ---------------------------------------------------------------

    def _feed_text(self, text: str, tag_rank: int | None, line_no: int) -> list[LogEvent]:
        if self._pattern is not None:
            rec = _pattern_record(self._pattern, text)
            if rec is None:
                return []
            rec.line_no, rec.fmt = line_no, PATTERN
            rec.rank = rec.rank if rec.rank is not None else tag_rank
            self._locked = PATTERN
            return [self._point(rec, redraw=False)]
        if self._csv is None and self._columns is None:
            # a line of a template seen before on a plain line (see _remember): straight to its fields
            for k, (template, inert) in enumerate(self._known):
                known = lt.tokenize_as(template, text)
                if known is None:
                    continue
                if k:
                    self._known.insert(0, self._known.pop(k))
                if inert and self._pending is None:
                    return []  # the same line as one that read as nothing, other numbers
                return self._read_tokens(text, text, known, None, line_no, tag_rank)
        # a CSV row counts under a header, and a header names a step column (every step key has one of these)
        if "," in text and self._requested in (AUTO, "lightning-csv") and (self._csv is not None or _MAYBE_CSV_HEADER_RE.search(text)):
            csv_rec = self._csv_line(text)
            if csv_rec is not None:
                if csv_rec.loss is None:
                    return []
                csv_rec.line_no, csv_rec.fmt = line_no, "lightning-csv"
                return self._accept(csv_rec, tag_rank)
            if self._csv is not None and self._locked == "lightning-csv":
                return []
        stamp = lt.timestamp_s(text)
        body = text if stamp is None else text[: stamp[1]] + " " + text[stamp[2] :]
        wall = None if stamp is None else stamp[0]
        doc = lt.read_dict(body) if "{" in body else None
        marker = match_marker(text, body, line_no, doc[0] if doc else None)
        if marker is not None:
            return [*self._emit_pending(), marker]
        if doc is not None:
            rec = _dict_record(*doc)
            if rec is None:
                return []
            rec.line_no, rec.wall = line_no, rec.wall if rec.wall is not None else wall
            return self._accept(rec, tag_rank)
        if "{" in body and "}" in body:
            return []  # a template or code ({step:2d}), or a dict that did not parse
        if self._columns is None:
            # no word a key could mean something by, no progress counter, no table: nothing to read
            maybe = lt.tokenize_meaningful(body)
            if maybe is None:
                return []
            tokens = maybe
        else:
            tokens = lt.tokenize(body)
        if stamp is None:
            self._remember(text, tokens)
        return self._read_tokens(text, body, tokens, stamp, line_no, tag_rank)

    def _read_tokens(
        self, text: str, body: str, tokens: lt.Tokens, stamp: tuple[float, int, int] | None, line_no: int, tag_rank: int | None
    ) -> list[LogEvent]:
        wall = None if stamp is None else stamp[0]
        if self._pending is None and lt.is_metrics_only(tokens):
            return []  # a progress bar's it/s, a memory line: nothing to add them to
        if not tokens.fields:
            return self._no_fields(body, tokens, line_no, tag_rank)
        if tokens.counter is None and not any(lt.meanings(tokens)):
            return []
        if tokens.is_eval:
            self._in_eval = True
            return self._emit_pending()
        rec = self._classify(tokens)
        if rec is None:
            return []
        rec.line_no, rec.wall = line_no, wall
        if rec.step is not None:
            # only a record with a step keeps its format (a line without one merges or is dropped)
            rec.fmt = self._dialect_of(text, tokens.template if stamp is None else None)
        return self._accept(rec, tag_rank)

    def _remember(self, text: str, tokens: lt.Tokens) -> None:
        """Keep the template of a plain line: its later lines go straight to their fields.

        Plain: the template fixes every character but the numbers' digits, and nothing read
        before the fields depends on those here: no timestamp (nor a run of numbers a
        timestamp could be), no marker word, no dict, no CSV header cell. ``inert``: the
        line reads as nothing while no record is open (``logtokens.is_inert``).
        """
        template = tokens.template
        if (
            template is None
            or "{" in text
            or _MAYBE_STAMP_RE.search(text)
            or any(h in text.lower() for h in _MARKER_HINTS)
            or ("," in text and _MAYBE_CSV_HEADER_RE.search(text))
            or any(t is template for t, _inert in self._known)
        ):
            return
        self._known.insert(0, (template, lt.is_inert(tokens)))
        del self._known[_MAX_KNOWN:]

    def _dialect_of(self, text: str, template: object | None) -> str:
        if template is None:
            return _dialect(text, self._locked)
        name = self._dialects.get(template)
        if name is None:
            if len(self._dialects) >= 1024:
                self._dialects.clear()
            name = self._dialects[template] = _dialect(text, self._locked)
        return name

    def _no_fields(
        self, body: str, tokens: lt.Tokens, line_no: int, tag_rank: int | None
    ) -> list[LogEvent]:
        if tokens.is_eval:
            self._in_eval = True  # a section header: "> EVALUATION", "--> EVAL PERFORMANCE"
            return self._emit_pending()
        # a column header: words only, a step and a loss among them
        parts = body.split()
        if tokens.num_numbers == 0 and 2 <= len(parts) <= 32:
            meanings = [lt.classify_key(p) for p in parts]
            kinds = {m[0] for m in meanings if m}
            if lt.STEP in kinds and lt.LOSS in kinds:
                self._columns = tuple(p for p in parts)
                return self._emit_pending()
        if self._columns is not None and tokens.num_numbers == len(parts) == len(self._columns):
            values = [parse_float(p) for p in parts]
            if all(v is not None for v in values):
                fields = tuple(lt.Field(k.lower(), v) for k, v in zip(self._columns, values, strict=True) if v is not None)
                rec = self._classify(lt.Tokens(fields, None, False, len(fields)))
                if rec is not None:
                    rec.line_no, rec.fmt = line_no, "columns"
                    return self._accept(rec, tag_rank)
        return []

    def _classify(self, tokens: lt.Tokens) -> _Record | None:
        rec = _Record()
        step_rank = 99
        nan_count = 0.0
        epoch_total: float | None = None
        saw_eval = False
        for f, meaning in zip(tokens.fields, lt.meanings(tokens), strict=True):
            if meaning is None:
                continue
            kind, rank = meaning
            if kind == lt.STEP:
                if rank < step_rank and lt.is_count(f.value):
                    rec.step, step_rank = int(f.value), rank
            elif kind == lt.LOSS:
                if rank < rec.loss_rank:
                    rec.loss, rec.loss_rank = f.value, rank
            elif kind == lt.EVAL:
                saw_eval = True
            elif kind == lt.NAN_COUNT:
                nan_count = f.value
            elif kind == lt.EPOCH:
                rec.epoch, epoch_total = f.value, f.total
            elif kind == lt.RANK:
                rec.rank = int(f.value) if lt.is_count(f.value) else None
            elif kind == lt.WALL:
                rec.wall = f.value if f.value > 1e8 else None
            elif kind == lt.SEC_PER_STEP:
                if f.value > 1e8:
                    rec.wall = f.value  # a "time" field holding a Unix time
                    continue
                ms = "ms" in lt.key_words(f.key) or f.unit.startswith("ms") or f.key.startswith("ms")
                rec.metrics.setdefault(lt.SEC_PER_STEP, f.value / 1000 if ms else f.value)
            else:
                rec.metrics.setdefault(kind, f.value)
        if saw_eval and (rec.loss is None or rec.loss_rank > 1):
            # an evaluation record; a line with a named training loss only carries the last
            # evaluation along (Lightning's bar postfix "train_loss_step=2.8, val_loss=2.9")
            self._in_eval = True
            return None
        if nan_count > 0 and rec.step is not None:
            # Megatron leaves NaN iterations out of the printed average (and prints no
            # loss when all were NaN): the counter is the signal.
            rec.loss, rec.loss_rank = math.nan, 0
        if rec.epoch is not None and not lt.is_count(rec.epoch):
            rec.epoch = None if not math.isfinite(rec.epoch) else rec.epoch
        if rec.epoch is not None and lt.is_count(rec.epoch) and epoch_total is not None and rec.loss is None and rec.step is None:
            # "Epoch 3/20" on its own line (Keras): the epochs count from 1
            self._epoch_ctx = int(rec.epoch) - 1
            return None
        if rec.step is None and tokens.counter is not None:
            epoch = int(rec.epoch) if rec.epoch is not None and lt.is_count(rec.epoch) else self._epoch_ctx
            if epoch is not None and rec.loss is not None:
                n, total = tokens.counter
                rec.step = epoch * total + n if total else n
                rec.epoch = float(epoch)
                rec.from_bar = True
        return rec

    def _accept(self, rec: _Record, tag_rank: int | None) -> list[LogEvent]:
        rec.rank = rec.rank if rec.rank is not None else tag_rank
        out: list[LogEvent] = []
        if rec.step is not None:
            self._in_eval = False
            pending = self._pending
            same_rank = pending is not None and (pending.rank == rec.rank or None in (pending.rank, rec.rank))
            if pending is not None and same_rank and pending.step == rec.step and pending.loss is None:
                rec.merge(pending)  # the header line's metrics join the line with the loss
                self._pending = None
            else:
                out.extend(self._emit_pending())
            if rec.loss is None:
                self._pending = rec
                return out
        elif rec.fmt not in ("hf", "jsonl", PATTERN):
            pending = self._pending
            if (
                pending is not None
                and self._indented  # a record's continuation lines are indented or bulleted
                and not self._in_eval
                and rec.line_no - pending.line_no <= _RECORD_SPAN_LINES
            ):
                pending.merge(rec)
            elif rec.loss is not None and len(self.unread_samples) < 5:
                self.unread_samples.append(f"line {rec.line_no}: a loss without a step")
            return out
        if rec.loss is None:
            return out
        if not self._lock(rec.fmt):
            return out
        redraw = False
        if rec.from_bar:
            redraw = rec.step is not None and rec.step == self._last_bar_step
            self._last_bar_step = rec.step
        out.append(self._point(rec, redraw=redraw))
        return out

    def _lock(self, fmt: str) -> bool:
        if self._requested == "generic":
            self._locked = "generic"
            return fmt not in ("hf", "jsonl", "lightning-csv")
        if self._locked is None:
            self._locked = fmt
        return self._locked == fmt

    def _emit_pending(self) -> list[LogEvent]:
        rec, self._pending = self._pending, None
        if rec is None or rec.loss is None or not self._lock(rec.fmt):
            return []
        return [self._point(rec, redraw=False)]

    def _point(self, rec: _Record, *, redraw: bool) -> LossPoint:
        return LossPoint(
            step=rec.step,
            loss=rec.loss if rec.loss is not None else math.nan,
            line_no=rec.line_no,
            fmt=self._requested if self._requested == "generic" else rec.fmt,
            rank=rec.rank,
            epoch=rec.epoch,
            redraws_previous=redraw,
            metrics=dict(rec.metrics),
            wall=rec.wall,
        )

    # -- CSV --------------------------------------------------------------------------------

    def _csv_line(self, text: str) -> _Record | None:
        row = csv_row(text)
        if row is None:
            return None
        header = csv_header(row)
        if header is not None:
            # A new header (CSVLogger rewrites the file when metrics are added, and a
            # resumed run may append a fresh one) replaces the old column map.
            self._csv = header
            return _Record()
        h = self._csv
        if h is None or len(row) != h.num_cols:
            return None
        loss = parse_float(row[h.loss_col]) if row[h.loss_col].strip() else None
        step = lt.parse_int(row[h.step_col]) if row[h.step_col].strip() else None
        if loss is None or step is None:
            return _Record()  # a validation row: the training loss cell is empty
        epoch = parse_float(row[h.epoch_col]) if h.epoch_col is not None else None
        rec = _Record(step=step, loss=loss, loss_rank=0, epoch=epoch)
        for i, name in enumerate(h.names):
            meaning = lt.classify_key(name) if i not in (h.step_col, h.loss_col) else None
            value = parse_float(row[i]) if row[i].strip() else None
            if meaning is not None and value is not None and meaning[0] in METRICS:
                rec.metrics.setdefault(meaning[0], value)
            elif name in ("wall time", "time", "timestamp") and value is not None and value > 1e8:
                rec.wall = value
        return rec


#: A CSV header has a cell that is a step key (``CSV_STEP_KEYS`` all end so): one ends here.
#: Numbers a timestamp could be made of, whatever their widths (``logtokens.timestamp_s``).
_MAYBE_STAMP_RE = re.compile(r"(?<!\d)\d+[-/]\d+(?:\s+|T)\d+:\d+:\d+")  # (?<!\d): linear on digit runs
_MAX_KNOWN = 8
_MAYBE_CSV_HEADER_RE = re.compile(r"(?:step|iter|iteration)\s*\"?\s*(?:,|$)", re.IGNORECASE)
# Starts only at a word's first letter (from every letter, 2,000 lines of 1,900 letters took 23 s).
_METRIC_SHAPE_RE = re.compile(r"(?<![A-Za-z_])[A-Za-z_]\w*\s*[:=]?\s*-?\d")


def _looks_like_metrics(text: str) -> bool:
    """A word followed by a number: a line someone may have meant as a metric line."""
    return any(c.isdigit() for c in text[:512]) and _METRIC_SHAPE_RE.search(text[:512]) is not None


_DIALECT_RES = dict(DIALECTS)


def _dialect(text: str, locked: str | None = None) -> str:
    """The logger the line looks like (the locked one is tried first: the common case)."""
    if locked is not None and locked in _DIALECT_RES and _DIALECT_RES[locked].search(text):
        # an earlier dialect in DIALECTS may also match; keep the order's answer exact
        first = next(name for name, regex in DIALECTS if name == locked or regex.search(text))
        return first
    for name, regex in DIALECTS:
        if regex.search(text):
            return name
    return "generic"


def _dict_record(doc: dict[str, Any], style: str) -> _Record | None:
    if "train_runtime" in doc:
        return None  # HF's end-of-training summary: the whole-run average as train_loss
    fields = lt.dict_fields(doc)
    rec = _Record(fmt=style)
    step_rank = 99
    for f in fields:
        meaning = lt.classify_key(f.key)
        if meaning is None:
            continue
        kind, rank = meaning
        if kind == lt.EVAL:
            return None
        if kind == lt.STEP and rank < step_rank and lt.is_count(f.value):
            rec.step, step_rank = int(f.value), rank
        elif kind == lt.LOSS and rank < rec.loss_rank and rank <= 2:
            rec.loss, rec.loss_rank = f.value, rank
        elif kind == lt.EPOCH:
            rec.epoch = f.value
        elif kind == lt.RANK:
            rec.rank = int(f.value) if lt.is_count(f.value) else None
        elif kind in (lt.WALL, lt.SEC_PER_STEP) and f.value > 1e8:
            rec.wall = f.value
        elif kind in METRICS:
            rec.metrics.setdefault(kind, f.value)
    if rec.loss is None:
        return None
    if style == "jsonl" and rec.step is None:
        return None  # a JSON line needs its step
    if style == "hf" and rec.step is None and not ({"epoch", "learning_rate", "grad_norm"} & set(doc)):
        return None
    return rec


def _pattern_record(compiled: re.Pattern[str], text: str) -> _Record | None:
    m = compiled.search(text)
    if m is None:
        return None
    groups = m.groupdict()
    loss = parse_float(groups.get("loss") or "")
    if loss is None:
        return None
    step = lt.parse_int(groups["step"]) if groups.get("step") else None
    if groups.get("step") and step is None:
        return None
    rank = lt.parse_int(groups["rank"]) if groups.get("rank") else None
    epoch = parse_float(groups["epoch"]) if groups.get("epoch") else None
    return _Record(step=step, loss=loss, loss_rank=0, epoch=epoch, rank=rank)


def parse_lines(lines: list[str], fmt: str = AUTO, pattern: str | None = None) -> list[LogEvent]:
    """Parse a whole list of lines (convenience for tests and small inputs)."""
    parser = LossLogParser(fmt, pattern)
    events: list[LogEvent] = []
    for line in lines:
        events.extend(parser.feed(line))
    events.extend(parser.flush())
    return events
