"""The reader's fast path: a line of a shape seen before is read by one regex match.

Pure, stdlib only. A log prints the same few line shapes millions of times with other
numbers in them. The second time a line's shape (its text without digits) comes by, the
general reader's answer for it is compiled into a *template*: a regex of the raw line
(ANSI colours, torchrun tags and blanks as they are; each number a group of its own form:
sign, thousands separators, fraction, exponent; the numbers of a timestamp and all
numbers near it of their exact width) and a *recipe* saying what the line gives:

* ``NOTHING``: nothing, whatever its numbers (chatter, warnings, a traceback);
* ``METRICS``: nothing unless a multi-line record is open (then the general reader);
* ``RECORD``/``DICT``: a point whose step, loss, epoch, rank, wall time and metrics are
  read from the groups by code made for the template (``_codegen``: group indices and
  our own metric names only, never text from the log);
* ``GENERAL``: read the general way (markers, evaluation lines, headers).

A later line that matches a template whole gives what the general reader gives: the
template fixes every character but the digits of its numbers, and the recipe checks the
few things that depend on the values (a step that is a count, ``N <= T`` for a counter, a
NaN counter of zero, a time below 1e8 s) or hands the line back. What the parser's state
decides (an open record, the format locked onto, the epoch of a Keras bar, an evaluation
block) is read from the parser at run time. Tables, CSV and Markdown switch the fast path
off while they are active. Lines are found by their first characters (``_PREFIX``) among
at most ``_MAX_TEMPLATES`` templates, then the last used ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ckptctl.core import logtokens as lt
from ckptctl.core.logevents import (
    LogEvent,
    failure_line,
    line_shape,
    match_marker,
)
from ckptctl.core.logkeys import NUM
from ckptctl.core.logplan import (
    dict_record,
    looks_like_metrics,
    maybe_csv_header,
)
from ckptctl.core.logrecipe import (
    DICT,
    GENERAL,
    METRICS,
    NOTHING,
    RECORD,
    Numbers,
    Parser,
    Template,
    dict_recipe,
    record_recipe,
)
from ckptctl.core.logtables import is_fence, is_markdown_row, table_header

#: Longest line a template is made of (memory and compile time stay small).
MAX_TEMPLATE_CHARS = 2048
_MAX_TEMPLATES = 512
_MAX_PER_SHAPE = 4
_MAX_RECENT = 6
_PREFIX = 12

_DIGITS_OUT = str.maketrans("", "", "0123456789")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b")
_TAG_RE = re.compile(r"\[([A-Za-z_]*?)(\d{1,9})\]:\s?")
_ANY_NUM_RE = re.compile(r"(?=[-+.\dnNiI])(?:" + NUM + r"|(?i:[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z]))")
_FORM_RE = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d*)(\.?)(\d*)((?:[eE][-+]?\d+)?)")
_EXP_PIECE_RE = re.compile(r"[eE][-+]?")
_DATEISH_RE = re.compile(r"\d+[-/]\d+(?:\s+|T)\d+:\d+")
#: Numbers starting before this position keep their exact width when the line has a date in it
#: (``timestamp_s`` looks at the first 64 characters).
_FIXED_HEAD = 96
_PY_INT = r"(?:0|[1-9]\d{0,14})"


# -- cleaning with a map back to the raw line ------------------------------------------------


def _clean_map(raw: str) -> tuple[str, list[int], list[tuple[int, int]]] | None:
    """``clean_line(raw)`` text, the raw index of each of its characters, and the raw spans of the
    tags' numbers (the first is the rank); None when the two cleanings could disagree."""
    keep: list[int] = []
    pos = 0
    for ansi in _ANSI_RE.finditer(raw):
        keep.extend(range(pos, ansi.start()))
        pos = ansi.end()
    keep.extend(range(pos, len(raw)))
    text = "".join(raw[i] for i in keep)
    if "\n" in text:
        return None
    digits: list[tuple[int, int]] = []
    start = 0
    for _ in range(2 if text.startswith("[") else 0):
        m = _TAG_RE.match(text, start)
        if m is None:
            break
        a, b = keep[m.start(2)], keep[m.end(2) - 1] + 1
        if b - a != m.end(2) - m.start(2):
            return None
        digits.append((a, b))
        start = m.end()
    rest = text[start:]
    lead = len(rest) - len(rest.lstrip())
    stripped = rest.strip()
    index = keep[start + lead : start + lead + len(stripped)]
    if stripped != lt.clean_line(raw)[0]:
        return None
    return stripped, index, digits


# -- number forms ----------------------------------------------------------------------------


def _form(num: str, *, exact: bool, py: bool) -> str | None:
    """A regex for numbers of ``num``'s form (what the field reader would read there, and nothing else)."""
    m = _FORM_RE.fullmatch(num)
    if m is None or not any(c.isdigit() for c in num):
        return re.escape(num)  # nan, -inf, Infinity: as written
    sign, whole, dot, frac, exp = m.groups()
    if len(whole.replace(",", "")) > 15 or len(frac) > 15:
        return None
    out = re.escape(sign)
    if py:
        if "," in whole or not whole or (len(whole) > 1 and whole[0] == "0"):
            return None
        out += _PY_INT if not exact else r"\d" * len(whole)
    elif "," in whole:
        out += rf"\d{{1,3}}(?:,\d{{3}}){{{whole.count(',')}}}" if not exact else re.escape(re.sub(r"\d", "0", whole)).replace("0", r"\d")
    elif whole:
        out += r"\d{1,15}" if not exact else rf"\d{{{len(whole)}}}"
    if dot:
        out += (r"\.\d{1,15}" if not exact else rf"\.\d{{{len(frac)}}}") if frac else r"\."
    if exp:
        out += re.escape(exp[:2]) + r"\d{1,3}" if exp[1] in "+-" else re.escape(exp[0]) + r"\d{1,3}"
    return out


def _literal(piece: str) -> str:
    return re.escape(piece)


# -- templates ---------------------------------------------------------------------------------


class FastPath:
    """The templates of one parser and the loop that reads lines by them."""

    def __init__(self, parser: Parser) -> None:
        self.p = parser
        self.by_prefix: dict[str, Template] = {}
        self.recent: list[Template] = []
        self.by_shape: dict[str, list[Template]] = {}
        self.seen: set[str] = set()
        self.count = 0
        self.hits = 0

    # -- reading ---------------------------------------------------------------------------

    def feed(self, lines: Iterable[str], out: list[LogEvent]) -> None:
        p = self.p
        by_prefix = self.by_prefix
        general = p.feed_general
        for line in lines:
            if line.endswith("\n"):
                line = line.rstrip("\n")
            if not p.plain or len(line) > MAX_TEMPLATE_CHARS:
                general(line, out)
                continue
            if "\r" in line:
                self._parts(line, out)
                continue
            if not line or line.isspace():
                p.num_lines += 1
                continue
            t = by_prefix.get(line[:_PREFIX])
            m = t.regex.fullmatch(line) if t is not None else None
            if t is None or m is None:
                t, m = self._find(line)
                if t is None or m is None:
                    general(line, out)
                    continue
            p.num_lines += 1
            if not self._run(t, m, line, p.num_lines, False, out):
                p.num_lines -= 1
                general(line, out)
            else:
                self.hits += 1

    def _find(self, part: str) -> tuple[Template | None, re.Match[str] | None]:
        for t in self.recent:
            m = t.regex.fullmatch(part)
            if m is not None:
                if len(self.by_prefix) >= 8 * _MAX_TEMPLATES:
                    self.by_prefix.clear()
                self.by_prefix[part[:_PREFIX]] = t
                return t, m
        return None, None

    def _parts(self, line: str, out: list[LogEvent]) -> None:
        """A line of several parts (a progress bar's ``\\r`` redraws), each read as the general reader does."""
        p = self.p
        p.num_lines += 1
        line_no = p.num_lines
        for part in line.split("\r"):
            if not part or part.isspace():
                continue
            if not p.plain:
                p.feed_part(part, line_no, True, out)
                continue
            t = self.by_prefix.get(part[:_PREFIX])
            m = t.regex.fullmatch(part) if t is not None else None
            if m is None:
                t, m = self._find(part)
            if t is None or m is None or not self._run(t, m, part, line_no, True, out):
                p.feed_part(part, line_no, True, out)
            else:
                self.hits += 1

    def _run(self, t: Template, m: re.Match[str], part: str, line_no: int, multi: bool, out: list[LogEvent]) -> bool:
        """Read one part by its template; False: it must be read the general way (nothing changed)."""
        p = self.p
        kind = t.kind
        if kind in (RECORD, DICT):
            assert t.read is not None
            event = t.read(m.groups(), line_no, p)
            if event is None:
                return False
            if event is not False:
                out.append(event)
                p.restarts.saw_point()
                return True
        elif kind == GENERAL or (kind == METRICS and p.pending is not None):
            return False
        # no event: a start-up line back, unread samples
        if not multi:
            r = p.restarts
            in_record = p.pending is not None
            if not r.quiet(t.shape, t.failure, in_record):
                text = lt.clean_line(part)[0]
                restart = r.see_shape(t.shape, text, line_no, in_record, t.failure)
                if restart is not None:
                    out.extend(p.emit_pending())
                    out.append(restart)
                    return True
        if len(p.unread_samples) < 3 and t.metric_like is not False:
            text = lt.clean_line(part)[0]
            if t.metric_like or looks_like_metrics(text):
                p.unread_samples.append(f"line {line_no}: {text[:80]!r}")
        return True

    # -- learning --------------------------------------------------------------------------

    def learn(self, part: str, text: str) -> None:
        """A part the general reader just read: make its template when its shape comes back."""
        if not self.p.plain:
            return
        shape = part.translate(_DIGITS_OUT)
        if shape not in self.seen:
            if len(self.seen) >= 8 * _MAX_TEMPLATES:
                self.seen.clear()
            self.seen.add(shape)
            return
        known = self.by_shape.get(shape, [])
        if len(known) >= _MAX_PER_SHAPE or any(t.regex.fullmatch(part) for t in known):
            return
        t = build(part, text, self.p)
        if t is None:
            return
        if self.count >= _MAX_TEMPLATES:
            self.by_prefix.clear()
            self.by_shape.clear()
            self.recent.clear()
            self.count = 0
        self.count += 1
        self.by_shape.setdefault(shape, []).append(t)
        self.by_prefix[part[:_PREFIX]] = t
        self.recent.insert(0, t)
        del self.recent[_MAX_RECENT:]


def build(part: str, text: str, p: Parser) -> Template | None:
    """The template of ``part`` (``text``: its cleaned text), or None when no template can be exact."""
    mapped = _clean_map(part)
    if mapped is None or mapped[0] != text:
        return None
    _text, index, tag_digits = mapped
    stamp = lt.timestamp_s(text)
    body = text if stamp is None else text[: stamp[1]] + " " + text[stamp[2] :]
    kind = RECORD
    doc = lt.read_dict(body) if "{" in body else None
    tokens: lt.Tokens | None = None
    if is_fence(text) or (p.requested_csv and maybe_csv_header(text)) or match_marker(text, body, 0, doc[0] if doc else None) is not None:
        kind = GENERAL
    elif doc is not None:
        kind = DICT if dict_record(*doc) is not None else NOTHING
    elif "{" in body and "}" in body:
        return None  # braces that hold no dict: whether a dict parses depends on its numbers' forms
    else:
        tokens = lt.tokenize_meaningful(body)
        if tokens is None:
            kind = NOTHING
        elif not tokens.fields:
            header = (tokens.num_numbers == 0 or is_markdown_row(body)) and table_header(body) is not None
            kind = GENERAL if tokens.is_eval or header else NOTHING
        else:
            kinds = lt.meanings(tokens)
            if lt.is_metrics_only(tokens, kinds):
                kind = METRICS
            elif tokens.counter is None and not any(kinds) and lt.counter_spans(body) is None:
                kind = NOTHING
            elif tokens.is_eval:
                kind = GENERAL
    regex_text, numbers = _pattern(part, text, index, tag_digits, stamp, body, py=kind == DICT)
    if regex_text is None:
        return None
    try:
        regex = re.compile(regex_text)
    except re.error:
        return None
    metric_like = looks_like_metrics(text) if len(text) < 400 else None
    t = Template(regex, kind, line_shape(text), failure_line(text), metric_like)
    if kind == RECORD:
        assert tokens is not None
        if not record_recipe(t, tokens, body, numbers, text, p):
            t.kind = GENERAL
    elif kind == DICT:
        assert doc is not None
        if not dict_recipe(t, doc, body, numbers, p):
            t.kind = GENERAL
    return t


def _pattern(
    part: str,
    text: str,
    index: list[int],
    tag_digits: list[tuple[int, int]],
    stamp: tuple[float, int, int] | None,
    body: str,
    *,
    py: bool,
) -> tuple[str | None, Numbers]:
    """The regex of ``part``: its own characters, each number (of ``body``), tag number and the
    timestamp a group; and where each number's group is."""
    nums = Numbers()
    spans = [(m.start(), m.end(), m.group()) for m in _ANY_NUM_RE.finditer(body)]
    # body -> text positions: after the stamp, body has one " " where text had the stamp
    shift = 0 if stamp is None else stamp[2] - stamp[1] - 1

    def to_text(j: int) -> int:
        return j if stamp is None or j < stamp[1] else j + shift

    pieces_ok = _pieces_ok(body, spans)
    if not pieces_ok:
        return None, nums
    exact_head = stamp is not None or _DATEISH_RE.search(text[:_FIXED_HEAD]) is not None
    # raw spans to replace: (raw start, raw end, regex, capturing, body start or marker)
    subs: list[tuple[int, int, str, int]] = []
    for a, b in tag_digits:
        subs.append((a, b, r"\d{1,9}", -2 if not subs else -3))
    if stamp is not None:
        s_raw, e_raw = _raw_span(index, stamp[1], stamp[2])
        if s_raw < 0:
            return None, nums
        subs.append((s_raw, e_raw, re.escape(re.sub(r"\d", "0", text[stamp[1] : stamp[2]])).replace("0", r"\d"), -4))
    for a, b, num in spans:
        ta, tb = to_text(a), to_text(b)
        if stamp is not None and a == stamp[1]:
            return None, nums  # a number where the stamp's blank is
        form = _form(num, exact=exact_head and ta < _FIXED_HEAD, py=py)
        if form is None:
            return None, nums
        ra, rb = _raw_span(index, ta, tb)
        if ra < 0:
            return None, nums
        subs.append((ra, rb, form, a))
        nums.text[a] = num
    subs.sort()
    out: list[str] = []
    pos = 0
    for group, (ra, rb, form, what) in enumerate(subs):
        if ra < pos:
            return None, nums
        piece = part[pos:ra]
        if any(c.isdigit() for c in piece):
            return None, nums  # digits no number took (a version 2.5.1)
        out.append(_literal(piece))
        out.append("(" + form + ")")
        if what >= 0:
            nums.group[what] = group
        elif what == -2:
            nums.tag = group
        elif what == -4:
            nums.stamp = group
        pos = rb
    tail = part[pos:]
    if any(c.isdigit() for c in tail):
        return None, nums
    out.append(_literal(tail))
    return "".join(out), nums


def _raw_span(index: list[int], a: int, b: int) -> tuple[int, int]:
    """The raw span of text[a:b], or (-1, -1) when ANSI codes cut through it."""
    if b <= a or b > len(index):
        return -1, -1
    ra, rb = index[a], index[b - 1] + 1
    return (ra, rb) if rb - ra == b - a else (-1, -1)


def _pieces_ok(body: str, spans: list[tuple[int, int, str]]) -> bool:
    pos = 0
    for k, (a, b, _num) in enumerate(spans):
        piece = body[pos:a]
        if any(c.isdigit() for c in piece):
            return False
        if k > 0 and (piece in (",", ".") or _EXP_PIECE_RE.fullmatch(piece)):
            return False  # "3,5071" is two numbers, "16,507" one: where numbers meet, widths matter
        pos = b
    return not any(c.isdigit() for c in body[pos:])


