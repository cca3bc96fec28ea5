"""Judging the losses after a resume against the pre-failure trajectory, and the words for it.

Pure, stdlib only. See ``ckptctl.core.watch.analyze`` ("What is judged").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ckptctl.core.watch.checks import self_baseline_shift
from ckptctl.core.watch.context import CheckContext, CheckResult, LossJudgement
from ckptctl.core.watch.logkeys import LR
from ckptctl.core.watch.model import (
    CONTINUOUS,
    CURVE_MAX_BEFORE,
    DIVERGED,
    INSUFFICIENT,
    PROBLEMS,
    SELF_BASELINE,
    SPIKE,
    BaselineStats,
    CurvePoint,
    Finding,
    JudgedPoint,
    LossCurve,
    ObservedStats,
    RerunStats,
    Segment,
    ThresholdStats,
    TracePoint,
    WatchConfig,
    fmt_num,
    signed,
)
from ckptctl.core.watch.stats import (
    curvature_free_residuals,
    fit_trend,
    local_level,
    longest_run,
    robust_spread,
)


def check_losses(ctx: CheckContext) -> CheckResult:
    """The loss check: the first N losses after the resume against the pre-failure trajectory
    (or the run's own level when it has too few points for a trend), and the re-run steps."""
    res = CheckResult()
    cfg, judged = ctx.cfg, ctx.judged
    finite_judged = [p for p in judged if math.isfinite(p.loss)]
    if not finite_judged:
        if judged:
            res.explanation.append("no finite loss after the resume")
        res.loss = LossJudgement()
        return res
    last_judged = judged[-1].step
    finite_pre = [p for p in ctx.pre if math.isfinite(p.loss)]
    if len(finite_pre) < len(ctx.pre):
        res.notes.append(
            (None, f"{len(ctx.pre) - len(finite_pre)} non-finite pre-failure loss(es) left out of the baseline")
        )
    window = [p for p in finite_pre if p.step <= last_judged][-cfg.window :]
    if len(window) < cfg.min_baseline_points:
        res.explanation.append(
            f"baseline: only {len(window)} finite pre-failure point(s) at or before step "
            f"{last_judged} (need {cfg.min_baseline_points} for a trend); self-baseline"
        )
        self_finding = self_baseline_shift(window, finite_judged, cfg)
        if window:
            res.notes.append(
                (
                    SELF_BASELINE,
                    f"judged against the run's own level ({len(window)} pre-failure point(s)): only a "
                    "sustained rise is seen; low confidence",
                )
            )
        decided = self_based = False
        if self_finding is not None:
            res.findings.append(self_finding)
            self_based = True
        elif window and ctx.final and len(finite_judged) >= cfg.min_judged_points:
            decided = self_based = True
        res.loss = LossJudgement(decided=decided, self_based=self_based)
        return res
    baseline, threshold, observed, spike_finding, decided = judge_losses(
        window, finite_judged, len(judged), ctx.interval, cfg, final=ctx.final
    )
    res.explanation.extend(describe_losses(baseline, threshold, observed, cfg, ctx.unit))
    if spike_finding is not None:
        res.findings.append(spike_finding)
    rerun, rerun_finding = compare_reruns(finite_pre, finite_judged, threshold.tolerance, cfg)
    if rerun is not None:
        res.explanation.append(describe_rerun(rerun))
    # A higher loss at re-run steps is the spike already reported; say it once.
    if rerun_finding is not None and not (
        spike_finding is not None and rerun is not None and rerun.median_diff > 0
    ):
        res.findings.append(rerun_finding)
    res.loss = LossJudgement(
        baseline=baseline, threshold=threshold, observed=observed, rerun=rerun, decided=decided
    )
    return res


def judge_losses(
    window: Sequence[TracePoint],
    judged: Sequence[TracePoint],
    num_judged_total: int,
    interval: int,
    cfg: WatchConfig,
    *,
    final: bool = False,
) -> tuple[BaselineStats, ThresholdStats, ObservedStats, Finding | None, bool]:
    xs = [p.step for p in window]
    ys = [p.loss for p in window]
    trend = fit_trend(xs, ys)
    residuals = curvature_free_residuals(xs, ys)
    if residuals is None:
        residuals = [y - trend.at(x) for x, y in zip(xs, ys, strict=True)]
    spread = robust_spread(residuals)

    def expected(step: int) -> float:
        return max(trend.upper(step), local_level(xs, ys, step, cfg.local_points))

    level = expected(judged[0].step)
    rel_floor = cfg.min_rel_tol * abs(level)
    tolerance, basis = _tolerance(cfg.k * spread, rel_floor, cfg.min_abs_tol)
    median_tolerance, median_basis = _tolerance(cfg.k_median * spread, rel_floor, cfg.min_abs_tol)
    sources = {p.source for p in window}
    baseline = BaselineStats(
        num_points=len(window),
        first_step=xs[0],
        last_step=xs[-1],
        level=level,
        line_level=trend.upper(judged[0].step),
        local_level=local_level(xs, ys, judged[0].step, cfg.local_points),
        slope_per_step=trend.slope_per_step,
        spread=spread,
        log_interval=interval,
        source="both" if len(sources) > 1 else sources.pop(),
    )
    threshold = ThresholdStats(
        value=level + tolerance,
        tolerance=tolerance,
        basis=basis,
        median_value=level + median_tolerance,
        median_tolerance=median_tolerance,
        median_basis=median_basis,
        k=cfg.k,
        k_median=cfg.k_median,
        spread_term=cfg.k * spread,
        relative_floor=rel_floor,
        persistence=cfg.persistence,
        num_steps=cfg.num_steps,
    )
    judged_points = []
    for p in judged:
        expected_loss = expected(p.step)
        excess = p.loss - expected_loss
        judged_points.append(
            JudgedPoint(
                step=p.step,
                loss=p.loss,
                expected=expected_loss,
                excess=excess,
                above=excess > tolerance,
                line_no=p.line_no,
            )
        )
    excesses = [j.excess for j in judged_points]
    worst = max(judged_points, key=lambda j: j.loss)
    observed = ObservedStats(
        points=tuple(judged_points),
        median_loss=statistics.median(j.loss for j in judged_points),
        median_excess=statistics.median(excesses),
        max_loss=worst.loss,
        max_loss_step=worst.step,
        num_above=sum(j.above for j in judged_points),
        longest_run_above=longest_run(j.above for j in judged_points),
    )
    complete = num_judged_total >= cfg.num_steps or (final and num_judged_total >= cfg.min_judged_points)
    finding: Finding | None = None
    if observed.longest_run_above >= cfg.persistence:
        run_start = _run_start(judged_points, cfg.persistence)
        finding = Finding(
            verdict=SPIKE,
            message=f"{observed.longest_run_above} consecutive losses above the threshold from step "
            f"{run_start.step} (loss {fmt_num(run_start.loss)} vs expected {fmt_num(run_start.expected)}, "
            f"tolerance {fmt_num(tolerance)}; persistence {cfg.persistence})",
            step=run_start.step,
            line_no=run_start.line_no,
        )
    elif complete and observed.median_excess > median_tolerance:
        finding = Finding(
            verdict=SPIKE,
            message=f"the median of the first {len(judged_points)} losses is {fmt_num(observed.median_loss)}, "
            f"{fmt_num(observed.median_excess)} above the expected level (median tolerance "
            f"{fmt_num(median_tolerance)})",
            step=judged_points[0].step,
            line_no=judged_points[0].line_no,
        )
    decided = finding is not None or complete
    return baseline, threshold, observed, finding, decided


def _tolerance(spread_term: float, rel_floor: float, abs_floor: float) -> tuple[float, str]:
    """The largest of the three terms, and which one it was."""
    if spread_term >= rel_floor and spread_term >= abs_floor:
        return spread_term, "k*spread"
    if rel_floor >= abs_floor:
        return rel_floor, "min-rel-tol"
    return abs_floor, "min-abs-tol"


def _run_start(points: Sequence[JudgedPoint], length: int) -> JudgedPoint:
    run = 0
    for i, p in enumerate(points):
        run = run + 1 if p.above else 0
        if run >= length:
            return points[i - length + 1]
    return points[0]


def compare_reruns(
    pre: Sequence[TracePoint], judged: Sequence[TracePoint], tolerance: float, cfg: WatchConfig
) -> tuple[RerunStats | None, Finding | None]:
    before = {p.step: p.loss for p in pre}
    pairs = [(p, before[p.step]) for p in judged if p.step in before]
    if not pairs:
        return None, None
    diffs = [p.loss - b for p, b in pairs]
    identical = [
        abs(d) <= cfg.identical_rel_tol * max(1.0, abs(b))
        for d, (_, b) in zip(diffs, pairs, strict=True)
    ]
    stats = RerunStats(
        num_compared=len(pairs),
        num_identical=sum(identical),
        median_diff=statistics.median(diffs),
        max_abs_diff=max(abs(d) for d in diffs),
        first_step=pairs[0][0].step,
        last_step=pairs[-1][0].step,
    )
    if cfg.expect_identical and not all(identical):
        first_bad = next(p for (p, _), same in zip(pairs, identical, strict=True) if not same)
        return stats, Finding(
            verdict=DIVERGED,
            message=f"{len(pairs) - stats.num_identical} of {len(pairs)} re-run steps differ from the "
            f"pre-failure losses (first at step {first_bad.step}); a deterministic resume reproduces them",
            step=first_bad.step,
            line_no=first_bad.line_no,
        )
    if len(pairs) >= cfg.min_rerun_points and abs(stats.median_diff) > tolerance:
        direction = "lower" if stats.median_diff < 0 else "higher"
        return stats, Finding(
            verdict=DIVERGED,
            message=f"at the {len(pairs)} steps run both before the failure and after the resume, the "
            f"loss is {fmt_num(abs(stats.median_diff))} {direction} (median) than before - beyond the "
            f"tolerance {fmt_num(tolerance)}"
            + (
                "; a drop like this is what replayed (already seen) data looks like"
                if direction == "lower"
                else ""
            ),
            step=pairs[0][0].step,
            line_no=pairs[0][0].line_no,
        )
    return stats, None


def decide(
    findings: Sequence[Finding],
    judged: Sequence[TracePoint],
    loss_decided: bool,
    has_baseline: bool,
    cfg: WatchConfig,
    *,
    final: bool = False,
) -> tuple[str, bool]:
    """The verdict by precedence, and whether more lines could change it.

    ``final`` (the whole log was read): fewer than N points, but at least
    ``min_judged_points``, decide (the adaptive window).
    """
    enough = len(judged) >= cfg.num_steps or (final and len(judged) >= cfg.min_judged_points)
    for verdict in PROBLEMS:
        if any(f.verdict == verdict for f in findings):
            # A problem seen cannot be unseen; a drop needs the full N points first.
            if verdict == DIVERGED and not enough and not cfg.expect_identical:
                return verdict, False
            return verdict, True
    if has_baseline and loss_decided and enough:
        return CONTINUOUS, True
    return INSUFFICIENT, False


def loss_curve(
    pre: Sequence[TracePoint],
    judged: Sequence[TracePoint],
    observed: ObservedStats | None,
    threshold: ThresholdStats | None,
    cfg: WatchConfig,
) -> LossCurve:
    """The points a picture of the verdict needs, as judged (``LossCurve``)."""

    def point(p: TracePoint) -> CurvePoint:
        return CurvePoint(step=p.step, loss=p.loss, lr=p.metrics.get(LR))

    expected: tuple[tuple[int, float, float], ...] = ()
    if observed is not None and threshold is not None:
        expected = tuple((j.step, j.expected, j.expected + threshold.tolerance) for j in observed.points)
    keep = min(cfg.window, CURVE_MAX_BEFORE)
    return LossCurve(
        before=tuple(point(p) for p in pre[-keep:]),
        after=tuple(point(p) for p in judged),
        expected=expected,
    )


# -- explanation -------------------------------------------------------------------------


def describe_detection(seg: Segment) -> str:
    if seg.reason in ("log-marker", "start-up-lines", "start") and seg.marker is not None:
        text = seg.marker.text if len(seg.marker.text) <= 120 else seg.marker.text[:117] + "..."
        if seg.reason == "start":
            return f"the log opens with a restore line at line {seg.marker.line_no} ({text!r}): one attempt, no history"
        if seg.marker.kind == "restart":
            return f"the run's start-up lines printed again at line {seg.marker.line_no} ({text!r}), no restore line"
        return f"restore line at line {seg.marker.line_no} ({text!r})"
    return {
        "step-counter-restart": "the step counter restarts",
        "step-gap": "the step counter jumps forward",
        "baseline-file": "the log follows the --baseline file",
    }.get(seg.reason, seg.reason)


def describe_losses(
    b: BaselineStats, t: ThresholdStats, o: ObservedStats, cfg: WatchConfig, unit: str
) -> list[str]:
    source = {
        "log": "this log",
        "baseline": "the --baseline file",
        "both": "the baseline file and this log",
    }[b.source]
    return [
        f"baseline: {b.num_points} pre-failure points, {unit}s {b.first_step}..{b.last_step} from "
        f"{source}; expected level {fmt_num(b.level)} at {unit} {o.points[0].step} (the larger of the "
        f"robust line {fmt_num(b.line_level)}, slope {signed(b.slope_per_step)}/{unit}, and a local line "
        f"through the {cfg.local_points} nearest points {fmt_num(b.local_level)}); spread (1.4826 x MAD) "
        f"{fmt_num(b.spread)}"
        + (f", logged every {b.log_interval} step(s)" if unit == "step" else ""),
        f"threshold: a point counts above level + {fmt_num(t.tolerance)} = {fmt_num(t.value)} "
        f"({_basis(t.basis, cfg.k, b.spread, cfg)}), {t.persistence} in a row make a spike; "
        f"the median of the first {t.num_steps} must stay under level + {fmt_num(t.median_tolerance)} = "
        f"{fmt_num(t.median_value)} ({_basis(t.median_basis, cfg.k_median, b.spread, cfg)})",
        f"observed: {o.num_points} point(s), {unit}s {o.points[0].step}..{o.points[-1].step}: median "
        f"{fmt_num(o.median_loss)} ({signed(o.median_excess)} vs expected), max {fmt_num(o.max_loss)} at "
        f"{unit} {o.max_loss_step}, {o.num_above} above the point threshold, longest run {o.longest_run_above}",
    ]


def _basis(basis: str, k: float, spread: float, cfg: WatchConfig) -> str:
    if basis == "k*spread":
        return f"{fmt_num(k)} x spread"
    if basis == "min-rel-tol":
        return f"the {fmt_num(cfg.min_rel_tol * 100)}% floor; {fmt_num(k)} x spread = {fmt_num(k * spread)}"
    return f"the absolute floor {fmt_num(cfg.min_abs_tol)}"


def describe_rerun(r: RerunStats) -> str:
    return (
        f"re-run steps: {r.num_compared} step(s) ({r.first_step}..{r.last_step}) were also logged before "
        f"the failure: {r.num_identical} identical, median difference {signed(r.median_diff)}, "
        f"largest {fmt_num(r.max_abs_diff)}"
    )


def describe_decision(
    verdict: str,
    decided: bool,
    findings: Sequence[Finding],
    judged: Sequence[TracePoint],
    cfg: WatchConfig,
) -> str:
    if verdict == CONTINUOUS:
        return f"decision: continuous - the first {len(judged)} losses after the resume stay within the threshold"
    if verdict == INSUFFICIENT:
        return (
            f"decision: insufficient-data - {len(judged)} of {cfg.num_steps} points after the resume"
            + ("" if judged else " (none yet)")
        )
    top = next(f for f in findings if f.verdict == verdict)
    return f"decision: {verdict} - {top.message}" + ("" if decided else " (provisional)")
