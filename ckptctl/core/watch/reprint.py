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

Not for a counter that stays below the checkpoint step (a counter restarted from 0 after
``Initializing from checkpoint_7000``: ``analyze``'s replay), nor when the log holds points
before the restore line (the history is there already), nor for a restore line that names the
step in the checkpoint's path only and a run that starts near it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ckptctl.core.watch.model import Segment

__all__ = ["split_reprinted_history"]

#: Rows of history (at or before the checkpoint step) the run must print to be read as one.
_MIN_HISTORY = 2


def split_reprinted_history(segments: Sequence[Segment]) -> tuple[list[Segment], str | None]:
    """The segments with a reprinted history split from the resumed run, and a note saying so
    (None when nothing was split)."""
    out = list(segments)
    index = next((i for i, s in enumerate(out) if s.source == "log"), None)
    if index is None or out[index].reason != "start":
        return out, None
    seg = out[index]
    marker = seg.marker
    if marker is None or marker.kind != "restore" or marker.step is None:
        return out, None
    r = marker.step
    history = tuple(p for p in seg.points if p.step <= r)
    resumed = seg.points[len(history) :]
    if len(history) < _MIN_HISTORY or not resumed or history[0].step >= r:
        return out, None
    out[index : index + 1] = [
        Segment(history, "start", None, seg.source),
        Segment(resumed, "log-marker", marker, seg.source),
    ]
    note = (
        f"the rows after the restore line at line {marker.line_no} start at step {history[0].step} and run "
        f"through the checkpoint step {r} to {resumed[-1].step} without a break: the run's history printed "
        f"again (a cumulative table or summary), read as the run before the resume"
    )
    return out, note
