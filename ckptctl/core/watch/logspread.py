"""A dict record printed over several lines (``pprint``, ``json.dumps(..., indent=2)``).

Pure, stdlib only. A one-line dict (HF Trainer's ``{'loss': 2.3, 'learning_rate': 1e-4, 'epoch':
0.5}``) is read by the dict rule of ``losslog``. A wide one that Python's ``pprint`` prints (TRL's
GRPO logs, anything logged with ``pformat``) spreads over lines, one key per line::

    {'loss': 0.0,
     'grad_norm': 1.93,
     'epoch': 0.09}

and ``json.dumps(metrics, indent=2)`` prints ``{`` / ``  "loss": 2.31,`` / ``  "step": 100`` / ``}``.

The rule: a line with a ``{`` that does not close on it, whose text after the first ``{`` is a
key (a quote) or nothing, opens a record; the lines after it that continue a dict (they begin with
a quote, a closing or opening bracket, or inside a list a number) are collected until the braces
balance. The joined text is then one line read the usual way (same keys, same step, epoch, loss,
restore and evaluation rules) when it is a dict that makes a record; otherwise (a config dump, an
evaluation's dict, an opening that never closed) the collected lines are read one by one as they
would have been without this rule. A line that continues no dict ends the collection and is read
itself. At most ``MAX_LINES`` lines or ``MAX_CHARS`` characters are collected (then they are read
one by one): memory stays bounded whatever the input.
"""

from __future__ import annotations

from typing import Protocol

from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.logevents import LogEvent
from ckptctl.core.watch.logextras import dict_line_record

__all__ = ["MAX_CHARS", "MAX_LINES", "Spread", "opens", "spread_feed", "spread_flush"]

#: Most lines one record may span.
MAX_LINES = 64
#: Most characters one record may hold (joined).
MAX_CHARS = 8192

#: (line number, raw part, rank of the tag, cleaned text) of a collected line.
Line = tuple[int, str, "int | None", str]

_OPENERS = "{["
_CLOSERS = "}]"
_CONTINUE_FIRST = frozenset("'\"{}[]")
_NUMBER_FIRST = frozenset("0123456789-+.nNiI")


def _depth(text: str) -> int:
    """Brackets opened minus closed in ``text`` (quotes not followed: a brace inside a string is
    rare, and a wrong count only ends the record at the bound)."""
    return sum(text.count(c) for c in _OPENERS) - sum(text.count(c) for c in _CLOSERS)


def opens(text: str) -> bool:
    """``text`` (a cleaned line) opens a dict that does not close on it."""
    start = text.find("{")
    if start < 0:
        return False
    rest = text[start + 1 :].lstrip()
    if rest and rest[0] not in "'\"":
        return False  # code ("if (x) {"), a template ("{step:2d}"): no dict's key
    return _depth(text[start:]) > 0 and (not rest or text.endswith((",", "{", "[")))


class Spread:
    """The record being collected: ``lines`` holds (line number, raw part, rank of the tag, cleaned text)."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.depth = 0
        self.chars = 0
        self.plain_before = True
        """The parser's ``plain`` when the record opened (the fast path is off while one is open)."""

    @property
    def open(self) -> bool:
        return bool(self.lines)

    def start(self, line: Line) -> None:
        text = line[3]
        self.lines = [line]
        self.depth = _depth(text[text.find("{") :])
        self.chars = len(text)

    def continues(self, text: str) -> bool:
        """``text`` is a line of the open dict (its next key, a closing brace, a list's number)."""
        first = text[:1]
        return first in _CONTINUE_FIRST or (first in _NUMBER_FIRST and self.depth > 1)

    def add(self, line: Line) -> bool:
        """Take a continuing line; False when the record grew past its bound (the caller reads the
        lines one by one)."""
        self.lines.append(line)
        self.depth += _depth(line[3])
        self.chars += len(line[3]) + 1
        return len(self.lines) <= MAX_LINES and self.chars <= MAX_CHARS

    @property
    def closed(self) -> bool:
        return self.depth <= 0

    def take(self) -> list[Line]:
        """The collected lines (the collection is emptied)."""
        lines, self.lines, self.depth, self.chars = self.lines, [], 0, 0
        return lines

    @staticmethod
    def joined(lines: list[Line]) -> str | None:
        """The one line the record reads as, when it is a dict that makes a record; else None."""
        text = " ".join(line[3] for line in lines)
        doc = lt.read_dict(text)
        if doc is None:
            return None
        return None if dict_line_record(text, doc) is None else text


class LossLogParser(Protocol):
    """What this rule reads and changes of its parser (``losslog.LossLogParser``)."""

    spread: Spread
    plain: bool

    def feed_clean(
        self, part: str, text: str, tag_rank: int | None, line_no: int, multi: bool, events: list[LogEvent], learn: bool = True
    ) -> None: ...


def spread_feed(p: LossLogParser, part: str, text: str, tag_rank: int | None, line_no: int, multi: bool, events: list[LogEvent]) -> bool:
    """Whether the parser's line (``text``, cleaned from ``part``) was taken by a record spread over
    lines (collected, or read with the lines collected before it); False: read it as usual."""
    s = p.spread
    if s.open:
        if not multi and s.continues(text):
            if not s.add((line_no, part, tag_rank, text)):
                _replay(p, events)  # past the bound: the lines as they are, this one among them
            elif s.closed:
                lines = s.lines
                joined = s.joined(lines)
                if joined is None:
                    _replay(p, events)
                else:
                    _end(p)
                    first = lines[0]
                    p.feed_clean(first[1], joined, first[2], first[0], False, events, learn=False)
            return True
        _replay(p, events)
    if multi or not opens(text):
        return False
    s.start((line_no, part, tag_rank, text))
    s.plain_before, p.plain = p.plain, False  # (the fast path sends every line here while one is open)
    return True


def spread_flush(p: LossLogParser) -> list[LogEvent]:
    """The lines of a record still open at the end of the input, read one by one."""
    events: list[LogEvent] = []
    if p.spread.open:
        _replay(p, events)
    return events


def _end(p: LossLogParser) -> list[Line]:
    lines = p.spread.take()
    p.plain = p.spread.plain_before
    return lines


def _replay(p: LossLogParser, events: list[LogEvent]) -> None:
    """The collected lines read one by one, as they would have been without this rule."""
    for line_no, part, tag_rank, text in _end(p):
        p.feed_clean(part, text, tag_rank, line_no, False, events, learn=False)
