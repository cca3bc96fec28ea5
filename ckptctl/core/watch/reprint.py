"""A run's history printed again after its restore line: the rows up to the checkpoint are no replay.

Pure, stdlib only. A log of one attempt may open with its restore line and then print the run's
history before the new rows: a cumulative loss table kept in a run's notes (``Resuming from
`checkpoint-2900`.`` then ``| Step | Train | Val | Session |`` with rows 100..3000, one per
session's evaluation), a trainer's summary of the epochs the checkpoint holds. Read as they come,
the rows from step 100 after a restore of step 2900 are a replay of 2800 steps. They are not
when the one run after the restore line goes on past the checkpoint step in a single forward
run: a replayed loop does not come back to the step the restore line named without a break,
while a reprinted history reaches it and the new rows follow. That run is split at the
checkpoint step: its rows up to the step are the history (the run before the resume), the rows
after it the resumed run, judged against them.

A log of several sessions (notes kept across relaunches, one restore line and the whole table
again per session) prints the history after every restore line. After the first, the rows up to
the checkpoint were printed already: they are a reprint when they start at the log's first step and
every row printed before at the same step holds the same value (a copy; steps trained again print
other values, and a deterministic run resumed from an earlier checkpoint prints the same values from
that checkpoint on, not from the first row), at least ``_MIN_HISTORY`` of them. Those rows are
dropped (the earlier ones stand for them); the rows after the checkpoint step are that restore
line's resumed run.

Not for a counter that stays below the checkpoint step (a counter restarted from 0 after
``Initializing from checkpoint_7000``: ``analyze``'s replay), nor for a first run that has points
before its restore line (the history is there already), nor for a restore line that names the
step in the checkpoint's path only and a run that starts near it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ckptctl.core.watch.model import Segment, TracePoint

__all__ = ["history_pending", "split_reprinted_history"]

#: Rows of history (at or before the checkpoint step) the run must print to be read as one.
_MIN_HISTORY = 2
#: Relative difference under which a reprinted row holds "the same value" (both read from text).
_SAME_REL = 1e-9


def _history(seg: Segment) -> tuple[tuple[TracePoint, ...], tuple[TracePoint, ...]] | None:
    """(history, resumed) of a segment that opens at a restore line and runs through its step."""
    marker = seg.marker
    if marker is None or marker.kind != "restore" or marker.step is None:
        return None
    r = marker.step
    history = tuple(p for p in seg.points if p.step <= r)
    resumed = seg.points[len(history) :]
    if len(history) < _MIN_HISTORY or not resumed or history[0].step >= r:
        return None
    return history, resumed


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= _SAME_REL * max(abs(a), abs(b))


def _reprinted(history: Sequence[TracePoint], before: dict[int, float], min_rows: int = _MIN_HISTORY) -> bool:
    """``history`` starts where the log's first rows did, every row of it printed before at its step holds
    the value printed then, and enough were (a run resumed from an earlier step and trained the same
    way, deterministic, prints the same values too, but from that step on, not from the first row)."""
    seen = [(p, before[p.step]) for p in history if p.step in before]
    starts_over = bool(before) and history[0].step <= min(before)
    return starts_over and len(seen) >= min_rows and all(_same(p.loss, v) for p, v in seen)


def split_reprinted_history(segments: Sequence[Segment]) -> tuple[list[Segment], str | None]:
    """The segments with a reprinted history split from (or, after the first session, dropped
    before) the resumed run, and a note saying so (None when nothing was split)."""
    out: list[Segment] = []
    before: dict[int, float] = {}
    notes: list[str] = []
    first_log = True
    for seg in segments:
        split = _history(seg) if seg.source == "log" else None
        if split is not None and first_log and seg.reason == "start":
            history, resumed = split
            out += [Segment(history, "start", None, seg.source), Segment(resumed, "log-marker", seg.marker, seg.source)]
        elif split is not None and not first_log and seg.reason != "start" and _reprinted(split[0], before):
            history, resumed = split
            out.append(Segment(resumed, "log-marker", seg.marker, seg.source))
        else:
            split = None
            out.append(seg)
        if split is not None:
            assert seg.marker is not None
            notes.append(
                f"the rows after the restore line at line {seg.marker.line_no} start at step {split[0][0].step} and run "
                f"through the checkpoint step {seg.marker.step} to {split[1][-1].step} without a break: the run's history "
                f"printed again (a cumulative table or summary), read as the run before the resume"
            )
        first_log = first_log and seg.source != "log"
        before.update((p.step, p.loss) for p in seg.points)
    return out, ("; ".join(notes) if notes else None)


def history_pending(segments: Sequence[Segment]) -> bool:
    """A followed log may still be printing a history: its last run follows a restore line naming
    step R, has not yet passed R, and is what ``split_reprinted_history`` splits once it does (the
    log opens with that restore line, no baseline and no points before it; or, after an earlier
    session, its rows so far are a copy of the rows printed before). A live watch decides nothing
    on it yet; the whole log is judged as it is."""
    if not segments or segments[-1].source != "log":
        return False
    seg = segments[-1]
    marker = seg.marker
    if marker is None or marker.kind != "restore" or marker.step is None or not seg.points:
        return False
    if not (seg.points[0].step < marker.step and seg.points[-1].step <= marker.step):
        return False
    if len(segments) == 1:
        return seg.reason == "start"
    before = {p.step: p.loss for s in segments[:-1] for p in s.points}
    return _reprinted(seg.points, before, min_rows=1)  # (its first row may be all that is printed yet)
