"""A compact chart of the losses around a resume, for ``watch`` and ``recover`` (never in ``--json``).

It draws the watch's ``curve`` (``ckptctl.watch/1``: the pre-failure points, the judged
points after the resume, and the level and threshold each was judged against) as a
small grid: one column per logged point in log order, the pre-failure points, a
``|`` at the resume, then the resumed ones; the point threshold as a row of ``-``
over the resumed columns. Nothing is computed here but where a value falls in the
grid: the verdict and the threshold are the watch's.

On a terminal it is rich text (colours; a point above the threshold in red); anywhere
else (a pipe, a ticket, CI) the same grid in plain ASCII.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

#: Rows of the grid, and the most columns it takes (points shown; the rest are left out).
HEIGHT = 8
MAX_COLUMNS = 64
#: At least this many pre-failure points are shown when there are that many.
MIN_BEFORE = 12


@dataclass(frozen=True, slots=True)
class Glyphs:
    before: str
    after: str
    above: str
    threshold: str
    expected: str
    resume: str
    nan: str


ASCII = Glyphs(before="o", after="*", above="#", threshold="-", expected=".", resume="|", nan="!")
UNICODE = Glyphs(before="\u2022", after="\u25cf", above="\u25b2", threshold="\u2500", expected="\u00b7",
                 resume="\u2502", nan="!")  # fmt: skip
_STYLES = {"before": "grey50", "after": "green", "above": "bold red", "threshold": "yellow",
           "expected": "yellow dim", "resume": "cyan", "nan": "bold red"}  # fmt: skip


def _num(value: Any) -> float | None:
    """A JSON number of the curve (``"nan"``/``"inf"`` strings too); None when absent."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class _Col:
    kind: str  # before | after | resume
    step: int | None = None
    loss: float | None = None
    threshold: float | None = None
    expected: float | None = None


def _columns(curve: Mapping[str, Any]) -> list[_Col]:
    marks = {int(e[0]): (_num(e[1]), _num(e[2])) for e in curve.get("expected") or [] if len(e) >= 3}
    after = [_Col("after", int(p[0]), _num(p[1]), *reversed(marks.get(int(p[0]), (None, None))))
             for p in (curve.get("after") or [])[: MAX_COLUMNS - MIN_BEFORE - 1]]  # fmt: skip
    room = MAX_COLUMNS - len(after) - 1
    before = [_Col("before", int(p[0]), _num(p[1])) for p in (curve.get("before") or [])[-room:]] if room > 0 else []
    return [*before, _Col("resume"), *after]


def chart_lines(watch: Mapping[str, Any], *, unicode: bool = False) -> list[list[tuple[str, str | None]]]:
    """The chart as lines of (text, rich style) runs; empty when the watch has no curve."""
    curve = watch.get("curve")
    if not isinstance(curve, Mapping) or not curve.get("after"):
        return []
    g = UNICODE if unicode else ASCII
    cols = _columns(curve)
    values = [v for c in cols for v in (c.loss, c.threshold, c.expected) if v is not None and math.isfinite(v)]
    if not values:
        return []
    lo, hi = min(values), max(values)
    span = hi - lo or max(abs(hi), 1.0) * 0.01

    def row(v: float) -> int:  # 0 = top
        return min(HEIGHT - 1, max(0, round((hi - v) / span * (HEIGHT - 1))))

    grid: list[list[tuple[str, str | None]]] = [[(" ", None)] * len(cols) for _ in range(HEIGHT)]
    for x, c in enumerate(cols):
        if c.kind == "resume":
            for y in range(HEIGHT):
                grid[y][x] = (g.resume, _STYLES["resume"])
            continue
        if c.expected is not None and math.isfinite(c.expected):
            grid[row(c.expected)][x] = (g.expected, _STYLES["expected"])
        if c.threshold is not None and math.isfinite(c.threshold):
            grid[row(c.threshold)][x] = (g.threshold, _STYLES["threshold"])
        if c.loss is None:
            continue
        if not math.isfinite(c.loss):
            grid[0][x] = (g.nan, _STYLES["nan"])
        elif c.kind == "before":
            grid[row(c.loss)][x] = (g.before, _STYLES["before"])
        else:
            above = c.threshold is not None and c.loss > c.threshold
            grid[row(c.loss)][x] = (g.above, _STYLES["above"]) if above else (g.after, _STYLES["after"])
    thresholds = [c.threshold for c in cols if c.threshold is not None and math.isfinite(c.threshold)]
    labels = {0: _fmt(hi), HEIGHT - 1: _fmt(lo)}
    if thresholds:
        labels[row(thresholds[0])] = "thr " + _fmt(thresholds[0])
    width = max(len(v) for v in labels.values())
    before = [c for c in cols if c.kind == "before"]
    after = [c for c in cols if c.kind == "after"]
    verdict = watch.get("verdict") or "-"
    resume_step = watch.get("resume_step")
    title = (f"loss around the resume (checkpoint step {resume_step if resume_step is not None else 'unknown'}, "
             f"verdict {verdict}): {len(before)} point(s) before, {len(after)} after")  # fmt: skip
    lines: list[list[tuple[str, str | None]]] = [[(title, None)]]
    for y in range(HEIGHT):
        lines.append([(labels.get(y, "").rjust(width) + " |", None), *grid[y]])
    axis = _steps(before) + "  " + g.resume + "  " + _steps(after)
    lines.append([(" " * width + " +" + "-" * len(cols), None)])
    lines.append([(" " * (width + 2) + "steps " + axis, None)])
    legend: list[tuple[str, str | None]] = [(" " * (width + 2), None)]
    for glyph, style, words in (
        (g.before, _STYLES["before"], "before the failure"),
        (g.after, _STYLES["after"], "after the resume"),
        (g.above, _STYLES["above"], "above the threshold"),
        (g.threshold, _STYLES["threshold"], "threshold"),
        (g.expected, _STYLES["expected"], "expected level"),
    ):
        if glyph in (g.above, g.threshold, g.expected) and not thresholds:
            continue
        legend += [(glyph, style), (f" {words}  ", None)]
    lines.append(legend)
    return lines


def _steps(cols: Sequence[_Col]) -> str:
    if not cols:
        return "(none)"
    return f"{cols[0].step}..{cols[-1].step}" if len(cols) > 1 else f"{cols[0].step}"


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def as_text(lines: Sequence[Sequence[tuple[str, str | None]]]) -> list[Text]:
    """The lines as rich ``Text`` (styles kept)."""
    out = []
    for runs in lines:
        t = Text()
        for text, style in runs:
            t.append(text, style=style or "")
        out.append(t)
    return out


def as_plain(lines: Sequence[Sequence[tuple[str, str | None]]]) -> list[str]:
    return ["".join(text for text, _ in runs).rstrip() for runs in lines]
