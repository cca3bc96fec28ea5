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
off while they are active. A line's templates are found by its key (``line_key``) among at
most ``_MAX_TEMPLATES``, or guessed from the previous line's (``loghot``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.leadstep import has_range, leading_step
from ckptctl.core.watch.logcleanmap import clean_map
from ckptctl.core.watch.logevents import (
    STEP_AXIS,
    LogEvent,
    failure_line,
    line_shape,
    match_marker,
)
from ckptctl.core.watch.logextras import is_list_line, prefix_dict_record
from ckptctl.core.watch.loghot import captured, guess_key, guess_repeated, read_repeated
from ckptctl.core.watch.logkeys import NUM
from ckptctl.core.watch.logparts import (
    MAX_PER_KEY,
    MAX_PLAN_BUILDS,
    Plan,
    note_line,
    read_part,
    read_rest,
    run_plan,
)
from ckptctl.core.watch.logplan import (
    dict_record,
    looks_like_metrics,
    maybe_csv_header,
)
from ckptctl.core.watch.logrecipe import (
    DICT,
    EVAL,
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
from ckptctl.core.watch.logtables import is_fence, is_markdown_row, table_header

#: Longest line a template is made of (memory and compile time stay small).
MAX_TEMPLATE_CHARS = 2048
_MAX_TEMPLATES = 512
_MAX_FAILS = 3
_NO_TEMPLATES: list[Template | None] = [None]
_NO_PLANS: list[Plan | None] = [None]
_UNCOMPILED = re.compile("")

_DIGITS = b"0123456789"
_DIGIT_RUN_RE = re.compile(r"\d+")
#: A hex word (an address, a communicator id): read by the general reader as no field whatever its digits.
_HEX_RE = re.compile(r"(?:(?<=[\s=:(\[,])|^)0x[0-9a-fA-F]{1,16}(?=[\s,;)\]]|$)")
_HEX_FORM = "0x[0-9a-fA-F]{1,16}"


def line_key(line: str) -> bytes:
    """The lookup key of a line: its text without digits (hex words as ``0x``); every line a
    template matches has the template's key."""
    if "0x" in line:
        line = _HEX_RE.sub("0x", line)
    return line.encode("utf-8", "surrogatepass").translate(None, _DIGITS)
_ANY_NUM_RE = re.compile(r"(?=[-+.\dnNiI])(?:" + NUM + r"|(?i:[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z]))")
_FORM_RE = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d*)(\.?)(\d*)((?:[eE][-+]?\d+)?)")
_EXP_PIECE_RE = re.compile(r"[eE][-+]?")
_DATEISH_RE = re.compile(r"(?<!\d)\d+[-/]\d+(?:\s+|T)\d+:\d+")  # (?<!\d): linear on digit runs
#: Numbers starting before this position keep their exact width when the line has a date in it
#: (``timestamp_s`` looks at the first 64 characters).
_FIXED_HEAD = 96
_PY_INT = r"(?:0|[1-9][0-9]{0,14})"


# -- number forms ----------------------------------------------------------------------------


def _form(num: str, *, exact: bool, py: bool) -> str | None:
    """A regex for numbers of ``num``'s form (what the field reader would read there, and nothing else)."""
    if not num.isascii():
        return None  # (a digit of another script: ``[0-9]`` below would not match it)
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
        out += _PY_INT if not exact else rf"[0-9]{{{len(whole)}}}"
    elif "," in whole:
        out += rf"[0-9]{{1,3}}(?:,[0-9]{{3}}){{{whole.count(',')}}}" if not exact else re.escape(re.sub(r"\d", "0", whole)).replace("0", "[0-9]")
    elif whole:
        out += "[0-9]{1,15}" if not exact else rf"[0-9]{{{len(whole)}}}"
    if dot:
        out += (r"\.[0-9]{1,15}" if not exact else rf"\.[0-9]{{{len(frac)}}}") if frac else r"\."
    if exp:
        out += re.escape(exp[:2]) + "[0-9]{1,3}" if exp[1] in "+-" else re.escape(exp[0]) + "[0-9]{1,3}"
    return out


#: The characters a pattern (no flags, outside a set) reads as syntax; ``re.escape`` also escapes
#: blanks, ``-``, ``#``, ``&``, ``~`` ..., which costs the regex parser a call each (a template of a
#: long line compiles in about half the time with these only).
_SYNTAX = {ord(c): "\\" + c for c in "\\.^$*+?{}[]|()"}


def _run_form(m: re.Match[str]) -> str:
    """A digit run's form in a loose template: any run of up to 9 digits (``[0-9]``: half the
    matching time of ``\\d``, which also takes other scripts' digits; a run with one of those keeps it)."""
    return "[0-9]{1,9}" if m.group().isascii() else r"\d{1,9}"


def _literal(piece: str) -> str:
    """``piece`` as a literal in a pattern compiled with no flags."""
    return piece.translate(_SYNTAX)


# -- templates ---------------------------------------------------------------------------------


class FastPath:
    """The templates of one parser and the loop that reads lines by them.

    A line's lookup key is its raw text without digits: every line a template matches has
    its template's key (the template fixes every character but digits), so one ``translate``
    and one dict lookup find the few templates (at most ``MAX_PER_KEY``) to try.
    """

    def __init__(self, parser: Parser) -> None:
        self.p = parser
        self.by_key: dict[bytes, list[Template]] = {}
        self.tries: dict[bytes, int] = {}
        """Keys seen and how many of their lines made no template (a key's first line makes none)."""
        self.count = 0
        self.hits = 0
        self.plan_hits = 0
        self.plans: dict[bytes, list[Plan]] = {}
        """Plans of lines of several parts, by the line's key (``logparts``)."""
        self.plan_state: dict[bytes, list[int]] = {}
        """Per key: plans made (a key whose lines each need another plan stops getting them), and
        lines read part by part since the last one."""
        self.prev: Template | None = None
        self.prev_plan: Plan | None = None
        """The template of the last line read by one; its ``next`` is tried first (``loghot``)."""
        self.prev_rep: Template | None = None
        """The template of the last line of repeated parts (``loghot.guess_repeated``)."""
        self.floats: dict[str, float] = {}
        """Number texts read by batch readers, with their floats (``logbatch.MEMO``)."""
        setattr(parser, "feed", self.feed_one)  # noqa: B010  (the parser's ``feed`` is this loop: one call a line)

    # -- reading ---------------------------------------------------------------------------

    def feed(self, lines: Iterable[str], out: list[LogEvent]) -> None:
        feed_one = self.feed_one
        for line in lines:
            out.extend(feed_one(line))

    def feed_one(self, line: str) -> list[LogEvent]:
        """One physical line: its events (``LossLogParser.feed``; the hot loop of every reader)."""
        out: list[LogEvent] = []
        p = self.p
        if line[-1:] == "\n":
            line = line.rstrip("\n")
        if p.pending is not None:
            p.expire_pending(p.num_lines + 1)
        if not p.plain or len(line) > MAX_TEMPLATE_CHARS:
            p.feed_general(line, out)
            return out
        if "\r" in line:
            self._parts(line, out)
            return out
        prev = self.prev
        t = prev.next if prev is not None else None
        if t is not None and "0x" not in line and (m := t.regex.fullmatch(line)) is not None and self.by_key.get(t.key, _NO_TEMPLATES)[0] is t:
            self.prev = t  # (the guess: the first template of the line's key, ``loghot``)
        else:
            known = self.by_key.get(line.encode("utf-8", "surrogatepass").translate(None, _DIGITS) if "0x" not in line else line_key(line))
            if known is None:
                if not line or line.isspace():
                    p.num_lines += 1
                else:
                    p.feed_general(line, out)
                return out
            for t in known:
                m = t.regex.fullmatch(line)
                if m is not None:
                    break
            else:
                p.feed_general(line, out)
                return out
            if prev is not None:
                prev.next = t if t.key else None
            self.prev = t
        read = t.read
        if read is not None:  # a record's template: the common case first
            event = read(m.groups(), p.num_lines + 1, p)
            if event:
                p.num_lines += 1
                out.append(event)
                restarts = p.restarts
                if not restarts.settled:
                    restarts.saw_point()
                self.hits += 1
                return out
            if event is None:
                p.feed_general(line, out)
                return out
        elif t.kind == GENERAL or (p.pending is not None and t.kind in (METRICS, EVAL)):
            p.feed_general(line, out)
            return out
        elif t.kind == EVAL:
            p.in_eval = True  # (the general reader: an evaluation's header with no record open)
        p.num_lines += 1
        self.hits += 1
        shape = t.shape
        if shape is not None and p.restarts.quiet(shape, t.failure, p.pending is not None):
            if t.metric_like is not False and len(p.unread_samples) < 3:
                self.sample(t, line, p.num_lines)
            return out
        self.nothing(t, line, p.num_lines, False, out)
        return out

    def _parts(self, line: str, out: list[LogEvent]) -> None:
        """A line of several parts (a progress bar's ``\\r`` redraws), each read as the general reader
        does: by the line's plan (``logparts``) when it has one, else part by part."""
        p = self.p
        p.num_lines += 1
        line_no = p.num_lines
        by_key = self.by_key
        used: list[Template | None] | None = None
        whole = b""
        plan = self.prev_plan  # (the last line's plan, guessed as templates are: ``loghot``)
        if plan is not None and "0x" not in line and (m := plan.regex.fullmatch(line)) is not None and self.plans.get(plan.key, _NO_PLANS)[0] is plan:
            self.plan_hits += 1
            run_plan(self, plan, m.groups(), line, line_no, out)
            return
        if "0x" not in line and guess_repeated(self, line, line_no, out):
            return  # (a bar redrawn in the last such line's shape: ``loghot``)
        parts = line.split("\r")
        if "0x" in line:
            keys: Iterable[bytes] = map(line_key, parts)
        else:
            # (the keys of all parts at once: "\r" is one byte of UTF-8 and in no other character's bytes)
            whole = line.encode("utf-8", "surrogatepass").translate(None, _DIGITS)
            for plan in self.plans.get(whole, ()):
                m = plan.regex.fullmatch(line)
                if m is not None:
                    self.plan_hits += 1
                    self.prev_plan = plan if plan.key else None
                    run_plan(self, plan, m.groups(), line, line_no, out)
                    return
            state = self.plan_state.get(whole)
            if p.plain and (state is None or state[0] < MAX_PLAN_BUILDS):
                used = []
            keys = whole.split(b"\r")
            if len(keys) > 2 and keys.count(keys[0]) == len(keys):
                t = read_repeated(self, keys[0], line, parts, line_no, out)  # (a bar redrawn in one shape: ``loghot``)
                if t is not None:
                    if used is not None and p.plain:
                        note_line(self, whole, line, [t] * len(parts))  # (as the loop below: the plan comes the same)
                    return
        restarts = p.restarts
        for part, key in zip(parts, keys, strict=True):
            if not part or part.isspace():
                if used is not None:
                    used.append(None)
                continue
            if p.plain:
                for t in by_key.get(key, ()):
                    m = t.regex.fullmatch(part)
                    if m is not None:
                        break
                else:
                    t = None
                if t is not None:
                    if used is not None:
                        used.append(t)
                    read = t.read
                    if read is not None:  # (``read_part``, its common case inline)
                        event = read(m.groups(), line_no, p)  # type: ignore[union-attr]
                        if event:
                            out.append(event)
                            if not restarts.settled:
                                restarts.saw_point()
                            self.hits += 1
                        else:
                            read_rest(self, t, event, part, line_no, out)
                        continue
                    read_part(self, t, (), part, line_no, out)
                    continue
            used = None
            p.feed_part(part, line_no, True, out)
        if used is not None and any(used):
            note_line(self, whole, line, used)

    def nothing(self, t: Template, part: str, line_no: int, multi: bool, out: list[LogEvent]) -> None:
        """A part its template reads as no event: what the general reader does then (a start-up
        line back makes a restart marker; a few metric-like lines are kept for the error message)."""
        p = self.p
        if not multi:
            r = p.restarts
            in_record = p.pending is not None
            shape = t.shape if t.shape is not None else line_shape(lt.clean_line(part)[0])
            if not r.quiet(shape, t.failure, in_record):
                text = lt.clean_line(part)[0]
                restart = r.see_shape(shape, text, line_no, in_record, t.failure)
                if restart is not None:
                    out.extend(p.emit_pending())
                    out.append(restart)
                    return
        if len(p.unread_samples) < 3 and t.metric_like is not False:
            self.sample(t, part, line_no)

    def sample(self, t: Template, part: str, line_no: int) -> None:
        """A part that gave nothing kept as an unread sample when it looks like metrics (the error message's)."""
        text = lt.clean_line(part)[0]
        if t.metric_like or looks_like_metrics(text):
            self.p.unread_samples.append(f"line {line_no}: {text[:80]!r}")

    # -- learning --------------------------------------------------------------------------

    def learn(self, part: str, text: str, gave_point: bool) -> None:
        """A part the general reader just read: make its template when its key comes back (at once
        for a line that gave a point: a record's line comes back)."""
        if not self.p.plain:
            return
        key = line_key(part)
        tries = self.tries.get(key)
        if tries is None:
            if len(self.tries) >= 8 * _MAX_TEMPLATES:
                self.tries.clear()
            self.tries[key] = 0
            if not gave_point:
                return
            tries = 0
        if tries >= _MAX_FAILS:
            return  # a shape no template fits (an address with dots between its numbers)
        known = self.by_key.get(key, [])
        if any(t.regex.fullmatch(part) for t in known):
            return  # (a line of a template that its recipe handed back)
        t = build(part, text, self.p)
        if t is None:
            self.tries[key] = tries + 1
            return
        t.key = guess_key(t, part, key)
        if self.count >= _MAX_TEMPLATES:
            self.by_key.clear()
            self.tries.clear()
            self.plans.clear()
            self.plan_state.clear()
            self.count = 0
            self.prev = self.prev_plan = self.prev_rep = None
        self.count += 1
        known.insert(0, t)
        if len(known) > MAX_PER_KEY:
            known.pop().next = None  # the oldest: a counter grew a digit where widths are kept exact
            self.count -= 1
        self.by_key[key] = known


def build(part: str, text: str, p: Parser) -> Template | None:
    """The template of ``part`` (``text``: its cleaned text), or None when no template can be exact."""
    mapped = clean_map(part)
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
        rec = dict_record(*doc)
        if rec is not None and rec.step is not None:
            kind = DICT if rec.axis == STEP_AXIS else GENERAL  # (a JSON line per epoch: logplan)
        elif prefix_dict_record(body, doc[0]) is not None:
            kind = GENERAL  # (the step from a prefix of fields before the dict: ``logextras``)
        else:
            kind = NOTHING if rec is None else DICT
    elif "{" in body and "}" in body:
        return None  # braces that hold no dict: whether a dict parses depends on its numbers' forms
    elif is_list_line(body):
        kind = GENERAL  # (a list ending in a step and a learning rate: logextras)
    else:
        tokens = lt.tokenize_meaningful(body)
        if tokens is None:
            kind = NOTHING
        elif not tokens.fields:
            header = table_header(body) is not None  # (as the reader's _no_fields)
            kind = GENERAL if tokens.is_eval or header else NOTHING
            if tokens.is_eval and not header and not any(c.isdigit() for c in part) and text.lstrip()[:1] not in ("|", "-", "/"):
                kind = EVAL  # (no digit: the template is the line itself, read the same whatever came before)
        else:
            kinds = lt.meanings(tokens)
            if lt.is_metrics_only(tokens, kinds):
                kind = METRICS
            elif tokens.counter is None and not any(kinds) and lt.counter_spans(body, lt.taken_starts(lt.fields_with_positions(body))) is None:
                kind = NOTHING
            elif lt.is_eval_line(tokens, kinds):
                kind = GENERAL
            elif all(k is None or k[0] not in lt.RECORD_KINDS for k in kinds):
                kind = METRICS  # (a counter, no step, loss or epoch: nothing with no record open)
    if kind in (NOTHING, METRICS, EVAL) and doc is None and not is_markdown_row(text):
        return _loose(part, text, kind)
    regex_text, numbers = _pattern(part, text, index, tag_digits, stamp, body, py_from=body.find("{") if kind == DICT else -1)
    if regex_text is None:
        return None
    metric_like = looks_like_metrics(text) if len(text) + 16 * len(numbers.text) < 500 else None
    t = Template(_UNCOMPILED, kind, line_shape(text), failure_line(text), metric_like)
    if kind == RECORD:
        assert tokens is not None
        if leading_step(body) is not None or has_range(body) or not record_recipe(t, tokens, body, numbers, text, p):
            t.kind = GENERAL  # (a step printed bare at the head: the general reader's rule, ``leadstep``)
    elif kind == DICT:
        assert doc is not None
        if not dict_recipe(t, doc, body, numbers, p):
            t.kind = GENERAL
    try:
        t.regex = re.compile(captured(t, regex_text, p.recipe_code))  # (only the groups its recipe reads: ``loghot``)
    except re.error:
        return None
    return t


def _loose(part: str, text: str, kind: int) -> Template | None:
    """The template of a text line that gives nothing (with no record open) whatever its numbers.

    Such a line's reading depends on its words, not on its numbers' values or widths: each digit
    run is any run of up to 9 digits (a torchrun tag stays one), each hex word (``0x7f3a``) any
    hex word. With hex words its shape (restart detection) is taken from each line.
    """
    out: list[str] = []
    pos = 0
    hexes = 0
    for m in _HEX_RE.finditer(part):
        out.append(_DIGIT_RUN_RE.sub(_run_form, _literal(part[pos : m.start()])))
        out.append(_HEX_FORM)
        pos = m.end()
        hexes += 1
    out.append(_DIGIT_RUN_RE.sub(_run_form, _literal(part[pos:])))
    try:
        regex = re.compile("".join(out))
    except re.error:
        return None
    runs = len(_DIGIT_RUN_RE.findall(part))
    metric_like = looks_like_metrics(text) if not hexes and len(text) + 9 * runs < 500 else None
    return Template(regex, kind, line_shape(text) if not hexes else None, failure_line(text), metric_like)


def _pattern(
    part: str,
    text: str,
    index: list[int],
    tag_digits: list[tuple[int, int]],
    stamp: tuple[float, int, int] | None,
    body: str,
    *,
    py_from: int,
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
    # Numbers keep their exact width where a width could change what ``timestamp_s`` finds:
    # before the end of a timestamp of the first form (tried first), within the head for the
    # other form or for a date-like run that is no timestamp.
    found = lt.timestamp_match(text)
    if (stamp is None) != (found is None):
        return None, nums  # a timestamp's shape with values no date has (month 45): others may have one
    if found is not None and found[0] == 0:
        exact_before = stamp[2] if stamp is not None else 0
    else:
        exact_before = _FIXED_HEAD if found is not None or _DATEISH_RE.search(text[:_FIXED_HEAD]) else 0
    # raw spans to replace: (raw start, raw end, regex, what: a body start or a marker)
    subs: list[tuple[int, int, str, int]] = []
    for a, b in tag_digits:
        subs.append((a, b, "[0-9]{1,9}", -2 if not subs else -3))
    if found is not None:
        stamp_form, sm = found
        nums.stamp_form = stamp_form
        parts = [(sm.start(), sm.end("mi"), -4), (sm.start("s"), sm.end("s"), -5)]
        if sm.group("f") if stamp_form == 0 else None:
            parts.append((sm.start("f"), sm.end("f"), -6))
            nums.stamp_frac_digits = len(sm.group("f"))
        for a, b, what in parts:
            s_raw, e_raw = _raw_span(index, a, b)
            if s_raw < 0:
                return None, nums
            subs.append((s_raw, e_raw, re.escape(re.sub(r"\d", "0", text[a:b])).replace("0", "[0-9]"), what))
    for a, b, num in spans:
        ta, tb = to_text(a), to_text(b)
        if stamp is not None and a == stamp[1]:
            return None, nums  # a number where the stamp's blank is
        form = _form(num, exact=ta < exact_before, py=0 <= py_from < a)
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
        # (the text's digits are all in groups, ``_pieces_ok``: digits left here are in ANSI codes)
        out.append(_literal(part[pos:ra]))
        out.append("(" + form + ")")
        if what >= 0:
            nums.group[what] = group
            if nums.text[what].isdigit():
                nums.digits.add(group)
        elif what == -2:
            nums.tag = group
        elif what == -4:
            nums.stamp_minute = group
        elif what == -5:
            nums.stamp_sec = group
        elif what == -6:
            nums.stamp_frac = group
        pos = rb
    out.append(_literal(part[pos:]))
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


