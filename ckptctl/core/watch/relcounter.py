"""A step counter that starts again while training goes on: read relative to the restore.

Pure, stdlib only. ``Resumed from step 800`` then ``Step 1``, ``Step 1 (after resuming)``, or a
counter that starts again at the log's first step while the loss goes on from where it was
(a second ``model.fit()`` on the same model, a resumed run counting its own epochs): the
resumed run's positions are its start plus the counter. Not when the learning rate logged starts
over with the counter: then the training loop ran again from its start (a replay).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ckptctl.core.watch.model import Segment
from ckptctl.core.watch.resume import near_start

__all__ = ["lr_started_over", "relative_offset", "relative_pending", "weights_kept"]


def relative_offset(
    resumed: Segment,
    pre_segments: Sequence[Segment],
    resume_step: int | None,
    logged_steps: bool,
    first_step_ever: int | None,
    interval: int,
) -> tuple[int | None, str]:
    """The step the resumed run's counter counts from, when it counts from the restore (and what
    says so), else (None, "").

    A restore line naming step R followed by a counter that starts again near the log's first
    step (``Resumed from step 800`` then ``Step 1``): R. A counter whose lines say they count
    from the resume (``Step 1 (after resuming)``): the checkpoint step given or named, else the
    last step logged before the resume.
    """
    if not logged_steps or not near_start(resumed.first_step, first_step_ever, interval):
        return None, ""
    marker = resumed.marker
    if marker is not None and marker.step is not None and not marker.step_in_path and marker.step > resumed.first_step + interval:
        if pre_segments and lr_started_over(resumed, pre_segments[0]):
            return None, ""  # the schedule started over with the counter: the loop ran again from its start
        return marker.step, f"the restore line at line {marker.line_no}"
    if resumed.points[0].relative and pre_segments:
        if resume_step is not None:
            return resume_step, "the checkpoint step"
        return max(s.last_step for s in pre_segments), f"the last step logged before it (line {resumed.points[0].line_no})"
    if resume_step is None and (marker is None or marker.step is None) and pre_segments and weights_kept(resumed, pre_segments[0]):
        return max(s.last_step for s in pre_segments), "its loss, which goes on from the level before the restart, far below the run's start"
    return None, ""


def relative_pending(
    resumed: Segment,
    pre_segments: Sequence[Segment],
    resume_step: int | None,
    logged_steps: bool,
    first_step_ever: int | None,
    interval: int,
) -> bool:
    """``relative_offset`` found no offset yet, but could with more points of the resumed run
    (``weights_kept`` compares the median of its first ``_LEVEL_POINTS``): a followed log must
    not decide on the counter restart before that."""
    if not logged_steps or not pre_segments or not near_start(resumed.first_step, first_step_ever, interval):
        return False
    marker = resumed.marker
    if resume_step is not None or (marker is not None and marker.step is not None):
        return False
    return len(resumed.points) < _LEVEL_POINTS and len(pre_segments[0].points) >= 2 * _LEVEL_POINTS


#: Points compared at the run's start, before the restart and after it (their medians).
_LEVEL_POINTS = 3
#: The run learned: its loss before the restart is at most this fraction of its start.
_LEARNED = 0.85
#: The resumed run starts at most this far (of the distance learned) above the level before it.
_KEPT = 0.25


def weights_kept(resumed: Segment, first: Segment) -> bool:
    """A counter that starts again while the loss goes on where it was: the run's loss fell well
    below its start (``first``: the log's first run, from its start), and the resumed run starts
    near that learned level or below it, far from the start a run from scratch goes back to.
    (A second ``model.fit()`` on the same model, or a resumed run counting from 1.)"""
    n = _LEVEL_POINTS
    if len(first.points) < 2 * n or len(resumed.points) < n:
        return False
    losses = [p.loss for p in (*first.points[:n], *first.points[-n:], *resumed.points[:n])]
    if not all(math.isfinite(x) for x in losses):
        return False
    start, before, after = (statistics.median(losses[i : i + n]) for i in (0, n, 2 * n))
    learned = start - before
    return before > 0 and before <= _LEARNED * start and after <= before + _KEPT * learned and not lr_started_over(resumed, first)


def lr_started_over(resumed: Segment, first: Segment) -> bool:
    """The learning rate logged goes back to the run's first value (from another one) when the
    counter starts again: the schedule started over with the counter (only the weights were
    loaded), a replay of the loop, not a counter of its own."""
    lr_start, lr_before, lr_after = (p.metrics.get("lr") for p in (first.points[0], first.points[-1], resumed.points[0]))
    if lr_start is None or lr_before is None or lr_after is None or math.isclose(lr_start, lr_before, rel_tol=1e-3):
        return False
    return math.isclose(lr_after, lr_start, rel_tol=1e-3)
