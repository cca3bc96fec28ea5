"""Loss continuity across a resume: find the resume in a log, judge the first steps after it.

Pure: functions on parsed events (``ckptctl.core.watch.losslog``), frozen dataclasses
out. No I/O, no clock. ``analyze`` is the whole decision; ``WatchSession`` feeds
it incrementally for a live log (``session``). The parts live beside it: ``model`` (the
data), ``resume`` (rank, steps, segments, step checks), ``stats``
(robust statistics), ``judge`` (the loss judgement and its words),
``checks`` (tokens, schedule, throughput, loss scale, grad norm,
self-baseline).

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
   output looks like this, as does a resume that skipped steps).
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
  ``replayed-steps`` and a jump beyond the gap tolerance is ``skipped-steps``.
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

Precedence when several hold: nan > replayed-steps > skipped-steps >
tokens-mismatch > schedule-reset > spike > diverged; ``continuous`` only with N
judged points (or, for a complete log, at least ``min_judged_points``) and
nothing found; otherwise ``insufficient-data``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ckptctl.core.watch.axis import resume_window
from ckptctl.core.watch.checks import (
    check_loss_scale_and_grad_norm,
    check_schedule,
    check_throughput,
    check_tokens,
    self_baseline_shift,
)
from ckptctl.core.watch.judge import (
    compare_reruns,
    decide,
    describe_decision,
    describe_detection,
    describe_losses,
    describe_rerun,
    judge_losses,
    loss_curve,
)
from ckptctl.core.watch.logevents import EPOCH_AXIS, LogEvent
from ckptctl.core.watch.model import (
    CONTINUOUS,
    INSUFFICIENT,
    LOST_LOG_LINES,
    NAN,
    RELATIVE_COUNTER,
    REPLAYED,
    SELF_BASELINE,
    SKIPPED,
    VERDICTS,
    WEIGHTS_ONLY,
    BaselineStats,
    Finding,
    ObservedStats,
    RerunStats,
    ThresholdStats,
    WatchConfig,
    WatchReport,
    fmt_num,
)
from ckptctl.core.watch.resume import (
    LOST_LINES_TIME_FACTOR,
    assign_steps,
    check_marker_steps,
    check_steps,
    checkpoint_holds_step,
    last_save_before,
    log_interval_and_gap,
    lost_line_gaps,
    relative_offset,
    segment,
    step_convention,
    stitch,
    wall_time_per_step,
    weights_only_marker,
)

__all__ = [
    "analyze",
]


# -- the decision ------------------------------------------------------------------------


def analyze(
    log_events: Sequence[LogEvent],
    *,
    baseline_events: Sequence[LogEvent] | None = None,
    resume_step: int | None = None,
    config: WatchConfig | None = None,
    checkpoint_tokens: float | None = None,
    final: bool = False,
) -> WatchReport:
    """Judge the latest resume in ``log_events`` (see the module docstring).

    ``checkpoint_tokens``: tokens seen recorded with the checkpoint (ckptctl's
    manifest), for the tokens check. ``final``: the log is complete (not followed):
    decide on fewer than N points when there are at least ``min_judged_points``.
    """
    cfg = config or WatchConfig()
    sources: list[tuple[str, Sequence[LogEvent]]] = []
    if baseline_events is not None:
        sources.append(("baseline", baseline_events))
    sources.append(("log", log_events))
    items, step_kind, rank, axis = assign_steps(sources)
    points = [it.point for it in items if it.point is not None]
    interval, gap_tol = log_interval_and_gap(points, cfg.gap_tolerance_intervals)
    sec_per_step = wall_time_per_step(points, gap_tol)
    segments = segment(items, gap_tol, sec_per_step)
    notes: list[str] = []
    note_codes: list[str] = []
    for a, b in lost_line_gaps(items, gap_tol, sec_per_step):
        note_codes.append(LOST_LOG_LINES)
        notes.append(
            f"steps {a.step}..{b.step} (lines {a.line_no}..{b.line_no}): {b.step - a.step} steps with "
            f"no line, but {b.wall - a.wall if a.wall and b.wall else 0:.0f} s passed at the run's "
            f"{sec_per_step or 0:.3g} s/step: lost log lines (buffered output), not skipped steps"
        )
    findings: list[Finding] = []
    explanation: list[str] = []
    num_log_points = sum(1 for p in points if p.source == "log")
    num_baseline_points = len(points) - num_log_points
    logged_steps = step_kind == "logged"
    if axis.by_epoch:
        notes.append(
            "the log's position is its epoch (one record per epoch)" if axis.name == EPOCH_AXIS else
            f"the log's position is epoch x {axis.epoch_len} + the batch within the epoch"
            + (" (its step counter starts again every epoch)" if axis.composed else "")
            + "; steps below are positions on that axis"
        )

    if step_kind != "logged":
        notes.append(
            "the log carries no step numbers; points are numbered in order"
            + (" and re-aligned by epoch after a restart" if step_kind == "epoch-aligned" else "")
            + ", so replayed/skipped steps are only detected when the run restarts from the beginning"
        )
        if resume_step is not None:
            notes.append(
                f"--resume-step {resume_step} cannot be matched to a log without step numbers"
            )

    # Which segment is the resume.
    # (the log of one attempt only may open with its restore line: a resume with no history)
    candidates = [
        i for i, s in enumerate(segments)
        if s.source == "log" and (i > 0 or (s.marker is not None and s.marker.kind == "restore" and s.marker.step is not None))
    ]
    first_step_ever = segments[0].first_step if segments else None
    convention = step_convention(first_step_ever, interval)
    # (a --baseline file is what the user had: an excerpt need not start where training did)
    history_start = first_step_ever if segments and segments[0].source == "log" else None
    resume_index: int | None = None
    rs, rs_source = (resume_step, "flag") if resume_step is not None else (None, None)
    on_epoch = rs is not None and axis.name == EPOCH_AXIS  # (on the epoch axis --resume-step names an epoch)
    names_next = False
    if candidates:
        if rs is not None and logged_steps:
            lo, hi = resume_window(rs, convention, gap_tol, axis, False, on_epoch)
            consistent = [i for i in candidates if lo <= segments[i].first_step <= hi]
            resume_index = consistent[-1] if consistent else candidates[-1]
        else:
            resume_index = candidates[-1]
        seg = segments[resume_index]
        if rs is None and seg.marker is not None and seg.marker.step is not None:
            rs, rs_source = seg.marker.step, "log-marker"
            names_next, on_epoch = seg.marker.names_next, seg.marker.on_epoch
        if (
            resume_step is not None
            and seg.marker is not None
            and seg.marker.step is not None
            and seg.marker.step != resume_step
            and logged_steps
        ):
            notes.append(
                f"the trainer says it loaded step {seg.marker.step} (line {seg.marker.line_no}) "
                f"but the checkpoint step given is {resume_step}"
            )

    if resume_index is None:
        if not points:
            explanation.append("no loss lines read yet")
        elif baseline_events is not None and num_log_points == 0:
            explanation.append("the log has no loss lines after the baseline yet")
        else:
            explanation.append(
                f"no resume found: {num_log_points} points in one run "
                f"(steps {segments[0].first_step}..{segments[-1].last_step}); the step counter never "
                "restarts and no restore line was seen; pass the pre-failure log with --baseline"
            )
            if rs is not None and logged_steps and segments[0].first_step <= rs < segments[-1].last_step:
                explanation.append(
                    f"the log runs past checkpoint step {rs} without a restart: either the resumed "
                    "run has not logged yet, or it went on in this same log with no restore line; "
                    "the log alone cannot tell which"
                )
        return WatchReport(
            verdict=INSUFFICIENT,
            decided=False,
            resume_step=rs,
            resume_step_source=rs_source,
            resume_detected_by=None,
            resume_line=None,
            first_resumed_step=None,
            step_kind=step_kind,
            log_interval=interval if points else None,
            rank=rank,
            baseline=None,
            threshold=None,
            observed=None,
            rerun=None,
            findings=(),
            explanation=tuple(explanation),
            notes=tuple(notes),
            num_points=num_log_points,
            num_baseline_points=num_baseline_points,
            num_segments=len(segments),
            note_codes=tuple(note_codes),
            step_axis=axis.name,
            epoch_len=axis.epoch_len,
            step_axis_composed=axis.composed,
        )

    resumed = segments[resume_index]
    pre_segments = segments[:resume_index]
    post_segments = segments[resume_index:]
    offset, said = relative_offset(resumed, pre_segments, rs, logged_steps, history_start, interval)
    if offset is not None:
        # "Resumed from step 800" then "Step 1", or "Step 1 (after resuming)": the counter is
        # relative to the restore.
        post_segments = [
            replace(s, points=tuple(replace(p, step=p.step + offset) for p in s.points)) for s in post_segments
        ]
        resumed = post_segments[0]
        note_codes.append(RELATIVE_COUNTER)
        notes.append(
            f"the resumed run counts steps from {resumed.first_step - offset} after {said} (step {offset}): "
            f"read as step {offset} + counter"
        )
    if rs is not None and resumed.marker is not None and not on_epoch and checkpoint_holds_step(sources, resumed.marker, rs):
        convention = "after"  # "step 5000" logged, then "checkpoint saved at step 5000": 5000 is done
    pre = stitch(pre_segments)
    post = [p for s in post_segments for p in s.points]
    weights_only = weights_only_marker(log_events, pre_segments[-1].points[-1].line_no if pre_segments and
                                       pre_segments[-1].source == "log" else 0, resumed.points[0].line_no)
    if weights_only is not None and resumed.source == "log":
        note_codes.append(WEIGHTS_ONLY)
        notes.append(
            f"line {weights_only.line_no} says the optimizer (or scheduler) state was not restored "
            f"({weights_only.text[:120]!r}): a weights-only restore; the first steps may spike while "
            "the optimizer's moments build up again"
        )
    p1 = resumed.first_step
    unit = "step" if logged_steps else "point"
    explanation.append(
        f"resume: {describe_detection(resumed)}; the resumed run starts at {unit} {p1} "
        f"(line {resumed.points[0].line_no})"
        + (
            f"; checkpoint step {rs} ({'given' if rs_source == 'flag' else 'from the restore line'})"
            if rs is not None
            else ""
        )
    )

    # Steps.
    if logged_steps:
        findings.extend(
            check_steps(
                resumed,
                post_segments,
                pre,
                rs,
                resume_window(rs, convention, gap_tol, axis, names_next, on_epoch) if rs is not None else None,
                interval,
                gap_tol,
                history_start,
            )
        )
        marker_findings, marker_notes = check_marker_steps(
            resumed,
            pre,
            last_save_before(sources, resumed.marker) if resumed.marker is not None else None,
            resume_step,
            gap_tol,
            interval,
            sec_per_step,
        )
        findings.extend(marker_findings)
        notes.extend(marker_notes)
        if rs is None and pre and p1 > pre[-1].step + gap_tol:
            last, first = pre[-1], resumed.points[0]
            needed = (p1 - last.step - interval) * sec_per_step if sec_per_step else None
            if needed is not None and last.wall is not None and first.wall is not None and (
                first.wall - last.wall < needed / LOST_LINES_TIME_FACTOR
            ):
                # Lost lines take the time the steps took; this jump came faster than
                # the steps could have run, even with the restart's downtime in it.
                findings.append(
                    Finding(
                        verdict=SKIPPED,
                        message=f"the step counter jumps from {last.step} to {p1} across the restart in "
                        f"{first.wall - last.wall:.0f} s; at the run's {sec_per_step:.3g} s/step those "
                        f"steps take {needed:.0f} s: they were never trained",
                        step=p1,
                        line_no=first.line_no,
                    )
                )
            else:
                notes.append(
                    f"the resumed run starts at step {p1}, past the last pre-failure step logged "
                    f"({last.step}): expected if the log lost its tail in the crash (buffered output); "
                    "pass --resume-step to check for skipped steps"
                )
    elif p1 <= 1 and pre and pre[-1].step > 1 + interval:
        findings.append(
            Finding(
                verdict=REPLAYED,
                message=f"the run restarted from the beginning (epoch restarted) after {len(pre)} "
                "logged points: no training state was restored",
                step=None,
                line_no=resumed.points[0].line_no,
            )
        )

    # NaN / Inf anywhere after the resume.
    for p in post:
        if not math.isfinite(p.loss):
            findings.append(
                Finding(
                    verdict=NAN,
                    message=f"loss is {fmt_num(p.loss)} at step {p.step} (line {p.line_no})",
                    step=p.step,
                    line_no=p.line_no,
                )
            )
            break

    # Losses.
    judged = post[: cfg.num_steps]
    self_based = False
    baseline_stats: BaselineStats | None = None
    threshold: ThresholdStats | None = None
    observed: ObservedStats | None = None
    rerun: RerunStats | None = None
    loss_decided = False
    finite_judged = [p for p in judged if math.isfinite(p.loss)]
    if finite_judged:
        last_judged = judged[-1].step
        finite_pre = [p for p in pre if math.isfinite(p.loss)]
        if len(finite_pre) < len(pre):
            notes.append(
                f"{len(pre) - len(finite_pre)} non-finite pre-failure loss(es) left out of the baseline"
            )
        window = [p for p in finite_pre if p.step <= last_judged][-cfg.window :]
        if len(window) < cfg.min_baseline_points:
            explanation.append(
                f"baseline: only {len(window)} finite pre-failure point(s) at or before step "
                f"{last_judged} (need {cfg.min_baseline_points} for a trend); self-baseline"
            )
            self_finding = self_baseline_shift(window, finite_judged, cfg)
            if window:
                note_codes.append(SELF_BASELINE)
                notes.append(
                    f"judged against the run's own level ({len(window)} pre-failure point(s)): only a "
                    "sustained rise is seen; low confidence"
                )
            if self_finding is not None:
                findings.append(self_finding)
                self_based = True
            elif window and final and len(finite_judged) >= cfg.min_judged_points:
                loss_decided = self_based = True
        else:
            (baseline_stats, threshold, observed, spike_finding, loss_decided) = judge_losses(
                window, finite_judged, len(judged), interval, cfg, final=final
            )
            explanation.extend(describe_losses(baseline_stats, threshold, observed, cfg, unit))
            if spike_finding is not None:
                findings.append(spike_finding)
            rerun, rerun_finding = compare_reruns(
                finite_pre, finite_judged, threshold.tolerance, cfg
            )
            if rerun is not None:
                explanation.append(describe_rerun(rerun))
            # A higher loss at re-run steps is the spike already reported; say it once.
            if rerun_finding is not None and not (
                spike_finding is not None and rerun is not None and rerun.median_diff > 0
            ):
                findings.append(rerun_finding)
    elif judged:
        explanation.append("no finite loss after the resume")

    # RB-7's other checks.
    checks: dict[str, Any] = {}
    for result in (
        check_tokens(pre, post, rs, checkpoint_tokens if checkpoint_tokens is not None else (
            resumed.marker.tokens if resumed.marker is not None else None), cfg),
        check_schedule(pre, post, cfg),
        check_throughput(pre, post, cfg),
        check_loss_scale_and_grad_norm(pre, post, cfg),
    ):
        findings.extend(result.findings)
        checks.update(result.checks)
        for code, text in result.notes:
            if code:
                note_codes.append(code)
            notes.append(text)

    verdict, decided = decide(
        findings, judged, loss_decided, baseline_stats is not None or self_based, cfg, final=final
    )
    confidence: str | None = None
    if decided:
        full = len(judged) >= cfg.num_steps
        few = len(judged) < cfg.medium_judged_points
        confidence = "low" if self_based or (few and verdict == CONTINUOUS) else "high" if full or verdict != CONTINUOUS else "medium"
    explanation.append(describe_decision(verdict, decided, findings, judged, cfg))
    return WatchReport(
        verdict=verdict,
        decided=decided,
        resume_step=rs,
        resume_step_source=rs_source,
        resume_detected_by=resumed.reason,
        resume_line=resumed.points[0].line_no,
        first_resumed_step=p1,
        step_kind=step_kind,
        log_interval=interval,
        rank=rank,
        baseline=baseline_stats,
        threshold=threshold,
        observed=observed,
        rerun=rerun,
        findings=tuple(sorted(findings, key=lambda f: VERDICTS.index(f.verdict))),
        explanation=tuple(explanation),
        notes=tuple(notes),
        num_points=num_log_points,
        num_baseline_points=num_baseline_points,
        num_segments=len(segments),
        note_codes=tuple(note_codes),
        confidence=confidence,
        checks=checks,
        step_axis=axis.name,
        epoch_len=axis.epoch_len,
        step_axis_composed=axis.composed,
        curve=loss_curve(pre, judged, observed, threshold, cfg),
    )
