"""Lines of many parts (a progress bar redrawn with ``\\r``) read by one regex match.

Pure, stdlib only. A training log with tqdm bars prints lines of 3 to 100 ``\\r``-separated
parts, and the next such line has the same parts with other numbers. Reading part by part
costs a split, a key, a lookup and a match per part. Once every part of a line was read by a
template (``logfast``), the line's *plan* is made: the parts' templates joined by ``\\r`` into
one regex, and per part what to do with its groups. A later line of the same key (its text
without digits) that the plan's regex matches whole is read part by part from the one
match's groups, exactly as the part-by-part loop would: no template regex can match ``\\r``
(literals and number forms only), so each part's text is matched by its own template.
Empty and blank parts (skipped by the reader) are matched as they were.

Bounded: plans are made only of lines up to ``MAX_TEMPLATE_CHARS`` (the fast path's own
limit), at most ``MAX_PLANS`` of them, forgotten with the templates; at most ``MAX_PLAN_BUILDS``
made per key, so lines whose parts change widths each time cost no compile a line.
"""

from __future__ import annotations

import re
from typing import Protocol

from ckptctl.core.watch.logevents import LogEvent
from ckptctl.core.watch.logrecipe import EVAL, GENERAL, METRICS, NOTHING, Parser, Template

MAX_PLANS = 256
#: Templates (``logfast``) and plans kept per key.
MAX_PER_KEY = 4
#: Plans made for one key at most (lines whose parts' widths vary each time get none after that).
MAX_PLAN_BUILDS = 8
#: Lines of a key read part by part (every part by a template) before its plan is made.
PLAN_AFTER = 256

SAMPLE = 1
PENDING = 2

SKIP = None
"""A step for an empty or blank part (the reader skips it)."""


class Plan:
    """One line shape of several parts: its regex and, per part, its template and groups."""

    __slots__ = ("key", "ops", "regex", "steps")

    def __init__(self, regex: re.Pattern[str], steps: list[tuple[Template | None, int, int]]) -> None:
        self.regex = regex
        self.key = b""
        """Its lines' key when every line it matches has that key (each part's template does), else
        empty: never guessed (``loghot``)."""
        self.steps = steps
        """Per part: (its template, or None for a skipped part; its first group; its end group)."""
        self.ops: list[tuple[int, int, Template | None, int, int]] = []
        """The steps with each run of parts that give nothing whatever their numbers (skipped parts,
        ``NOTHING`` templates, ``METRICS`` ones while no record is open) made one: (first part, end
        part, template or None for a run, first group or the run's number of read parts, end group
        or the run's flags: ``SAMPLE`` a part may be kept as an unread sample, ``PENDING`` a part
        is read when a record is open)."""
        i = 0
        while i < len(steps):
            j = i
            count = flags = 0
            while j < len(steps) and (steps[j][0] is None or steps[j][0].kind in (NOTHING, METRICS)):  # type: ignore[union-attr]
                t = steps[j][0]
                if t is not None:
                    count += 1
                    flags |= SAMPLE if t.metric_like is not False else 0
                    flags |= PENDING if t.kind == METRICS else 0
                j += 1
            if j > i:
                self.ops.append((i, j, None, count, flags))
                i = j
                continue
            t, a, b = steps[i]
            self.ops.append((i, i + 1, t, a, b))
            i += 1


def make_plan(parts: list[str], used: list[Template | None]) -> Plan | None:
    """The plan of a line whose ``parts`` were read by the templates ``used`` (None: skipped)."""
    pieces: list[str] = []
    steps: list[tuple[Template | None, int, int]] = []
    group = 0
    for part, t in zip(parts, used, strict=True):
        if t is None:
            pieces.append(re.escape(part))
            steps.append((SKIP, group, group))
            continue
        pieces.append("(?:" + t.regex.pattern + ")")
        steps.append((t, group, group + t.regex.groups))
        group += t.regex.groups
    try:
        regex = re.compile("\r".join(pieces))
    except (re.error, RecursionError, OverflowError):
        return None
    if regex.groups != group:
        return None
    return Plan(regex, steps)


class Fast(Protocol):
    """What the plans use of ``logfast.FastPath``."""

    p: Parser
    hits: int
    plans: dict[bytes, list[Plan]]
    plan_state: dict[bytes, list[int]]

    def nothing(self, t: Template, part: str, line_no: int, multi: bool, out: list[LogEvent]) -> None: ...


def note_line(fast: Fast, whole: bytes, line: str, used: list[Template | None]) -> None:
    """A line of key ``whole`` read part by part, every part by a template (``used``): its plan is
    made after ``PLAN_AFTER`` such lines (a plan's compile costs what a few hundred lines read
    part by part do), at most ``MAX_PLAN_BUILDS`` times per key."""
    state = fast.plan_state.get(whole)
    if state is None:
        if len(fast.plans) >= MAX_PLANS or len(fast.plan_state) >= 4 * MAX_PLANS:
            fast.plans.clear()
            fast.plan_state.clear()
        state = fast.plan_state[whole] = [0, 0]
    state[1] += 1
    if state[1] < PLAN_AFTER:
        return
    state[0] += 1
    state[1] = 0
    made = make_plan(line.split("\r"), used)
    if made is not None:
        made.key = whole if all(t is None or t.key for t in used) else b""
        plans = fast.plans.setdefault(whole, [])
        plans.insert(0, made)
        del plans[MAX_PER_KEY:]  # the oldest: a number grew a digit where widths are kept exact


def run_plan(fast: Fast, plan: Plan, groups: tuple[str, ...], line: str, line_no: int, out: list[LogEvent]) -> None:
    """The parts of a ``line`` its plan's regex matched whole: what the part-by-part loop does (the
    line is split into its parts only when a part's text is needed: a record's part that gives a
    point needs only its groups)."""
    p = fast.p
    parts: list[str] | None = None
    for i, j, t, a, b in plan.ops:
        if t is None:  # parts that give nothing: only counted, or kept as a sample or read (not plain)
            if p.plain and not (b & SAMPLE and len(p.unread_samples) < 3) and not (b & PENDING and p.pending is not None):
                fast.hits += a
                continue
            if parts is None:
                parts = line.split("\r")
            for k in range(i, j):
                tk = plan.steps[k][0]
                if tk is None:
                    continue
                if p.plain:
                    read_part(fast, tk, (), parts[k], line_no, out)
                else:
                    p.feed_part(parts[k], line_no, True, out)
            continue
        if p.plain and (read := t.read) is not None:  # (``read_part``, its common case inline)
            event = read(groups[a:b], line_no, p)
            if event:
                out.append(event)
                if not p.restarts.settled:
                    p.restarts.saw_point()
                fast.hits += 1
                continue
            if parts is None:
                parts = line.split("\r")
            read_rest(fast, t, event, parts[i], line_no, out)
            continue
        if parts is None:
            parts = line.split("\r")
        if p.plain:
            read_part(fast, t, groups[a:b], parts[i], line_no, out)
        else:
            p.feed_part(parts[i], line_no, True, out)


def read_part(fast: Fast, t: Template, groups: tuple[str, ...], part: str, line_no: int, out: list[LogEvent]) -> None:
    """One part of a line that ``t`` matched (its ``groups``): what the general reader gives for it."""
    p = fast.p
    read = t.read
    if read is not None:
        event = read(groups, line_no, p)
        if event:
            out.append(event)
            if not p.restarts.settled:
                p.restarts.saw_point()
            fast.hits += 1
            return
        read_rest(fast, t, event, part, line_no, out)
        return
    if t.kind != GENERAL and (t.kind not in (METRICS, EVAL) or p.pending is None):
        if t.kind == EVAL:
            p.in_eval = True  # (the general reader: an evaluation's header with no record open)
        fast.hits += 1
        if len(p.unread_samples) < 3 and t.metric_like is not False:
            fast.nothing(t, part, line_no, True, out)
        return
    p.feed_part(part, line_no, True, out)


def read_rest(fast: Fast, t: Template, event: LogEvent | bool | None, part: str, line_no: int, out: list[LogEvent]) -> None:
    """A part whose recipe gave no event: ``False`` read (nothing), ``None`` the general way."""
    if event is False:
        fast.hits += 1
        if len(fast.p.unread_samples) < 3 and t.metric_like is not False:
            fast.nothing(t, part, line_no, True, out)
        return
    fast.p.feed_part(part, line_no, True, out)
