"""The step axis of a log: a step counter, the epoch, or (epoch, batch within it) as one position.

Pure, stdlib only. The reader gives each point a position on the axis its line shows
(``LossPoint.axis``): the step (or iteration, update) counter; the epoch, for a log with one
record per epoch; or ``epoch x batches per epoch + batch`` for a counter that counts within
the epoch (``[ 120/500]`` after an epoch). Here the log's axis is decided from all its points:

* the axis most of the selected rank's points have (the finer one on a tie); points on
  another axis are left out (an end-of-epoch summary beside per-step lines);
* a step counter that starts again at every epoch (it goes back each time the epoch goes up,
  and never goes on across an epoch: ``epoch 3 iter 0``) is composed with the epoch into one
  position, ``epoch x L + counter`` with L the largest counter seen plus the logging interval;
* restore lines and save lines that name an epoch (``Resuming from epoch 45``, ``continuing at
  epoch 18``) are placed on an epoch axis at the first position of that epoch, and the
  resumed run may start in that epoch or the next one (a checkpoint "of epoch E" is saved
  at E's end by some trainers and holds E as the next one to run by others), or exactly at
  it when the line names the epoch to run next.

On the epoch axis ``--resume-step`` names an epoch; on the epoch-batch axis a position (batches
trained: epoch x batches per epoch + batch), as a restore line's step does.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ckptctl.core.watch.logevents import (
    EPOCH_AXIS,
    EPOCH_BATCH_AXIS,
    STEP_AXIS,
    LossPoint,
    ResumeMarker,
)

#: Finer first: the order that breaks a tie between axes.
_FINENESS = (STEP_AXIS, EPOCH_BATCH_AXIS, EPOCH_AXIS)


@dataclass(frozen=True, slots=True)
class Axis:
    """The axis a log's positions are on."""

    name: str = STEP_AXIS
    """``step``, ``epoch`` or ``epoch-batch``."""
    epoch_len: int | None = None
    """Positions per epoch on the ``epoch-batch`` axis (the counter's total, or estimated)."""
    composed: bool = False
    """The log's step counter starts again every epoch; its points are composed with the epoch here."""

    @property
    def per_epoch(self) -> int:
        """Positions per epoch (1 on the epoch axis)."""
        return (self.epoch_len or 1) if self.name != STEP_AXIS else 1

    @property
    def by_epoch(self) -> bool:
        return self.name != STEP_AXIS


def _whole(x: float | None) -> bool:
    return x is not None and x == x and 0 <= x < 2**53 and x == int(x)


def choose_axis(points: Sequence[LossPoint]) -> Axis:
    """The axis of a log from its points (the selected rank's, in reading order)."""
    counts = Counter(p.axis for p in points if p.step is not None)
    if not counts:
        return Axis()
    moving = _advancing(points) if len(counts) > 1 else set(counts)
    name = max(counts, key=lambda a: (a in moving, counts[a], -_FINENESS.index(a) if a in _FINENESS else -9))
    if name == EPOCH_BATCH_AXIS:
        lens = Counter(p.epoch_len for p in points if p.axis == name and p.epoch_len)
        return Axis(name, lens.most_common(1)[0][0] if lens else None)
    if name == STEP_AXIS:
        length = per_epoch_counter([p for p in points if p.axis == STEP_AXIS and p.step is not None])
        if length is not None:
            return Axis(EPOCH_BATCH_AXIS, length, composed=True)
    return Axis(name)


def _advancing(points: Sequence[LossPoint]) -> set[str]:
    """The axes on which some point comes after the previous one of its axis. On the others the
    position never goes forward: no position at all (a progress bar's ``190/190 [.., loss=0.9]``
    drawn once per epoch with no epoch on its line, beside the epoch's summary line)."""
    last: dict[str, int] = {}
    moving: set[str] = set()
    for p in points:
        if p.step is None:
            continue
        prev = last.get(p.axis)
        if prev is not None and p.step > prev:
            moving.add(p.axis)
        last[p.axis] = p.step
    return moving


def per_epoch_counter(points: Sequence[LossPoint]) -> int | None:
    """Positions per epoch when the step counter starts again at every epoch, else None.

    Every point has a whole epoch; between consecutive points the counter goes back at least
    once when the epoch goes up (to near its lowest value) and never goes on across an epoch.
    A count that stays the same while the epoch goes up (one line per epoch: DeepSpeech's
    ``Epoch 42 | Training | ... | Steps: 6275 | Loss: 4.61``, YOLOX's ``epoch: 2/300, iter: 10/12``)
    is a count within the epoch too, never the run's own step.
    """
    if len(points) < 3 or not all(_whole(p.epoch) for p in points):
        return None
    lowest = min(p.step for p in points if p.step is not None)
    wraps = 0
    diffs: list[int] = []
    for a, b in itertools.pairwise(points):
        assert a.step is not None and b.step is not None and a.epoch is not None and b.epoch is not None
        if b.epoch > a.epoch:
            if b.step > a.step:
                return None  # a counter that goes on across epochs is the run's own step
            wraps += 1
            if b.step > lowest + max(diffs or [1]) * 2:
                return None  # back, but not to the start: a restart, not an epoch's first batch
        elif b.epoch == a.epoch and b.step > a.step:
            diffs.append(b.step - a.step)
    if not wraps or (not diffs and len({p.step for p in points}) > 1):
        return None
    interval = max(1, round(statistics.median(diffs))) if diffs else 1
    return max(p.step for p in points if p.step is not None) + interval


def position(p: LossPoint, axis: Axis) -> int | None:
    """The point's position on the log's axis; None: it is on another one (left out)."""
    if p.step is None:
        return None
    if axis.composed:
        if p.axis != STEP_AXIS or not _whole(p.epoch):
            return None
        assert p.epoch is not None and axis.epoch_len is not None
        return int(p.epoch) * axis.epoch_len + p.step
    return p.step if p.axis == axis.name else None


def place_marker(marker: ResumeMarker, axis: Axis) -> ResumeMarker:
    """A restore or save line on an epoch axis: on the epoch-batch axis the step it names is a
    position (batches trained: ``epoch=1-step=500``); else at the first position of the epoch it
    names (on the epoch axis a step counter's value is no epoch: no step)."""
    if not axis.by_epoch or (axis.name == EPOCH_BATCH_AXIS and marker.step is not None):
        return marker
    if marker.epoch is None:
        return replace(marker, step=None) if marker.step is not None else marker
    return replace(marker, step=marker.epoch * axis.per_epoch, on_epoch=True)


def resume_window(resume_step: int, convention: str, gap_tol: float, axis: Axis, names_next: bool, on_epoch: bool) -> tuple[int, float]:
    """Where the resumed run's first position may be, given the checkpoint's position.

    Step axis: ``resume_step`` (or the next step when steps are logged after the update, unless the
    line named the step to run next) up to the gap tolerance past it (also a step named on the
    epoch-batch axis). An epoch named
    (``on_epoch``: ``resume_step`` is the first position of that epoch E): from E up to the start of E + 1 plus the tolerance; exactly E when the line named
    the epoch to run next.
    """
    if not on_epoch:
        # (a step the line named as the one to run next, torchtitan's "Training starts at step 401", is the first)
        lo = resume_step + 1 if convention == "after" and not names_next else resume_step
        return lo, resume_step + gap_tol
    if names_next:
        return resume_step, resume_step + gap_tol
    return resume_step, resume_step + axis.per_epoch + gap_tol


def epoch_of(pos: int, axis: Axis) -> str:
    """A position in words ("epoch 7, batch 120" on the epoch-batch axis)."""
    if axis.name == EPOCH_AXIS:
        return f"epoch {pos}"
    if axis.name == EPOCH_BATCH_AXIS and axis.epoch_len:
        return f"epoch {pos // axis.epoch_len}, batch {pos % axis.epoch_len}"
    return f"step {pos}"
