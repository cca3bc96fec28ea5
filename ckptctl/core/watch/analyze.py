"""Loss continuity across a resume: find the resume in a log, judge the first steps after it.

Pure: functions on parsed events (``ckptctl.core.watch.losslog``), frozen dataclasses
out. No I/O, no clock. ``analyze`` is the whole decision; ``WatchSession`` feeds
it incrementally for a live log (``session``). ``analyze`` reads the log once (the
rank, steps, segments and the resume) and runs every check of the registry
(``registry.CHECKS``: each a small function with a declared name and the verdicts
and note codes it may give) on the same ``context.CheckContext``; then it picks the
verdict by precedence. The parts live beside it: ``model`` (the data, the verdicts
and their classes), ``resume`` (rank, steps, segments, step checks), ``stats``
(robust statistics), ``judge`` (the loss judgement and its words), ``checks``
(tokens, schedule, throughput, loss scale, grad norm, self-baseline).

How a log is read
-----------------
1. One rank: rank 0 when any point carries rank 0, else the first rank seen
   (Megatron prints from the last rank; a torchrun tee tags every rank).
2. Steps: as logged. HF Trainer prints no step: points are numbered in order and,
   after a restart, re-aligned by their epoch (``step_kind = "epoch-aligned"``);
   a ``--pattern`` without a ``step`` group numbers them in order (``"ordinal"``).
3. Segments: a new run segment starts where the step counter goes back (a
   restart; the same step again counts as a restart unless it is the same value
   or a progress bar redrawing), after a resume marker line, at the start of the
   log when the baseline is a separate file, or after a forward jump larger than
   the gap tolerance (a resume whose pre-failure log lost its tail to buffered
   output looks like this, as does a resume that skipped steps). A restore line
   read a few points late that names the step the current run resumed from is
   that run's, not a new one (``resume.late_restore_line``).
4. The resume is the last segment start in the log, except that with a known
   resume step R the last start that is consistent with R wins and every later
   restart is a repeat (replayed steps) inside the resumed run.

What is judged
--------------
* Steps (when the log has real steps): with R known, the resumed run must start
  in ``[lo, R + gap]`` where ``lo`` is R+1 when the log's first step is 1 (steps
  are logged after the update) and R otherwise (steps logged before the update,
  or unknown). Earlier -> ``replayed-steps``; later -> ``skipped-steps``. Without R,
  a counter that restarts at the very beginning (nothing restored) is
  ``replayed-steps``. Inside the resumed run, a step going back is
  ``replayed-steps`` (unless a restore line names the step it continues from: the
  job restarted from a checkpoint, e.g. a Slurm requeue, ``resume.restarted_from_checkpoint``)
  and a jump beyond the gap tolerance is ``skipped-steps``.
  Steps logged before the crash but after R are simply re-run work, not replays.
* NaN/Inf anywhere after the resume -> ``nan``.
* The first N losses after the resume against the pre-failure trajectory,
  from the last W finite pre-failure points at or before the last judged step:

  - expected level at each judged step: the larger of (a) a robust line through
    the window (median of slopes between points half a window apart, Siegel-type,
    robust to a quarter of outliers), held flat past the window's end, and (b) a
    Theil-Sen line through the ``local_points`` pre-failure points nearest that
    step, held flat past the last one. Holding flat instead of extrapolating and
    taking the larger estimate are both deliberate: a convex, falling loss curve
    lies above its extrapolated line, and a curve that bends inside the window
    (a steep early descent that levels off) lies above the window's line near
    its end; either would otherwise alarm on a healthy resume.
  - spread: 1.4826 * MAD (a standard deviation for Gaussian noise that ignores
    outliers) of the residuals around a resistant parabola through the medians of
    the window's thirds (around the line for fewer than 9 points), so a curved
    window does not pass its curvature off as noise.
  - tolerances: ``max(k * spread, min_rel_tol * |level|, min_abs_tol)`` for single
    points and the same with ``k_median`` for the median of the first N.
    ``spike`` when the median excess of the first N points is above the median
    tolerance (a level shift), or when ``persistence`` consecutive points exceed
    the single-point tolerance (a transient spike); one noisy point never alarms.
* Re-run steps (logged both before the crash and after the resume): a
  deterministic resume reproduces them; a median difference beyond ``tol`` in
  either direction is ``diverged`` (a drop is what replayed data looks like),
  and with ``expect_identical`` any difference is.

* Few pre-failure points (fewer than ``min_baseline_points``): a self-baseline;
  a sustained rise of the loss above its recent level is a ``spike`` (confidence
  ``low``).
* Tokens/samples seen continue from the checkpoint's value (``tokens-mismatch``);
  the learning rate follows the pre-failure schedule (``schedule-reset``);
  throughput back to its band, loss scale and grad norm: notes.
* Relative counters: a restore line naming step R followed by a counter that
  starts again near 0 reads as R + counter (note ``relative-step-counter``).
* Lost lines: a forward step gap whose wall time (timestamps) matches the missing
  steps is lost log lines (note), not ``skipped-steps``.

* Re-run steps compared one by one with the run that wrote the checkpoint
  (``replay``): the same level with an unrelated per-step pattern is
  ``data-stream-reset``. The data-position lines of ``ckptctl.training``
  (``datapos``): a first batch away from the recorded position is
  ``data-position-mismatch``.

Precedence when several hold (``model.VERDICTS``): nan > replayed-steps >
skipped-steps > tokens-mismatch > data-position-mismatch > schedule-reset >
spike > data-stream-reset > diverged; ``continuous`` only with N
judged points (or, for a complete log, at least ``min_judged_points``) and
nothing found; otherwise ``insufficient-data``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ckptctl.core.watch.axis import Axis, resume_window
from ckptctl.core.watch.context import CheckContext, DataPosition, LossJudgement
from ckptctl.core.watch.judge import decide, describe_decision, describe_detection, loss_curve
from ckptctl.core.watch.logevents import EPOCH_AXIS, LogEvent
from ckptctl.core.watch.model import (
    CONTINUOUS,
    INSUFFICIENT,
    LOST_LOG_LINES,
    NAN,
    RELATIVE_COUNTER,
    REPLAYED,
    SKIPPED,
    VERDICTS,
    Finding,
    Segment,
    TracePoint,
    WatchConfig,
    WatchReport,
    fmt_num,
)
from ckptctl.core.watch.registry import CHECKS, Check, run_checks
from ckptctl.core.watch.relcounter import relative_offset, relative_pending
from ckptctl.core.watch.reprint import history_pending, split_reprinted_history
from ckptctl.core.watch.resume import (
    assign_steps,
    checkpoint_holds_step,
    interval_evidence,
    log_interval_and_gap,
    lost_line_gaps,
    names_first_step,
    segment,
    step_convention,
    stitch,
    wall_time_per_step,
)

__all__ = [
    "analyze",
]


@dataclass(slots=True)
class _Reading:
    """The log read once: its points, segments and what was said about them so far."""

    sources: list[tuple[str, Sequence[LogEvent]]]
    points: list[TracePoint]
    segments: list[Segment]
    step_kind: str
    rank: int | None
    interval: int
    gap_tol: float
    sec_per_step: float | None
    notes: list[str]
    note_codes: list[str]
    num_log_points: int
    axis: Axis
    """What the log's positions count (``axis``: step, epoch or epoch-batch)."""
    interval_seen: int = 0
    """Steps between points the logging interval was measured on (``resume.interval_evidence``)."""

    @property
    def logged_steps(self) -> bool:
        return self.step_kind == "logged"


def _read(log_events: Sequence[LogEvent], baseline_events: Sequence[LogEvent] | None, cfg: WatchConfig) -> _Reading:
    sources: list[tuple[str, Sequence[LogEvent]]] = []
    if baseline_events is not None:
        sources.append(("baseline", baseline_events))
    sources.append(("log", log_events))
    items, step_kind, rank, axis = assign_steps(sources)
    points = [it.point for it in items if it.point is not None]
    interval, gap_tol = log_interval_and_gap(points, cfg.gap_tolerance_intervals)
    sec_per_step = wall_time_per_step(points, gap_tol)
    segments, reprinted = split_reprinted_history(segment(items, gap_tol, sec_per_step))
    notes: list[str] = [reprinted] if reprinted else []
    note_codes: list[str] = []
    for a, b in lost_line_gaps(items, gap_tol, sec_per_step):
        note_codes.append(LOST_LOG_LINES)
        notes.append(
            f"steps {a.step}..{b.step} (lines {a.line_no}..{b.line_no}): {b.step - a.step} steps with "
            f"no line, but {b.wall - a.wall if a.wall and b.wall else 0:.0f} s passed at the run's "
            f"{sec_per_step or 0:.3g} s/step: lost log lines (buffered output), not skipped steps"
        )
    if axis.by_epoch:
        notes.append(
            "the log's position is its epoch (one record per epoch)" if axis.name == EPOCH_AXIS else
            f"the log's position is epoch x {axis.epoch_len} + the batch within the epoch"
            + (" (its step counter starts again every epoch)" if axis.composed else "")
            + "; steps below are positions on that axis"
        )
    return _Reading(
        sources=sources,
        points=points,
        segments=segments,
        step_kind=step_kind,
        rank=rank,
        interval=interval,
        gap_tol=gap_tol,
        sec_per_step=sec_per_step,
        notes=notes,
        note_codes=note_codes,
        num_log_points=sum(1 for p in points if p.source == "log"),
        axis=axis,
        interval_seen=interval_evidence(points),
    )


@dataclass(frozen=True, slots=True)
class _Resume:
    """Which segment is the resume and the checkpoint step it is checked against."""

    index: int | None
    rs: int | None
    rs_source: str | None
    names_next: bool = False
    """The restore line named the step (or epoch) to run next, not the one saved."""
    on_epoch: bool = False
    """``rs`` is the first position of an epoch the checkpoint was named by (``axis.resume_window``)."""


def _find_resume(r: _Reading, resume_step: int | None) -> _Resume:
    """Which segment is the resume (its index), and the checkpoint step with its source."""
    segments = r.segments
    # (the log of one attempt only may open with its restore line: a resume with no history)
    candidates = [
        i for i, s in enumerate(segments)
        if s.source == "log" and (i > 0 or (s.marker is not None and s.marker.kind == "restore" and s.marker.step is not None))
    ]
    convention = step_convention(segments[0].first_step if segments else None, r.interval)
    rs, rs_source = (resume_step, "flag") if resume_step is not None else (None, None)
    on_epoch = rs is not None and r.axis.name == EPOCH_AXIS  # (on the epoch axis --resume-step names an epoch)
    names_next = False
    if not candidates:
        return _Resume(None, rs, rs_source)
    if rs is not None and r.logged_steps:
        lo, hi = resume_window(rs, convention, r.gap_tol, r.axis, False, on_epoch)
        consistent = [i for i in candidates if lo <= segments[i].first_step <= hi]
        resume_index = consistent[-1] if consistent else candidates[-1]
    else:
        resume_index = candidates[-1]
    seg = segments[resume_index]
    if rs is None and seg.marker is not None and seg.marker.step is not None:
        rs, rs_source = seg.marker.step, "log-marker"
        names_next, on_epoch = seg.marker.names_next, seg.marker.on_epoch
        if not names_next and names_first_step(seg, segments[resume_index - 1] if resume_index > 0 else None):
            rs -= 1  # ("Resuming from step 5001" after step 5000: the checkpoint is step 5000's)
    if (
        resume_step is not None
        and seg.marker is not None
        and seg.marker.step is not None
        and seg.marker.step != resume_step
        and r.logged_steps
    ):
        r.notes.append(
            f"the trainer says it loaded step {seg.marker.step} (line {seg.marker.line_no}) "
            f"but the checkpoint step given is {resume_step}"
        )
    return _Resume(resume_index, rs, rs_source, names_next, on_epoch)


def _no_resume(
    r: _Reading, baseline_given: bool, rs: int | None, rs_source: str | None
) -> WatchReport:
    explanation: list[str] = []
    segments = r.segments
    # A non-finite loss needs no resume and no baseline to be bad: the log is judged as a whole
    # (the excerpt may be the resumed run only, its restore line not in it).
    non_finite = next(
        (p for p in r.points[len(r.points) - r.num_log_points :] if not math.isfinite(p.loss)), None
    )
    findings: tuple[Finding, ...] = ()
    if non_finite is not None:
        findings = (
            Finding(
                verdict=NAN,
                message=f"loss is {fmt_num(non_finite.loss)} at step {non_finite.step} (line {non_finite.line_no})",
                step=non_finite.step,
                line_no=non_finite.line_no,
            ),
        )
    if not r.points:
        explanation.append("no loss lines read yet")
    elif baseline_given and r.num_log_points == 0:
        explanation.append("the log has no loss lines after the baseline yet")
    else:
        explanation.append(
            f"no resume found: {r.num_log_points} points in one run "
            f"(steps {segments[0].first_step}..{segments[-1].last_step}); the step counter never "
            "restarts and no restore line was seen; pass the pre-failure log with --baseline"
        )
        if rs is not None and r.logged_steps and segments[0].first_step <= rs < segments[-1].last_step:
            explanation.append(
                f"the log runs past checkpoint step {rs} without a restart: either the resumed "
                "run has not logged yet, or it went on in this same log with no restore line; "
                "the log alone cannot tell which"
            )
    if findings:
        explanation.append(
            f"{findings[0].message}: a non-finite loss is bad with or without a resume, so the log was judged as a whole"
        )
    return WatchReport(
        verdict=NAN if findings else INSUFFICIENT,
        decided=bool(findings),
        resume_step=rs,
        resume_step_source=rs_source,
        resume_detected_by=None,
        resume_line=None,
        first_resumed_step=None,
        step_kind=r.step_kind,
        log_interval=r.interval if r.points else None,
        rank=r.rank,
        baseline=None,
        threshold=None,
        observed=None,
        rerun=None,
        findings=findings,
        explanation=tuple(explanation),
        notes=tuple(r.notes),
        num_points=r.num_log_points,
        num_baseline_points=len(r.points) - r.num_log_points,
        num_segments=len(segments),
        note_codes=tuple(r.note_codes),
        confidence="medium" if findings else None,
        step_axis=r.axis.name,
        epoch_len=r.axis.epoch_len,
        step_axis_composed=r.axis.composed,
    )


def _relative_counter(
    r: _Reading, post_segments: list[Segment], pre_segments: list[Segment], rs: int | None, history_start: int | None
) -> list[Segment]:
    """"Resumed from step 800" then "Step 1", or "Step 1 (after resuming)": the counter is
    relative to the restore; the resumed run's steps read as its start + counter
    (``relcounter.relative_offset``; else the segments as they are)."""
    resumed = post_segments[0]
    offset, said = relative_offset(resumed, pre_segments, rs, r.logged_steps, history_start, r.interval)
    if offset is None:
        return post_segments
    shifted = [
        replace(s, points=tuple(replace(p, step=p.step + offset) for p in s.points)) for s in post_segments
    ]
    r.note_codes.append(RELATIVE_COUNTER)
    r.notes.append(
        f"the resumed run counts steps from {shifted[0].first_step - offset} after {said} (step {offset}): "
        f"read as step {offset} + counter"
    )
    return shifted


# -- the decision ------------------------------------------------------------------------


#: Steps between points seen before a followed log's step verdict (skipped, replayed) is decided.
_INTERVAL_EVIDENCE = 2


def analyze(
    log_events: Sequence[LogEvent],
    *,
    baseline_events: Sequence[LogEvent] | None = None,
    resume_step: int | None = None,
    config: WatchConfig | None = None,
    checkpoint_tokens: float | None = None,
    final: bool = False,
    data_positions: Sequence[DataPosition] = (),
    checks: tuple[Check, ...] = CHECKS,
) -> WatchReport:
    """Judge the latest resume in ``log_events`` (see the module docstring).

    ``checkpoint_tokens``: tokens seen recorded with the checkpoint (ckptctl's
    manifest), for the tokens check. ``final``: the log is complete (not followed):
    decide on fewer than N points when there are at least ``min_judged_points``.
    ``data_positions``: the data-position lines read (``datapos``), baseline first.
    ``checks``: the checks to run (default: the whole registry).
    """
    cfg = config or WatchConfig()
    r = _read(log_events, baseline_events, cfg)
    if not r.logged_steps:
        r.notes.append(
            "the log carries no step numbers; points are numbered in order"
            + (" and re-aligned by epoch after a restart" if r.step_kind == "epoch-aligned" else "")
            + ", so replayed/skipped steps are only detected when the run restarts from the beginning"
        )
        if resume_step is not None:
            r.notes.append(f"--resume-step {resume_step} cannot be matched to a log without step numbers")
    found = _find_resume(r, resume_step)
    rs, rs_source, resume_index = found.rs, found.rs_source, found.index
    if resume_index is None:
        return _no_resume(r, baseline_events is not None, rs, rs_source)

    segments = r.segments
    first_step_ever = segments[0].first_step
    # (a --baseline file is what the user had: an excerpt need not start where training did)
    history_start = first_step_ever if segments[0].source == "log" else None
    post_segments = _relative_counter(r, segments[resume_index:], segments[:resume_index], rs, history_start)
    resumed = post_segments[0]
    convention = step_convention(first_step_ever, r.interval)
    if rs is not None and resumed.marker is not None and not found.on_epoch and (
        checkpoint_holds_step(r.sources, resumed.marker, rs)
    ):
        convention = "after"  # "step 5000" logged, then "checkpoint saved at step 5000": 5000 is done
    ctx = CheckContext(
        cfg=cfg,
        final=final,
        sources=r.sources,
        resumed=resumed,
        pre_segments=segments[:resume_index],
        post_segments=post_segments,
        pre=stitch(segments[:resume_index]),
        post=[p for s in post_segments for p in s.points],
        resume_step=resume_step,
        rs=rs,
        convention=convention,
        window=resume_window(rs, convention, r.gap_tol, r.axis, found.names_next, found.on_epoch)
        if rs is not None else None,
        interval=r.interval,
        gap_tol=r.gap_tol,
        first_step_ever=first_step_ever,
        history_start=history_start,
        axis=r.axis,
        sec_per_step=r.sec_per_step,
        logged_steps=r.logged_steps,
        checkpoint_tokens=checkpoint_tokens if checkpoint_tokens is not None else (
            resumed.marker.tokens if resumed.marker is not None else None
        ),
        data_positions=data_positions,
    )  # fmt: skip
    p1 = resumed.first_step
    explanation = [
        f"resume: {describe_detection(resumed)}; the resumed run starts at {ctx.unit} {p1} "
        f"(line {resumed.points[0].line_no})"
        + (
            f"; checkpoint step {rs} ({'given' if rs_source == 'flag' else 'from the restore line'})"
            if rs is not None
            else ""
        )
    ]
    findings: list[Finding] = []
    numbers: dict[str, Any] = {}
    loss = LossJudgement()
    for _, result in run_checks(ctx, checks):
        findings.extend(result.findings)
        explanation.extend(result.explanation)
        numbers.update(result.checks)
        for code, text in result.notes:
            if code is not None:
                r.note_codes.append(code)
            r.notes.append(text)
        if result.loss is not None:
            loss = result.loss

    judged = ctx.judged
    verdict, decided = decide(
        findings, judged, loss.decided, loss.baseline is not None or loss.self_based, cfg, final=final
    )
    if decided and not final and (
        (verdict in (SKIPPED, REPLAYED) and (
            r.interval_seen < _INTERVAL_EVIDENCE or (ctx.pre and interval_evidence(ctx.pre) < _INTERVAL_EVIDENCE)
        ))
        or (verdict != NAN and relative_pending(resumed, segments[:resume_index], rs, r.logged_steps, history_start, r.interval))
        or (verdict != NAN and history_pending(segments))
    ):
        # A followed log decides no step verdict on a logging interval not yet seen or against a
        # history of one point, nor on a counter that started again and may prove relative with
        # its next points, nor on a log that opens with its restore line while the run after it may
        # still be printing the history up to the checkpoint (``reprint``).
        decided = False
    confidence: str | None = None
    if decided:
        full = len(judged) >= cfg.num_steps
        few = len(judged) < cfg.medium_judged_points
        confidence = (
            "low"
            if loss.self_based or (few and verdict == CONTINUOUS)
            else "high" if full or verdict != CONTINUOUS else "medium"
        )
    explanation.append(describe_decision(verdict, decided, findings, judged, cfg))
    return WatchReport(
        verdict=verdict,
        decided=decided,
        resume_step=rs,
        resume_step_source=rs_source,
        resume_detected_by=resumed.reason,
        resume_line=resumed.points[0].line_no,
        first_resumed_step=p1,
        step_kind=r.step_kind,
        log_interval=r.interval,
        rank=r.rank,
        baseline=loss.baseline,
        threshold=loss.threshold,
        observed=loss.observed,
        rerun=loss.rerun,
        findings=tuple(sorted(findings, key=lambda f: VERDICTS.index(f.verdict))),
        explanation=tuple(explanation),
        notes=tuple(r.notes),
        num_points=r.num_log_points,
        num_baseline_points=len(r.points) - r.num_log_points,
        num_segments=len(segments),
        note_codes=tuple(r.note_codes),
        confidence=confidence,
        checks=numbers,
        step_axis=r.axis.name,
        epoch_len=r.axis.epoch_len,
        step_axis_composed=r.axis.composed,
        curve=loss_curve(ctx.pre, judged, loss.observed, loss.threshold, cfg),
    )
