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

from ckptctl.core.watch.logrecipe import METRICS, NOTHING, Template

MAX_PLANS = 256
#: Plans made for one key at most (lines whose parts' widths vary each time get none after that).
MAX_PLAN_BUILDS = 8

SAMPLE = 1
PENDING = 2

SKIP = None
"""A step for an empty or blank part (the reader skips it)."""


class Plan:
    """One line shape of several parts: its regex and, per part, its template and groups."""

    __slots__ = ("ops", "regex", "steps")

    def __init__(self, regex: re.Pattern[str], steps: list[tuple[Template | None, int, int]]) -> None:
        self.regex = regex
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
