"""Where a log's run resumed: one rank, steps for every point, run segments, step checks.

Pure, stdlib only. See ``ckptctl.core.watch.analyze`` for the whole picture ("How a log is read").
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ckptctl.core.watch.axis import Axis, choose_axis, place_marker, position
from ckptctl.core.watch.logevents import LogEvent, LossPoint, ResumeMarker
from ckptctl.core.watch.model import REPLAYED, SKIPPED, Finding, Segment, TracePoint
from ckptctl.core.watch.stats import quantile

#: A gap is lost log lines when its wall time is within this factor of the missing steps' time.
LOST_LINES_TIME_FACTOR = 1.5


def select_rank(points: Iterable[LossPoint]) -> int | None:
    """Rank 0 when any point has it, else the rank of the first point (None: untagged)."""
    first: int | None = None
    seen_any = False
    for p in points:
        if p.rank == 0:
            return 0
        if not seen_any:
            first, seen_any = p.rank, True
    return first


@dataclass(frozen=True, slots=True)
class Item:
    """A marker or a point of the selected rank, in reading order, with its source."""

    source: str
    point: TracePoint | None
    marker: ResumeMarker | None
    redraw: bool = False
    shape: str = ""
    """The shape of the point's line (``LossPoint.shape``)."""


def assign_steps(
    sources: Sequence[tuple[str, Sequence[LogEvent]]],
) -> tuple[list[Item], str, int | None, Axis]:
    """Keep one rank, give every point a position on the log's axis (``watch_axis``); return
    items, step kind, selected rank of the log and the axis."""
    items: list[Item] = []
    log_rank: int | None = None
    ranks = [select_rank(e for e in events if isinstance(e, LossPoint)) for _source, events in sources]
    selected = [
        e for (_s, events), rank in zip(sources, ranks, strict=True) for e in events if isinstance(e, LossPoint) and e.rank == rank
    ]
    axis = choose_axis(selected)
    shapes = Counter(p.shape for p in selected)
    has_stepless = has_epoch = False
    # Step-less formats: number the points in order; after a restart (epoch goes
    # back, a restore line, or a separate baseline file) continue from the last
    # point logged at an earlier epoch, so equal epochs line up with equal positions.
    numbered: list[tuple[int, float | None]] = []
    restart_pending = False
    for (source, events), rank in zip(sources, ranks, strict=True):
        if source == "log":
            log_rank = rank
        restart_pending = bool(numbered)
        for event in events:
            if isinstance(event, ResumeMarker):
                if event.kind not in ("restore", "restart"):
                    continue  # a save line is information, not a new run
                items.append(Item(source, None, place_marker(event, axis)))
                restart_pending = bool(numbered)
                continue
            if event.rank != rank:
                continue
            step = position(event, axis) if event.step is not None else None
            if step is None and event.step is not None:
                continue  # on another axis than the log's (an end-of-epoch summary beside step lines)
            if step is None:
                has_stepless = True
                epoch = event.epoch
                has_epoch = has_epoch or epoch is not None
                prev_epoch = numbered[-1][1] if numbered else None
                went_back = epoch is not None and prev_epoch is not None and epoch < prev_epoch
                if not numbered:
                    step = 1
                elif epoch is not None and (restart_pending or went_back):
                    earlier = [s for s, e in numbered if e is not None and e < epoch]
                    step = (max(earlier) if earlier else 0) + 1
                else:
                    step = numbered[-1][0] + 1
                numbered.append((step, epoch))
                restart_pending = False
            point = TracePoint(step, event.loss, event.line_no, source, event.metrics, event.wall, event.relative)
            last = items[-1] if items else None
            if (
                last is not None
                and last.point is not None
                and last.point.step == step
                and last.source == source
                and last.shape != event.shape
            ):
                # The same step from a line of another kind (an end-of-epoch summary, a step's
                # evaluation of the training split): a repeat, not a restart; the commoner kind counts.
                if shapes[event.shape] > shapes[last.shape]:
                    items[-1] = Item(source, point, None, event.redraws_previous, event.shape)
                continue
            items.append(Item(source, point, None, event.redraws_previous, event.shape))
    step_kind = "logged" if not has_stepless else "epoch-aligned" if has_epoch else "ordinal"
    return items, step_kind, log_rank, axis


def log_interval_and_gap(
    points: Sequence[TracePoint], gap_tolerance_intervals: float
) -> tuple[int, float]:
    """Median step between consecutive points, and the largest jump still tolerated.

    The tolerance scales the 90th percentile as well as the median, so a cadence that
    is irregular by nature (a progress bar throttled to a few redraws per second)
    does not read as skipped steps.
    """
    diffs = sorted(
        b.step - a.step
        for a, b in itertools.pairwise(points)
        if b.step > a.step and a.source == b.source
    )
    if not diffs:
        return 1, gap_tolerance_intervals
    interval = max(1, round(statistics.median(diffs)))
    typical_max = max(float(interval), quantile(diffs, 0.9))
    return interval, gap_tolerance_intervals * typical_max


def interval_evidence(points: Sequence[TracePoint]) -> int:
    """How many steps forward between consecutive points of one source ``log_interval_and_gap``
    measured (0: the logging interval is a guess)."""
    return sum(1 for a, b in itertools.pairwise(points) if b.step > a.step and a.source == b.source)


def segment(
    items: Sequence[Item], gap_tolerance: float, sec_per_step: float | None = None
) -> list[Segment]:
    """Split the points into runs (see ``ckptctl.core.watch.analyze``, "How a log is read", step 3).

    With ``sec_per_step`` (the run's wall time per step), a forward jump whose wall
    time matches the missing steps is lost log lines, not a new run (``lost_line_gaps``).
    """
    accounted = {b.line_no for _, b in lost_line_gaps(items, gap_tolerance, sec_per_step)}
    segments: list[Segment] = []
    current: list[TracePoint] = []
    reason = "start"
    marker: ResumeMarker | None = None
    source = "log"
    pending_marker: ResumeMarker | None = None
    for item in items:
        if item.marker is not None:
            # Several restore lines in a row ("Loading the checkpoint at step 500",
            # "Finished loading the checkpoint"): the one that names a step wins; a step the
            # checkpoint's line names wins over the next one's ("Training starts at step 401"),
            # so that the resumed run's first step is checked against the checkpoint's.
            keep = pending_marker is not None and pending_marker.step is not None and not pending_marker.names_next and item.marker.names_next
            if not keep and (pending_marker is None or item.marker.step is not None or pending_marker.step is None):
                pending_marker = item.marker
            continue
        p = item.point
        assert p is not None
        if not current:
            reason, marker, source = "start", pending_marker, p.source
        else:
            prev = current[-1]
            new_reason: str | None = None
            if pending_marker is not None and late_restore_line(pending_marker, current, reason, marker, p, gap_tolerance):
                marker, pending_marker = marker or pending_marker, None
            if pending_marker is not None:
                new_reason = "start-up-lines" if pending_marker.kind == "restart" else "log-marker"
            elif p.source != prev.source:
                new_reason = "baseline-file"
            elif p.step == prev.step and (item.redraw or same_loss(p.loss, prev.loss)):
                current[-1] = p  # the same step drawn again: keep the latest value
                continue
            elif p.step <= prev.step:
                new_reason = "step-counter-restart"
            elif p.step - prev.step > gap_tolerance and p.line_no not in accounted:
                new_reason = "step-gap"
            if new_reason is not None:
                segments.append(Segment(tuple(current), reason, marker, source))
                current = []
                reason, marker, source = new_reason, pending_marker, p.source
        pending_marker = None
        current.append(p)
    if current:
        segments.append(Segment(tuple(current), reason, marker, source))
    return segments


#: A late restore line is read at most this many points into the run it belongs to.
_LATE_MARKER_POINTS = 32


def late_restore_line(
    m: ResumeMarker,
    current: Sequence[TracePoint],
    reason: str,
    marker: ResumeMarker | None,
    p: TracePoint,
    gap_tolerance: float,
) -> bool:
    """A restore line read a few points into the resumed run it belongs to (a trainer's stderr
    read after its stdout: two pipes, or a launcher that forwards them apart): it names the
    step the current run resumed from (its own restore line's, else the step just before its
    first), and the counter goes on forward without a gap. The same resume, not a new one."""
    if m.kind != "restore" or m.step is None or reason == "start" or not current:
        return False
    if len(current) > _LATE_MARKER_POINTS or p.source != current[-1].source:
        return False
    if not 0 < p.step - current[-1].step <= gap_tolerance:
        return False
    if marker is not None and marker.step is not None:
        return marker.step == m.step
    return 0 < current[0].step - m.step <= gap_tolerance


def wall_time_per_step(points: Sequence[TracePoint], gap_tolerance: float) -> float | None:
    """Median wall seconds per step between consecutive timestamped points (None: no timestamps)."""
    rates = [
        (b.wall - a.wall) / (b.step - a.step)
        for a, b in itertools.pairwise(points)
        if a.wall is not None and b.wall is not None and 0 < b.step - a.step <= gap_tolerance
        and a.source == b.source and b.wall >= a.wall
    ]
    return statistics.median(rates) if len(rates) >= 3 else None


def lost_line_gaps(
    items: Sequence[Item], gap_tolerance: float, sec_per_step: float | None
) -> list[tuple[TracePoint, TracePoint]]:
    """Forward step jumps (no marker between) whose wall time matches the steps missing.

    The steps ran (time passed at the run's pace) but their lines never reached the
    log (buffered output, a rotated file): that is not ``skipped-steps``. A jump with
    no time to account for it stays a jump.
    """
    if sec_per_step is None or sec_per_step <= 0:
        return []
    gaps: list[tuple[TracePoint, TracePoint]] = []
    prev: TracePoint | None = None
    for item in items:
        if item.marker is not None:
            prev = None
            continue
        p = item.point
        assert p is not None
        if (
            prev is not None
            and p.source == prev.source
            and p.step - prev.step > gap_tolerance
            and p.wall is not None
            and prev.wall is not None
        ):
            expected = (p.step - prev.step) * sec_per_step
            actual = p.wall - prev.wall
            if expected / LOST_LINES_TIME_FACTOR <= actual <= expected * LOST_LINES_TIME_FACTOR:
                gaps.append((prev, p))
        prev = p
    return gaps


def same_loss(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def stitch(segments: Sequence[Segment]) -> list[TracePoint]:
    """The pre-failure trajectory: for each step the value of the latest run that logged it."""
    by_step: dict[int, TracePoint] = {}
    for seg in segments:
        for p in seg.points:
            by_step[p.step] = p
    return [by_step[s] for s in sorted(by_step)]



def near_start(step: int, first_step_ever: int | None, interval: int) -> bool:
    """``step`` is where training starts: at most the history's first step (None: a separate
    baseline file, an excerpt that need not start at training's start) or one interval."""
    return step <= max(first_step_ever or 0, interval)


def step_convention(first_step: int | None, interval: int) -> str:
    """'before' when the history starts at step 0, 'after' when at step 1..interval, else 'unknown'."""
    if first_step is None:
        return "unknown"
    if first_step == 0:
        return "before"
    if 1 <= first_step <= interval:
        return "after"
    return "unknown"


def check_steps(
    resumed: Segment,
    post_segments: Sequence[Segment],
    pre: Sequence[TracePoint],
    resume_step: int | None,
    window: tuple[int, float] | None,
    interval: int,
    gap_tol: float,
    first_step_ever: int | None,
) -> list[Finding]:
    """``window``: where the resumed run may start (``watch_axis.resume_window``), with ``resume_step``."""
    found: list[Finding] = []
    p1 = resumed.first_step
    line = resumed.points[0].line_no
    if resume_step is not None and window is not None:
        lo, hi = window
        expected = f"{lo}" if interval == 1 and hi - lo <= gap_tol else f"{lo}..{max(resume_step + interval, int(hi - gap_tol))}"
        if p1 < lo:
            found.append(
                Finding(
                    verdict=REPLAYED,
                    message=f"the resumed run starts at step {p1} but the checkpoint restored step "
                    f"{resume_step} (expected {expected}): steps {p1}..{lo - 1} are trained again"
                    + (
                        " - the step counter restarted from the beginning"
                        if near_start(p1, first_step_ever, interval)
                        else ""
                    ),
                    step=p1,
                    line_no=line,
                )
            )
        elif p1 > hi:
            found.append(
                Finding(
                    verdict=SKIPPED,
                    message=f"the resumed run starts at step {p1} but the checkpoint restored step "
                    f"{resume_step} (expected {expected}, logging every {interval} step(s)): "
                    f"steps {lo}..{p1 - 1} were never trained",
                    step=p1,
                    line_no=line,
                )
            )
    elif (
        pre
        and near_start(p1, first_step_ever, interval)
        and pre[-1].step > p1 + interval
    ):
        found.append(
            Finding(
                verdict=REPLAYED,
                message=f"the step counter restarted at {p1} after reaching {pre[-1].step}: "
                "no training state was restored (or the step counter is not saved)",
                step=p1,
                line_no=line,
            )
        )
    # Inside the resumed run.
    prev_last = resumed.last_step
    for seg in post_segments[1:]:
        first = seg.points[0]
        if restarted_from_checkpoint(seg, gap_tol):
            # The job started again from a checkpoint (a scheduler's requeue: the batch script's
            # "ckptctl: job start ... resuming from checkpoint=" line, the trainer's restore line)
            # and continues right after the step it names: a resume of its own, not a replay.
            prev_last = max(prev_last, seg.last_step)
            continue
        if seg.first_step <= prev_last:
            found.append(
                Finding(
                    verdict=REPLAYED,
                    message=f"after the resume the step counter went back from {prev_last} to "
                    f"{seg.first_step} (line {first.line_no}): steps repeated",
                    step=seg.first_step,
                    line_no=first.line_no,
                )
            )
        elif seg.first_step - prev_last > gap_tol:
            found.append(
                Finding(
                    verdict=SKIPPED,
                    message=f"after the resume the step counter jumped from {prev_last} to "
                    f"{seg.first_step} (line {first.line_no}; logging every {interval} step(s))",
                    step=seg.first_step,
                    line_no=first.line_no,
                )
            )
        prev_last = max(prev_last, seg.last_step)
    return found


def restarted_from_checkpoint(seg: Segment, gap_tol: float) -> bool:
    """Does ``seg`` begin with a restore line whose step it continues from (a restart of the job
    from a checkpoint, e.g. after a Slurm requeue)? Either logging convention: the named step
    itself (logged before its update) or the next ones, up to the gap tolerance."""
    marker = seg.marker
    if marker is None or marker.kind != "restore" or marker.step is None:
        return False
    return marker.step <= seg.first_step <= marker.step + gap_tol


def names_first_step(seg: Segment, before: Segment | None) -> bool:
    """Does the restore line heading ``seg`` name the resumed run's first step rather than the
    checkpoint's, though its words do not say so ("Resuming from step 5001" after a log that
    reached step 5000, then step 5001)? Only when the run before ended exactly one step short
    of it and the resumed run starts exactly there: a line naming the checkpoint's step is
    followed by that step again (a replay) or by the next one, never by itself after N - 1."""
    marker = seg.marker
    if marker is None or marker.kind != "restore" or marker.step is None or marker.step_in_path or before is None:
        return False
    return seg.first_step == marker.step and before.last_step == marker.step - 1


def last_save_before(sources: Sequence[tuple[str, Sequence[LogEvent]]], marker: ResumeMarker) -> ResumeMarker | None:
    """The last save line (with a step) printed before the restore line ``marker`` of the log."""
    last: ResumeMarker | None = None
    for source, events in sources:
        for event in events:
            if not isinstance(event, ResumeMarker):
                continue
            if source == "log" and event.line_no >= marker.line_no:
                return last
            if event.kind == "save" and event.step is not None:
                last = event
    return last


def check_marker_steps(
    resumed: Segment,
    pre: Sequence[TracePoint],
    last_save: ResumeMarker | None,
    given_step: int | None,
    gap_tol: float,
    interval: int,
    sec_per_step: float | None,
) -> tuple[list[Finding], list[str]]:
    """Compare the step the restore line names with the log's own facts (findings, notes).

    Older than the last checkpoint the log says it saved before the crash: the run
    went back further than it had to (``replayed-steps``), unless ``--resume-step``
    names that older step (a deliberate fall-back, e.g. the newer one was incomplete).
    Newer than the last step the log reached: those steps were never trained
    (``skipped-steps``), unless the wall time up to the resumed run's first line
    could have run them (the log lost its tail: a note).
    """
    marker = resumed.marker
    if marker is None or marker.kind != "restore" or marker.step is None:
        return [], []
    step = marker.step
    if last_save is not None and last_save.step is not None and step < last_save.step:
        if given_step == step:
            return [], [
                f"the restore line (line {marker.line_no}) loads step {step}, older than the checkpoint "
                f"saved at step {last_save.step} (line {last_save.line_no}): the step given, a fall-back"
            ]
        return [
            Finding(
                verdict=REPLAYED,
                message=f"the restore line (line {marker.line_no}) loads step {step}, but the log saved "
                f"step {last_save.step} before the crash (line {last_save.line_no}): steps "
                f"{step + 1}..{last_save.step} are trained again",
                step=step,
                line_no=marker.line_no,
            )
        ], []
    if pre and step > pre[-1].step + gap_tol:
        last, first = pre[-1], resumed.points[0]
        needed = (step - last.step - interval) * sec_per_step if sec_per_step else None
        if needed is None or last.wall is None or first.wall is None:
            # A checkpoint at that step means the run got there, unless it is another run's:
            # with no clock on the lines nothing tells the two apart, and a crash that loses
            # the log's buffered tail is far more common, so this is a note, not a verdict.
            return [], [
                f"the restore line (line {marker.line_no}) loads step {step}, past the last step logged "
                f"({last.step}): the log lost its tail in the crash, or the checkpoint is another run's "
                "(no timestamps to tell)"
            ]
        if first.wall - last.wall >= needed:
            return [], [
                f"the restore line (line {marker.line_no}) loads step {step}, past the last step logged "
                f"({last.step}); {first.wall - last.wall:.0f} s passed, time enough for those steps: "
                "the log lost its tail in the crash"
            ]
        return [
            Finding(
                verdict=SKIPPED,
                message=f"the restore line (line {marker.line_no}) loads step {step}, but the log only "
                f"reached step {last.step} before the crash"
                + (f" and {first.wall - last.wall:.0f} s is too little for the {needed:.0f} s those steps take"
                   if needed is not None and last.wall is not None and first.wall is not None else "")
                + f": steps {last.step + 1}..{step} were never trained",
                step=step,
                line_no=marker.line_no,
            )
        ], []
    return [], []


def weights_only_marker(events: Sequence[LogEvent], after_line: int, until_line: int) -> ResumeMarker | None:
    """A line between ``after_line`` and ``until_line`` (the restore) saying the optimizer or
    scheduler state was not restored (``ResumeMarker.weights_only``)."""
    for e in events:
        if isinstance(e, ResumeMarker) and e.weights_only and after_line < e.line_no <= until_line:
            return e
    return None


def checkpoint_holds_step(sources: Sequence[tuple[str, Sequence[LogEvent]]], marker: ResumeMarker, step: int) -> bool:
    """The last save line before the restore line ``marker`` names ``step`` and came after the line
    logging that step: the checkpoint holds the step's update, the resumed run starts after it."""
    holds = False
    for source, events in sources:
        logged = False
        for event in events:
            if source == "log" and event.line_no >= marker.line_no:
                return holds
            if isinstance(event, LossPoint):
                logged = logged or event.step == step
            elif event.kind == "save" and event.step is not None:
                holds = event.step == step and logged
    return holds


def check_jump_across_restart(
    resumed: Segment,
    pre: Sequence[TracePoint],
    interval: int,
    gap_tol: float,
    sec_per_step: float | None,
) -> tuple[list[Finding], list[str]]:
    """With no checkpoint step known: a resumed run that starts past the last pre-failure step.

    Lost lines take the time the steps took: a jump that came faster than the steps
    could have run, even with the restart's downtime in it, is ``skipped-steps``;
    otherwise a note (the log may have lost its tail to buffered output).
    """
    p1 = resumed.first_step
    if not pre or p1 <= pre[-1].step + gap_tol:
        return [], []
    last, first = pre[-1], resumed.points[0]
    needed = (p1 - last.step - interval) * sec_per_step if sec_per_step else None
    if needed is not None and last.wall is not None and first.wall is not None and (
        first.wall - last.wall < needed / LOST_LINES_TIME_FACTOR
    ):
        return [
            Finding(
                verdict=SKIPPED,
                message=f"the step counter jumps from {last.step} to {p1} across the restart in "
                f"{first.wall - last.wall:.0f} s; at the run's {sec_per_step:.3g} s/step those "
                f"steps take {needed:.0f} s: they were never trained",
                step=p1,
                line_no=first.line_no,
            )
        ], []
    return [], [
        f"the resumed run starts at step {p1}, past the last pre-failure step logged "
        f"({last.step}): expected if the log lost its tail in the crash (buffered output); "
        "pass --resume-step to check for skipped steps"
    ]
