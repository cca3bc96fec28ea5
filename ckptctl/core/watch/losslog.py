"""Training-log lines -> loss points (with their step and metrics) and checkpoint markers.

Pure: a ``LossLogParser`` is fed one line at a time and returns what it found; it reads
nothing and keeps only small state (a CSV or column header, the current epoch of a progress
bar, a multi-line record being assembled, the format auto detection locked onto). Stdlib only.

How a line is read (one mechanism for every logger; ``ckptctl.core.watch.logtokens``):

1. Split on carriage returns (tqdm redraws); strip ANSI colours and torchrun's ``[rank0]:``
   tags (the rank unless the payload names one); read a leading timestamp.
2. A restore line (``loaded/restored/resumed ... checkpoint``, ``Continuing training from ...``) or
   a save line (``Saving checkpoint ...``) is a *marker* with the step it names, never a sample,
   whatever numbers it carries.
3. Otherwise the line's fields (``key=value``, ``key: value``, ``key value``, dicts, a CSV row
   under its header, a row of columns under a header line) are classified by their words: a step
   (``step``, ``iter``, ``iteration``, ``global_step``, ``num_updates``; else a progress bar's
   ``N/T`` inside an ``Epoch E``), a training loss (``loss`` first, then
   ``total_loss``/``train_loss``/``lm loss``, then any other ``*loss``; never eval/val/aux/scale),
   and metrics: learning rate, tokens or samples seen, throughput, time per step, loss scale, grad
   norm. Lines naming an evaluation are skipped.
4. A line with a step and no loss opens a record; the lines after it (no step of their own:
   indented or bulleted, or short ``key: value`` lines) add their loss and metrics (Coqui's
   ``--> STEP`` + ``| > loss:``, DeepSpeed's ``step=N, lr=`` + ``steps: N loss:``). A record is
   emitted when the next step, marker or evaluation arrives, or at ``flush()``.
5. The position of a record is its step; without one, a progress bar's (or a bracketed) ``N/T``
   inside an epoch (``epoch x T + N``, axis ``epoch-batch``), or the epoch itself (axis ``epoch``).
6. Tables (a header line, then rows; Markdown tables too; ``logtables``), box-drawn tables of
   splits (``logsplits``) and logs pasted into Markdown code fences (the prose around is no data).

Lines of a shape seen before are read by a compiled template of that shape (``logfast``).
``format`` names the logger a line looks like (``FORMATS``, ``DIALECTS``); ``auto`` locks onto
the first one that gave a point. ``--pattern REGEX`` (groups ``loss``, ``step``, ``rank``,
``epoch``) reads anything else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from types import CodeType

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.epochhead import is_epoch_heading
from ckptctl.core.watch.leadstep import MinibatchRanges, has_range, leading_step
from ckptctl.core.watch.logblocks import KeyValueBlocks
from ckptctl.core.watch.logcsv import CsvHeader, csv_header, csv_row
from ckptctl.core.watch.logevents import (
    EPOCH_AXIS,
    EPOCH_BATCH_AXIS,
    METRICS,
    STEP_AXIS,
    LogEvent,
    LossPoint,
    RestartDetector,
    match_marker,
    record_shape,
)
from ckptctl.core.watch.logextras import EpochBatchPairs, dict_line_record, list_record
from ckptctl.core.watch.logpattern import compile_pattern, pattern_record
from ckptctl.core.watch.logplan import (
    DIALECTS,
    MAYBE_CSV_HEADER_RE,
    RELATIVE_RE,
    SHAPE_CHARS,
    Reading,
    Record,
    apply,
    dialect,
    looks_like_metrics,
    plan_for,
)
from ckptctl.core.watch.logsplits import VERTICALS, SplitTables
from ckptctl.core.watch.logspread import Spread, opens, spread_feed, spread_flush
from ckptctl.core.watch.logtables import is_fence, is_markdown_row, table_header, table_row
from ckptctl.core.watch.logtokens import MAX_LINE_CHARS, clean_line, parse_float

__all__ = [
    "AUTO",
    "FORMATS",
    "PATTERN",
    "LossLogParser",
    "parse_lines",
]

AUTO = "auto"
PATTERN = "pattern"

#: Every format name (``--format``): the dialects, dict lines, CSV and column tables, the rest.
FORMATS: tuple[str, ...] = (
    *dict.fromkeys(name for name, _ in DIALECTS),  # (a logger may have several line shapes)
    "jsonl",
    "hf",
    "lightning-csv",
    "columns",
    "generic",
)

#: Shapes of weak records (``accept``) held at once.
_MAX_WEAK_HELD = 16
#: A record waits at most this many lines for its loss.
_RECORD_SPAN_LINES = 40
#: A line that may continue a record without being indented holds at most this many fields
#: (``loss: 2.31``, ``lr: 3.0e-04``; not a line of its own kind with a dozen).
_CONTINUATION_FIELDS = 4
class LossLogParser:
    """Incremental parser: ``feed(line)`` (or ``feed_lines(lines)``) returns the points and markers it completed.

    ``fast=False`` reads every line the general way (no line templates; for tests).
    """

    def __init__(self, fmt: str = AUTO, pattern: str | None = None, *, fast: bool = True) -> None:
        if pattern is not None:
            self._pattern: re.Pattern[str] | None = compile_pattern(pattern)
            fmt = PATTERN
        else:
            self._pattern = None
            if fmt != AUTO and fmt not in FORMATS:
                raise ValueError(f"unknown log format {fmt!r}; expected auto or one of {FORMATS}")
        self._requested = fmt
        self.locked: str | None = None if fmt in (AUTO, "generic") else fmt
        self.weak_lock = False
        self.weak_shapes: set[str] = set()
        """Shapes of lines carrying an evaluation along seen twice: their records count."""
        self._weak_first: dict[str, Record] = {}
        """The first record of each such shape, held until a second one comes."""
        """The format was locked by records that carry an evaluation along (``lock``)."""
        self.csv: CsvHeader | None = None
        self.blocks = KeyValueBlocks()
        self.spread = Spread()
        self.pairs = EpochBatchPairs()
        self.splits = SplitTables()
        self.ranges = MinibatchRanges()
        self.head: Record | None = None  # the last record opened without a loss (a heading; logsplits)
        self.columns: tuple[str, ...] | None = None
        self._columns_md = False
        self.markdown = False
        self.plain = True
        """No table, CSV or Markdown state yet: a line reads the same whatever came before (the fast
        path is on; these states are never left once entered)."""
        """A Markdown code fence was seen: lines outside fences are prose (only tables and restore lines count)."""
        self._in_fence = False
        self.epoch_ctx: int | None = None
        self.epoch_header: int | None = None
        """The epoch an ``Epoch 3/20`` line just named, until a loss comes: Keras's one-line
        summary of the epoch below it (``3083s - loss: 1.72 - acc: 0.59``, verbose=2) has no step."""
        self.last_bar_step: int | None = None
        self.pending: Record | None = None
        self.in_eval = False
        self.restarts = RestartDetector()
        self._indented = False
        self.num_lines = 0
        self.num_long_lines = 0
        """Lines cut at ``MAX_LINE_CHARS``."""
        self.unread_samples: list[str] = []
        """A few lines that looked like metrics but gave no loss (for the error message)."""
        self.fast_stamp: tuple[str, int] = ("", 0)
        """The last timestamp's part up to its minute the fast path read, and its seconds (most lines repeat it)."""
        self.recipe_code: dict[str, CodeType] = {}  # (the fast path's compiled recipes, by source)
        self._fast = FastPath(self) if fast and pattern is None else None

    @property
    def format(self) -> str | None:
        """The format in use: the requested one, or the one auto-detection locked onto (None yet)."""
        if self._requested == "generic":
            return "generic" if self.locked is not None else None
        return self.locked

    @property
    def requested_generic(self) -> bool:
        return self._requested == "generic"

    @property
    def requested_csv(self) -> bool:
        """CSV lines may be read (``auto`` or ``lightning-csv``)."""
        return self._requested in (AUTO, "lightning-csv")

    def point_fmt(self, fmt: str) -> str:
        """The ``fmt`` a point of a record of format ``fmt`` carries."""
        return self._requested if self._requested == "generic" else fmt

    # -- feeding -------------------------------------------------------------------------

    def feed(self, line: str) -> list[LogEvent]:
        """Parse one physical line (its trailing newline optional)."""
        if self._fast is not None:
            return self._fast.feed_one(line)
        out: list[LogEvent] = []
        self.feed_general(line, out)
        return out

    def feed_lines(self, lines: Iterable[str]) -> list[LogEvent]:
        """Parse many physical lines at once (the fast way to read a file)."""
        out: list[LogEvent] = []
        if self._fast is not None:
            self._fast.feed(lines, out)
        else:
            for line in lines:
                self.feed_general(line, out)
        return out

    def feed_general(self, line: str, events: list[LogEvent]) -> None:
        """One physical line, read the general way; its events are added to ``events``."""
        self.num_lines += 1
        line_no = self.num_lines
        if len(line) > MAX_LINE_CHARS:
            self.num_long_lines += 1
            line = line[:MAX_LINE_CHARS]
        parts = line.rstrip("\n").split("\r")
        multi = len(parts) > 1
        for part in parts:
            self.feed_part(part, line_no, multi, events)

    def feed_part(self, part: str, line_no: int, multi: bool, events: list[LogEvent]) -> None:
        """One part of a physical line (``multi``: the line has several, a progress bar's redraws)."""
        if self.pending is not None:
            self.expire_pending(line_no)
        if not part.strip():
            return
        text, tag_rank = clean_line(part)
        if not text or (("{" in text or self.spread.open) and spread_feed(self, part, text, tag_rank, line_no, multi, events)):
            return  # (a line of a dict printed over several lines: ``logspread``)
        self.feed_clean(part, text, tag_rank, line_no, multi, events)

    def feed_clean(self, part: str, text: str, tag_rank: int | None, line_no: int, multi: bool, events: list[LogEvent], learn: bool = True) -> None:
        """A part's cleaned text (``learn``: a physical line's, the fast path may make its template)."""
        self._indented = part[:1].isspace() or text[:1] in "|>-*"
        found = self._feed_text(text, tag_rank, line_no)
        # (a progress bar's redraws, parts of one line, are never start-up lines)
        # (a key-value block's rows are no start-up lines coming back: each block prints them again)
        took, self.blocks.took = self.blocks.took, False
        restart = self.restarts.see(text, found, line_no, self.pending is not None) if (not multi or found) and (found or not took) else None
        if restart is not None:
            found = [*self.emit_pending(), restart]
        events.extend(found)
        if not found and len(self.unread_samples) < 3 and looks_like_metrics(text):
            self.unread_samples.append(f"line {line_no}: {text[:80]!r}")
        if self._fast is not None and len(part) <= MAX_TEMPLATE_CHARS and learn and not ("{" in text and opens(text)):
            self._fast.learn(part, text, any(isinstance(e, LossPoint) for e in found))

    def flush(self) -> list[LogEvent]:
        """The record still being assembled, if it has a loss (end of input)."""
        return [*spread_flush(self), *self.emit_pending()]

    def peek(self) -> LossPoint | None:
        """The record being assembled as a point (not consumed), for a live evaluation."""
        rec = self.pending
        return None if rec is None or rec.loss is None else self._point(rec, redraw=False)

    # -- one piece of text ---------------------------------------------------------------

    def _feed_text(self, text: str, tag_rank: int | None, line_no: int) -> list[LogEvent]:
        if self._pattern is not None:
            rec = pattern_record(self._pattern, text)
            if rec is None:
                return []
            rec.line_no, rec.fmt = line_no, PATTERN
            rec.rank = rec.rank if rec.rank is not None else tag_rank
            self.locked = PATTERN
            return [self._point(rec, redraw=False)]
        if is_fence(text):
            self.markdown, self._in_fence, self.plain = True, not self._in_fence, False
            return []
        if text[:1] in VERTICALS:  # a box-drawn table of splits (logsplits)
            belongs, split = self.splits.row(text, self.head, line_no)
            if belongs:
                self.plain = False
                return [] if split is None else self.accept(split, tag_rank)
        prose = self.markdown and not self._in_fence and not is_markdown_row(text)
        if self.columns is None and (self.blocks.rows or text.lstrip()[:1] in ("|", "-", "/")):
            took, done = self.blocks.feed(text)  # a key-value block (Stable-Baselines3's logger)
            self.plain = self.plain and not self.blocks.seen
            got = self._fields_record(done, line_no, tag_rank) or [] if done else []
            if took or got:
                return got if took else [*got, *self._feed_text(text, tag_rank, line_no)]
        # a CSV row counts under a header, and a header names a step column (every step key has one of these)
        if not prose and "," in text and self._requested in (AUTO, "lightning-csv") and (self.csv is not None or MAYBE_CSV_HEADER_RE.search(text)):
            csv_rec = self._csv_line(text)
            if csv_rec is not None:
                if csv_rec.loss is None:
                    return []
                csv_rec.line_no, csv_rec.fmt = line_no, "lightning-csv"
                return self.accept(csv_rec, tag_rank)
            if self.csv is not None and self.locked == "lightning-csv":
                return []
        stamp = lt.timestamp_s(text)
        body = text if stamp is None else text[: stamp[1]] + " " + text[stamp[2] :]
        wall = None if stamp is None else stamp[0]
        doc = lt.read_dict(body) if "{" in body and not prose else None
        marker = match_marker(text, body, line_no, doc[0] if doc else None)
        if marker is not None and (not prose or marker.kind == "restore"):
            return [*self.emit_pending(), marker]
        if prose:
            return []  # notes around the fenced log: their numbers are no data
        if doc is not None:
            rec = dict_line_record(body, doc)  # (ParlAI's "[ time:10s total_exs:32 ] {...}": the prefix's step)
            if rec is None:
                return []
            rec.line_no, rec.wall = line_no, rec.wall if rec.wall is not None else wall
            return self.accept(rec, tag_rank)
        if "{" in body and "}" in body:
            return []  # a template or code ({step:2d}), or a dict that did not parse
        listed = list_record(body) if body.endswith("]") else None
        if listed is not None:  # the VITS family's "[*losses, global_step, lr]"
            listed.line_no, listed.wall, listed.fmt = line_no, wall, dialect(text)
            return self.accept(listed, tag_rank)
        if self.columns is None:
            # no word a key could mean something by, no progress counter, no table: nothing to read
            maybe = lt.tokenize_meaningful(body)
            if maybe is None:
                return []
            tokens = maybe
        else:
            tokens = lt.tokenize(body)
        return self._read_tokens(text, body, tokens, wall, line_no, tag_rank)

    def _read_tokens(
        self, text: str, body: str, tokens: lt.Tokens, wall: float | None, line_no: int, tag_rank: int | None
    ) -> list[LogEvent]:
        if self.columns is not None and tokens.fields and not self._columns_md:
            row = self._row(body, line_no, tag_rank)  # a row with a progress bar after it (YOLO)
            if row is not None:
                return row
        if not tokens.fields:
            return self._no_fields(body, tokens, line_no, tag_rank)
        tokens = self.pairs.read(tokens)  # WeNet's "Batch {epoch}/{batch}"
        kinds = lt.meanings(tokens)
        if self.pending is None and lt.is_metrics_only(tokens, kinds):
            return []  # a progress bar's it/s, a memory line: nothing to add them to
        if tokens.counter is None and not any(kinds):
            return []
        if lt.is_eval_line(tokens, kinds):
            self.in_eval = True
            return self.emit_pending()
        keys = tuple((f.key, f.unit) for f in tokens.fields)
        reading = apply(plan_for(kinds, keys), [f.value for f in tokens.fields], [f.total for f in tokens.fields])
        rec = self.record(reading, tokens.counter, tokens.counter_epoch, len(tokens.fields) == 1 and is_epoch_heading(body))
        if rec is None:
            return []
        if rec.step is None and rec.epoch is None and rec.loss is not None:
            rec.step = leading_step(body)  # "12 | loss 2.31 | lr ...": the step is the head cell
        if rec.loss is not None and (rec.step is None or rec.axis == EPOCH_AXIS) and has_range(body):
            # CNTK's "Minibatch[ 501-1000]: loss = ..." and "Finished Epoch[3 of 20]: loss = ..." (leadstep)
            step, by_epoch = self.ranges.step(body)
            if step is None and rec.axis == EPOCH_AXIS:
                return []  # (an epoch's summary beside its ranges)
            rec.step, rec.axis = (step, EPOCH_AXIS if by_epoch else STEP_AXIS) if step is not None else (rec.step, rec.axis)
        rec.line_no, rec.wall = line_no, rec.wall if rec.wall is not None else wall
        rec.shape = record_shape(text)[:SHAPE_CHARS]
        rec.weak = tokens.is_eval  # (an evaluation's words, and a loss named the training one)
        rec.relative = RELATIVE_RE.search(text) is not None
        if rec.step is not None or rec.epoch is not None:
            # only a record with a position keeps its format (a line without one merges or is dropped)
            rec.fmt = dialect(text)
        continues = self._indented or len(tokens.fields) <= _CONTINUATION_FIELDS
        return self.accept(rec, tag_rank, continues=continues)

    def _no_fields(self, body: str, tokens: lt.Tokens, line_no: int, tag_rank: int | None) -> list[LogEvent]:
        markdown = is_markdown_row(body)
        header = table_header(body)  # (digits inside its column names: spaCy's "LOSS TOK2VEC")
        if tokens.is_eval and header is None:
            self.in_eval = True  # a section header: "> EVALUATION", "--> EVAL PERFORMANCE"
            return self.emit_pending()
        if header is not None:  # (before the eval words: "| Step | Train | Val |" names a split's column)
            # a column header (words only, a step and a loss among them), again at each launch
            self.columns, self._columns_md, self.plain = header, markdown, False
            return self.emit_pending()
        if self.columns is not None:
            return self._row(body, line_no, tag_rank) or []
        return []

    def _row(self, body: str, line_no: int, tag_rank: int | None) -> list[LogEvent] | None:
        """A row under the column header: its events; None: the line is no row."""
        assert self.columns is not None
        fields = table_row(body, self.columns, markdown=self._columns_md)
        return None if fields is None else self._fields_record(fields, line_no, tag_rank)

    def _fields_record(self, fields: list[lt.Field] | tuple[lt.Field, ...], line_no: int, tag_rank: int | None) -> list[LogEvent]:
        """The events of a table's row or a key-value block: a record with a step or an epoch."""
        kinds = tuple(lk.classify_key(f.key) for f in fields)
        reading = apply(plan_for(kinds, tuple((f.key, "") for f in fields)), [f.value for f in fields], [f.total for f in fields])
        rec = self.record(reading, None, None)
        if rec is not None and (rec.step is not None or rec.epoch is not None):
            rec.line_no, rec.fmt = line_no, "columns"
            return self.accept(rec, tag_rank)
        return []

    def record(self, r: Reading, counter: tuple[int, int] | None, counter_epoch: int | None, heading: bool = False) -> Record | None:
        """The record a line's reading makes, with the rules that need more than the keys."""
        rec = Record(step=r.step, loss=r.loss, loss_rank=r.loss_rank, epoch=r.epoch, rank=r.rank, metrics=r.metrics, wall=r.wall)
        if r.saw_eval and (rec.loss is None or rec.loss_rank > 1):
            # an evaluation record; a line with a named training loss only carries the last
            # evaluation along (Lightning's bar postfix "train_loss_step=2.8, val_loss=2.9")
            self.in_eval = True
            return None
        if r.nan_count > 0 and rec.step is not None:
            # Megatron leaves NaN iterations out of the printed average (and prints no
            # loss when all were NaN): the counter is the signal.
            rec.loss, rec.loss_rank = math.nan, 0
        if rec.epoch is not None and not lt.is_count(rec.epoch):
            rec.epoch = None if not math.isfinite(rec.epoch) else rec.epoch
        whole_epoch = rec.epoch is not None and lt.is_count(rec.epoch)
        if whole_epoch and r.epoch_total is not None and rec.loss is None and rec.step is None:
            # "Epoch 3/20" on its own line (Keras): the epochs count from 1
            assert rec.epoch is not None
            self.epoch_ctx = int(rec.epoch) - 1
            self.epoch_header = int(rec.epoch)
            return None
        if heading and whole_epoch and rec.loss is None and rec.step is None:
            rec.step, rec.axis = int(rec.epoch or 0), EPOCH_AXIS  # the head of the epoch's record below it (epochhead)
            return rec
        header, self.epoch_header = self.epoch_header, (self.epoch_header if rec.loss is None else None)
        if rec.step is None and counter is not None and rec.loss is not None:
            # a progress bar (or a bracketed counter) counts within the epoch: epoch x total + n;
            # with no epoch at all the counter is the step (Lightning's "Training: | 5050/?")
            epoch = int(rec.epoch) if whole_epoch and rec.epoch is not None else counter_epoch if counter_epoch is not None else self.epoch_ctx
            n, total = counter
            if epoch is not None:
                rec.step = epoch * total + n if total else n
                rec.epoch = float(epoch)
                rec.axis, rec.epoch_len = (EPOCH_BATCH_AXIS, total) if total else (STEP_AXIS, None)
            else:
                rec.step = n
            rec.from_bar = True
        elif rec.step is None and whole_epoch and rec.loss is not None and rec.epoch is not None:
            rec.step, rec.axis = int(rec.epoch), EPOCH_AXIS  # an epoch-indexed log: the epoch is the position
        elif rec.step is None and rec.loss is not None and rec.epoch is None and header is not None and self.pending is None:
            # the first loss under an "Epoch 3/20" line, with no step, counter or epoch of its
            # own: that epoch's summary (Keras, verbose=2); the epoch is its position
            rec.step, rec.epoch, rec.axis = header, float(header), EPOCH_AXIS
        return rec

    def accept(self, rec: Record, tag_rank: int | None, *, continues: bool = False) -> list[LogEvent]:
        """Take a record: emit it, keep it open for the lines of its block, or merge it into the open one."""
        rec.rank = rec.rank if rec.rank is not None else tag_rank
        out: list[LogEvent] = []
        if rec.step is not None:
            self.in_eval = False
            pending = self.pending
            same_rank = pending is not None and (pending.rank == rec.rank or None in (pending.rank, rec.rank))
            if pending is not None and same_rank and pending.step == rec.step and pending.loss is None:
                rec.merge(pending)  # the header line's metrics join the line with the loss
                self.pending = None
            else:
                out.extend(self.emit_pending())
            if rec.loss is None:
                self.pending = self.head = rec
                return out
        elif rec.fmt not in ("hf", "jsonl", PATTERN):
            pending = self.pending
            if (
                pending is not None
                # a record's continuation: indented, bulleted, a short key: value line, or the line
                # right after a header with no loss (RVC's "[200, 9.99e-05]" then "loss_disc=3.859, ...")
                and (self._indented or continues or (pending.loss is None and rec.line_no == pending.line_no + 1))
                and not self.in_eval
                and rec.line_no - pending.line_no <= _RECORD_SPAN_LINES
            ):
                pending.merge(rec)
            elif rec.loss is not None and len(self.unread_samples) < 5:
                self.unread_samples.append(f"line {rec.line_no}: a loss without a step")
            return out
        if rec.loss is None:
            return out
        if rec.weak and rec.shape not in self.weak_shapes:
            # A line that carries an evaluation along counts once a second line of its shape
            # comes (one such line, a quoted example in a script, is no training log).
            first = self._weak_first.pop(rec.shape, None)
            if first is None:
                if len(self._weak_first) < _MAX_WEAK_HELD:
                    self._weak_first[rec.shape] = rec
                return out
            self.weak_shapes.add(rec.shape)
            if self.lock(first.fmt, True):
                out.append(self._point(first, redraw=False))
        if not self.lock(rec.fmt, rec.weak):
            return out
        redraw = False
        if rec.from_bar:
            redraw = rec.step is not None and rec.step == self.last_bar_step
            self.last_bar_step = rec.step
        out.append(self._point(rec, redraw=redraw))
        return out

    def lock(self, fmt: str, weak: bool = False) -> bool:
        """Whether a record of format ``fmt`` counts: auto-detection locks onto the first format
        that gave a point. A ``weak`` record (a line that carries an evaluation along) locks only
        until a plain record of another format comes (then that one's lines count, not these)."""
        if self._requested == "generic":
            self.locked = "generic"
            return fmt not in ("hf", "jsonl", "lightning-csv")
        if self.locked is None or (self.weak_lock and not weak and self.locked != fmt):
            self.locked, self.weak_lock = fmt, weak
            return True
        if self.locked == fmt:
            self.weak_lock = self.weak_lock and weak
            return True
        return False

    def expire_pending(self, line_no: int) -> None:
        """The open record, still without its loss ``_RECORD_SPAN_LINES`` lines after it began, is
        dropped (a header that no loss line followed: nothing later merges into it)."""
        rec = self.pending
        if rec is not None and rec.loss is None and line_no - rec.line_no > _RECORD_SPAN_LINES:
            self.pending = None

    def emit_pending(self) -> list[LogEvent]:
        rec, self.pending = self.pending, None
        if rec is None or rec.loss is None or not self.lock(rec.fmt, rec.weak):
            return []
        return [self._point(rec, redraw=False)]

    def _point(self, rec: Record, *, redraw: bool) -> LossPoint:
        return LossPoint(
            step=rec.step,
            loss=rec.loss if rec.loss is not None else math.nan,
            line_no=rec.line_no,
            fmt=self.point_fmt(rec.fmt),
            rank=rec.rank,
            epoch=rec.epoch,
            redraws_previous=redraw,
            metrics=dict(rec.metrics),
            wall=rec.wall,
            axis=rec.axis,
            epoch_len=rec.epoch_len,
            shape=rec.shape,
            relative=rec.relative,
        )

    # -- CSV --------------------------------------------------------------------------------

    def _csv_line(self, text: str) -> Record | None:
        row = csv_row(text)
        if row is None:
            return None
        header = csv_header(row)
        if header is not None:
            # A new header (CSVLogger rewrites the file when metrics are added, and a
            # resumed run may append a fresh one) replaces the old column map.
            self.csv, self.plain = header, False
            return Record()
        h = self.csv
        if h is None or len(row) != h.num_cols:
            return None
        loss = parse_float(row[h.loss_col]) if row[h.loss_col].strip() else None
        step = lt.parse_int(row[h.step_col]) if row[h.step_col].strip() else None
        if loss is None or step is None:
            return Record()  # a validation row: the training loss cell is empty
        epoch = parse_float(row[h.epoch_col]) if h.epoch_col is not None else None
        rec = Record(step=step, loss=loss, loss_rank=0, epoch=epoch, axis=EPOCH_AXIS if h.epoch_axis else STEP_AXIS)
        for i, name in enumerate(h.names):
            meaning = lk.classify_key(name) if i not in (h.step_col, h.loss_col) else None
            value = parse_float(row[i]) if row[i].strip() else None
            if meaning is not None and value is not None and meaning[0] in METRICS:
                rec.metrics.setdefault(meaning[0], value)
            elif name in ("wall time", "time", "timestamp") and value is not None and value > 1e8:
                rec.wall = value
        return rec


def parse_lines(lines: list[str], fmt: str = AUTO, pattern: str | None = None, *, fast: bool = True) -> list[LogEvent]:
    """Parse a whole list of lines (convenience for tests and small inputs)."""
    parser = LossLogParser(fmt, pattern, fast=fast)
    events = parser.feed_lines(lines)
    events.extend(parser.flush())
    return parser.restarts.drop_cancelled(events)


from ckptctl.core.watch.logfast import MAX_TEMPLATE_CHARS, FastPath  # noqa: E402  (logfast reads this module's rules)
