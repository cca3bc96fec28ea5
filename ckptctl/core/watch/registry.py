"""The watch's checks, as a registry: each one a small function with a declared name and the
verdicts and note codes it may give; ``analyze`` runs them in this order and composes them.

Pure, stdlib only. A check reads the ``CheckContext`` (the log as read around the
resume) and returns a ``CheckResult``. Adding a check is one function plus one line in
``CHECKS``; a verdict it gives is added to ``model.VERDICTS`` (its precedence) and
``model.VERDICT_CLASS`` (good / bad / undecided: what ``recover`` does with it).

The order is the order of the report's notes and explanation lines; which verdict wins
when several checks find something is ``VERDICTS``' order, not this one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ckptctl.core.watch.checks import (
    check_loss_scale_and_grad_norm,
    check_schedule,
    check_throughput,
    check_tokens,
)
from ckptctl.core.watch.context import CheckContext, CheckResult
from ckptctl.core.watch.datapos import check_data_position
from ckptctl.core.watch.judge import check_losses
from ckptctl.core.watch.model import (
    DATA_POSITION_MISMATCH,
    DATA_RESTARTED,
    DATA_STREAM_RESET,
    DIVERGED,
    EARLIER_DATA_POSITION_MISMATCH,
    GRAD_NORM_SHIFT,
    LOSS_SCALE_RESTART,
    NAN,
    PARTIAL_RESTORE,
    REPLAYED,
    SCHEDULE_RESET,
    SELF_BASELINE,
    SKIPPED,
    SPIKE,
    THROUGHPUT_REGRESSION,
    TOKENS_MISMATCH,
    WEIGHTS_ONLY,
    Finding,
    fmt_num,
)
from ckptctl.core.watch.replay import check_replay
from ckptctl.core.watch.restored import check_restore_coverage
from ckptctl.core.watch.resume import (
    check_jump_across_restart,
    check_marker_steps,
    check_steps,
    interval_evidence,
    last_save_before,
    weights_only_marker,
)


@dataclass(frozen=True, slots=True)
class Check:
    """One registered check."""

    name: str
    """Stable name (the key its numbers use in the report's ``checks`` when it has any)."""
    run: Callable[[CheckContext], CheckResult]
    verdicts: tuple[str, ...] = ()
    """The verdicts its findings may carry."""
    note_codes: tuple[str, ...] = ()
    """The note codes it may give."""


def check_step_counter(ctx: CheckContext) -> CheckResult:
    """The resumed run starts where the checkpoint left off and only goes forward
    (``replayed-steps`` / ``skipped-steps``): the counter, the restore line's step, a jump
    across the restart; for a log without steps, a restart from the very beginning."""
    res = CheckResult()
    resumed, pre = ctx.resumed, ctx.pre
    if ctx.logged_steps:
        res.findings.extend(
            check_steps(
                resumed, ctx.post_segments, pre, ctx.rs, ctx.window, ctx.interval, ctx.gap_tol,
                ctx.history_start,
            )
        )
        last_save = last_save_before(ctx.sources, resumed.marker) if resumed.marker is not None else None
        findings, notes = check_marker_steps(
            resumed, pre, last_save, ctx.resume_step, ctx.gap_tol, ctx.interval, ctx.sec_per_step
        )
        res.findings.extend(findings)
        res.notes.extend((None, n) for n in notes)
        if ctx.rs is None:
            findings, notes = check_jump_across_restart(resumed, pre, ctx.interval, ctx.gap_tol, ctx.sec_per_step)
            res.findings.extend(findings)
            res.notes.extend((None, n) for n in notes)
        if any(f.verdict == SKIPPED for f in res.findings) and not (
            interval_evidence(pre) or interval_evidence(ctx.post)
        ):
            # No two points in a row anywhere: the logging interval is a guess, so a first point
            # far after the checkpoint's step may be a coarse logging cadence ("every 1000
            # updates"), not skipped steps. Never a verdict from one point.
            res.findings = [f for f in res.findings if f.verdict != SKIPPED]
            res.explanation.append(
                f"steps: the resumed run's first point is at {ctx.unit} {resumed.first_step}, but no two "
                "points show the logging interval: skipped steps are not judged"
            )
    elif resumed.first_step <= 1 and pre and pre[-1].step > 1 + ctx.interval:
        res.findings.append(
            Finding(
                verdict=REPLAYED,
                message=f"the run restarted from the beginning (epoch restarted) after {len(pre)} "
                "logged points: no training state was restored",
                step=None,
                line_no=resumed.points[0].line_no,
            )
        )
    return res


def check_weights_only(ctx: CheckContext) -> CheckResult:
    """A line between the last pre-failure point and the resumed run's first point saying the
    optimizer (or scheduler) state was not restored (note ``weights-only-restore``)."""
    res = CheckResult()
    if ctx.resumed.source != "log":
        return res
    pre_log = ctx.pre_segments[-1] if ctx.pre_segments and ctx.pre_segments[-1].source == "log" else None
    log_events = next(events for source, events in ctx.sources if source == "log")
    marker = weights_only_marker(
        log_events, pre_log.points[-1].line_no if pre_log is not None else 0, ctx.resumed.points[0].line_no
    )
    if marker is not None:
        res.notes.append(
            (
                WEIGHTS_ONLY,
                f"line {marker.line_no} says the optimizer (or scheduler) state was not restored "
                f"({marker.text[:120]!r}): a weights-only restore; the first steps may spike while "
                "the optimizer's moments build up again",
            )
        )
    return res


def check_non_finite(ctx: CheckContext) -> CheckResult:
    """NaN or Inf anywhere after the resume (``nan``)."""
    res = CheckResult()
    for p in ctx.post:
        if not math.isfinite(p.loss):
            res.findings.append(
                Finding(
                    verdict=NAN,
                    message=f"loss is {fmt_num(p.loss)} at step {p.step} (line {p.line_no})",
                    step=p.step,
                    line_no=p.line_no,
                )
            )
            break
    return res


def _tokens(ctx: CheckContext) -> CheckResult:
    return check_tokens(ctx.pre, ctx.post, ctx.rs, ctx.checkpoint_tokens, ctx.cfg)


def _schedule(ctx: CheckContext) -> CheckResult:
    return check_schedule(ctx.pre, ctx.post, ctx.cfg)


def _throughput(ctx: CheckContext) -> CheckResult:
    return check_throughput(ctx.pre, ctx.post, ctx.cfg)


def _loss_scale_and_grad_norm(ctx: CheckContext) -> CheckResult:
    return check_loss_scale_and_grad_norm(ctx.pre, ctx.post, ctx.cfg)


#: Every check, in the order the report lists what they say.
CHECKS: tuple[Check, ...] = (
    Check("weights_only", check_weights_only, note_codes=(WEIGHTS_ONLY,)),
    Check("steps", check_step_counter, verdicts=(REPLAYED, SKIPPED)),
    Check("nan", check_non_finite, verdicts=(NAN,)),
    Check("loss", check_losses, verdicts=(SPIKE, DIVERGED), note_codes=(SELF_BASELINE,)),
    Check("tokens", _tokens, verdicts=(TOKENS_MISMATCH,)),
    Check("schedule", _schedule, verdicts=(SCHEDULE_RESET,)),
    Check("throughput", _throughput, note_codes=(THROUGHPUT_REGRESSION,)),
    Check("loss_scale", _loss_scale_and_grad_norm, note_codes=(LOSS_SCALE_RESTART, GRAD_NORM_SHIFT)),
    Check("replay", check_replay, verdicts=(DATA_STREAM_RESET,), note_codes=(DATA_RESTARTED,)),
    Check(
        "data_position",
        check_data_position,
        verdicts=(DATA_POSITION_MISMATCH,),
        note_codes=(EARLIER_DATA_POSITION_MISMATCH, DATA_RESTARTED),
    ),
    Check("restore_coverage", check_restore_coverage, note_codes=(PARTIAL_RESTORE,)),
)


def run_checks(ctx: CheckContext, checks: tuple[Check, ...] = CHECKS) -> list[tuple[Check, CheckResult]]:
    """Every check on the context, in order; a finding or note code a check did not declare
    is a programming error (the registry is the list of what each check can say)."""
    out: list[tuple[Check, CheckResult]] = []
    for check in checks:
        result = check.run(ctx)
        for f in result.findings:
            if f.verdict not in check.verdicts:
                raise ValueError(f"check {check.name!r} gave the undeclared verdict {f.verdict!r}")
        for code, _ in result.notes:
            if code is not None and code not in check.note_codes:
                raise ValueError(f"check {check.name!r} gave the undeclared note code {code!r}")
        out.append((check, result))
    return out
