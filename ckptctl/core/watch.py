"""Loss continuity across a resume: find the resume in a log, judge the first steps after it.

Pure: functions on parsed events (``ckptctl.core.losslog``), frozen dataclasses
out. No I/O, no clock. ``analyze`` is the whole decision; ``WatchSession`` feeds
it incrementally for a live log.

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

Precedence when several hold: nan > replayed-steps > skipped-steps > spike >
diverged; ``continuous`` only with N judged points and nothing found;
otherwise ``insufficient-data``.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptctl.core.losslog import AUTO, LogEvent, LossLogParser, LossPoint, ResumeMarker

CONTINUOUS = "continuous"
SPIKE = "spike"
NAN = "nan"
REPLAYED = "replayed-steps"
SKIPPED = "skipped-steps"
DIVERGED = "diverged"
INSUFFICIENT = "insufficient-data"
#: Every verdict, most severe first (the order of precedence).
VERDICTS: tuple[str, ...] = (NAN, REPLAYED, SKIPPED, SPIKE, DIVERGED, CONTINUOUS, INSUFFICIENT)
_PROBLEMS: tuple[str, ...] = (NAN, REPLAYED, SKIPPED, SPIKE, DIVERGED)

#: 1 / Phi^-1(3/4): turns a median absolute deviation into a Gaussian standard deviation.
MAD_TO_SIGMA = 1.4826


class WatchConfigError(ValueError):
    """A ``WatchConfig`` field is out of range; the message names the field."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WatchConfig:
    """Thresholds of the loss-continuity check (CLI flags in parentheses)."""

    num_steps: int = 20
    """N: logged points after the resume that are judged (``--steps``)."""
    window: int = 100
    """W: pre-failure points the baseline trend and spread are fitted on (``--window``)."""
    k: float = 4.0
    """Tolerance of a single point, in robust standard deviations of the baseline
    residuals, for the persistence rule (``--k``)."""
    k_median: float = 2.5
    """Tolerance of the median of the first N points, in the same units (``--k-median``).
    Lower than ``k``: the median of N points moves far less than one point does."""
    min_rel_tol: float = 0.02
    """Floor of the tolerance as a fraction of the baseline level, so a smooth curve
    does not alarm on tiny deviations (``--min-rel-tol``)."""
    min_abs_tol: float = 1e-6
    """Absolute floor of the tolerance (a loss near zero with no noise)."""
    persistence: int = 3
    """Consecutive judged points above the threshold that make a spike (``--persistence``)."""
    local_points: int = 9
    """Pre-failure points nearest each judged step through which a local line gives a
    second expectation next to the window's line, the larger one counting: a curve
    that bends inside the window (a steep early descent levelling off) then does not
    read as a spike."""
    min_baseline_points: int = 10
    """Fewer finite pre-failure points than this: no loss verdict (insufficient-data)."""
    gap_tolerance_intervals: float = 2.0
    """A step jump up to this many logging intervals is a lost log line, not skipped steps."""
    min_rerun_points: int = 5
    """Re-run steps needed before their comparison with the pre-failure losses counts."""
    expect_identical: bool = False
    """The training is deterministic: any re-run step whose loss differs is ``diverged``
    (``--expect-identical``)."""
    identical_rel_tol: float = 1e-6
    """Relative difference under which two logged losses count as identical (print rounding)."""

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            ("num_steps", self.num_steps >= 1, "at least 1"),
            ("window", self.window >= 3, "at least 3"),
            ("k", math.isfinite(self.k) and self.k > 0, "a positive number"),
            ("k_median", math.isfinite(self.k_median) and self.k_median > 0, "a positive number"),
            ("min_rel_tol", math.isfinite(self.min_rel_tol) and self.min_rel_tol >= 0, ">= 0"),
            ("min_abs_tol", math.isfinite(self.min_abs_tol) and self.min_abs_tol >= 0, ">= 0"),
            ("persistence", 1 <= self.persistence <= self.num_steps, "between 1 and num_steps"),
            ("local_points", 1 <= self.local_points <= self.window, "between 1 and window"),
            (
                "min_baseline_points",
                3 <= self.min_baseline_points <= self.window,
                "between 3 and window",
            ),
            ("gap_tolerance_intervals", self.gap_tolerance_intervals >= 1, "at least 1"),
            ("min_rerun_points", self.min_rerun_points >= 1, "at least 1"),
            ("identical_rel_tol", self.identical_rel_tol >= 0, ">= 0"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise WatchConfigError(f"{name} must be {want}, got {getattr(self, name)!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "num_steps": self.num_steps,
            "window": self.window,
            "k": self.k,
            "k_median": self.k_median,
            "min_rel_tol": self.min_rel_tol,
            "min_abs_tol": self.min_abs_tol,
            "persistence": self.persistence,
            "local_points": self.local_points,
            "min_baseline_points": self.min_baseline_points,
            "gap_tolerance_intervals": self.gap_tolerance_intervals,
            "min_rerun_points": self.min_rerun_points,
            "expect_identical": self.expect_identical,
        }


# -- plain data in and out ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TracePoint:
    """A point of the selected rank with its (possibly assigned) step."""

    step: int
    loss: float
    line_no: int
    source: str
    """``"log"`` or ``"baseline"`` (the ``--baseline`` file)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One uninterrupted run in the log: steps only go forward inside it."""

    points: tuple[TracePoint, ...]
    reason: str
    """Why it starts: ``start``, ``step-counter-restart``, ``log-marker``, ``step-gap``, ``baseline-file``."""
    marker: ResumeMarker | None
    source: str

    @property
    def first_step(self) -> int:
        return self.points[0].step

    @property
    def last_step(self) -> int:
        return self.points[-1].step


@dataclass(frozen=True, kw_only=True, slots=True)
class Trend:
    """A robust straight line through the baseline window, held flat past its end."""

    slope_per_step: float
    level_at_last: float
    """The line's value at ``last_step``."""
    first_step: int
    last_step: int

    def at(self, step: float) -> float:
        return self.level_at_last + self.slope_per_step * (step - self.last_step)

    def upper(self, step: int) -> float:
        """The larger of the line and the line held flat at the window's ends."""
        held = self.at(min(max(step, self.first_step), self.last_step))
        return max(self.at(step), held)


@dataclass(frozen=True, kw_only=True, slots=True)
class BaselineStats:
    """The pre-failure trajectory the resumed losses are judged against."""

    num_points: int
    first_step: int
    last_step: int
    level: float
    """Expected loss at the first judged step: the larger of ``line_level`` and ``local_level``."""
    line_level: float
    """The robust line at the first judged step (held flat past the window's end)."""
    local_level: float
    """Local robust line through the pre-failure points nearest the first judged step."""
    slope_per_step: float
    spread: float
    """Robust standard deviation of the window's residuals (around a resistant parabola):
    1.4826 * MAD."""
    log_interval: int
    """Steps between logged points (median)."""
    source: str
    """``"log"``, ``"baseline"`` (the ``--baseline`` file) or ``"both"``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "num_points": self.num_points,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "level": _jf(self.level),
            "line_level": _jf(self.line_level),
            "local_level": _jf(self.local_level),
            "slope_per_step": _jf(self.slope_per_step),
            "spread": _jf(self.spread),
            "log_interval": self.log_interval,
            "source": self.source,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ThresholdStats:
    """The spike thresholds and how they were chosen.

    Two tolerances above the expected level: one for single points (the
    persistence rule) and a smaller one for the median of the first N points
    (the level-shift rule). Each is the largest of its k x spread, the relative
    floor and the absolute floor.
    """

    value: float
    """Loss above which a single point counts, at the first judged step: level + tolerance."""
    tolerance: float
    """Single-point tolerance: max(k * spread, relative_floor, min_abs_tol)."""
    basis: str
    """Which term set ``tolerance``: ``"k*spread"``, ``"min-rel-tol"`` or ``"min-abs-tol"``."""
    median_value: float
    """Level the median of the first N losses must not exceed: level + median_tolerance."""
    median_tolerance: float
    """max(k_median * spread, relative_floor, min_abs_tol)."""
    median_basis: str
    k: float
    k_median: float
    spread_term: float
    """k * spread."""
    relative_floor: float
    """min_rel_tol * |level|."""
    persistence: int
    num_steps: int

    def to_json(self) -> dict[str, Any]:
        return {
            "value": _jf(self.value),
            "tolerance": _jf(self.tolerance),
            "basis": self.basis,
            "median_value": _jf(self.median_value),
            "median_tolerance": _jf(self.median_tolerance),
            "median_basis": self.median_basis,
            "k": self.k,
            "k_median": self.k_median,
            "spread_term": _jf(self.spread_term),
            "relative_floor": _jf(self.relative_floor),
            "persistence": self.persistence,
            "num_steps": self.num_steps,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class JudgedPoint:
    step: int
    loss: float
    expected: float
    excess: float
    above: bool
    line_no: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ObservedStats:
    """The first judged points after the resume."""

    points: tuple[JudgedPoint, ...]
    median_loss: float
    median_excess: float
    max_loss: float
    max_loss_step: int
    num_above: int
    longest_run_above: int

    @property
    def num_points(self) -> int:
        return len(self.points)

    def to_json(self) -> dict[str, Any]:
        return {
            "num_points": self.num_points,
            "first_step": self.points[0].step if self.points else None,
            "last_step": self.points[-1].step if self.points else None,
            "median_loss": _jf(self.median_loss),
            "median_excess": _jf(self.median_excess),
            "max_loss": _jf(self.max_loss),
            "max_loss_step": self.max_loss_step,
            "num_above_threshold": self.num_above,
            "longest_run_above_threshold": self.longest_run_above,
            "losses": [[p.step, _jf(p.loss)] for p in self.points],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class RerunStats:
    """Steps logged both before the failure and after the resume."""

    num_compared: int
    num_identical: int
    median_diff: float
    """Median of (after - before) at the same step."""
    max_abs_diff: float
    first_step: int
    last_step: int

    def to_json(self) -> dict[str, Any]:
        return {
            "num_compared": self.num_compared,
            "num_identical": self.num_identical,
            "median_diff": _jf(self.median_diff),
            "max_abs_diff": _jf(self.max_abs_diff),
            "first_step": self.first_step,
            "last_step": self.last_step,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One problem found, with its evidence."""

    verdict: str
    message: str
    step: int | None = None
    line_no: int | None = None
    source: str = "log"

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "message": self.message,
            "step": self.step,
            "line": self.line_no,
            "source": self.source,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class WatchReport:
    """The decision and every number behind it."""

    verdict: str
    decided: bool
    """True when more log lines cannot change the verdict (a problem found, or N points judged)."""
    resume_step: int | None
    resume_step_source: str | None
    """``"flag"`` (given by the caller) or ``"log-marker"`` (the trainer's restore line)."""
    resume_detected_by: str | None
    resume_line: int | None
    first_resumed_step: int | None
    step_kind: str
    log_interval: int | None
    rank: int | None
    baseline: BaselineStats | None
    threshold: ThresholdStats | None
    observed: ObservedStats | None
    rerun: RerunStats | None
    findings: tuple[Finding, ...]
    explanation: tuple[str, ...]
    notes: tuple[str, ...]
    num_points: int
    """Points of the selected rank read from the log (after de-duplication)."""
    num_baseline_points: int
    """Points of the selected rank read from the separate baseline (0 without one)."""
    num_segments: int


# -- small statistics --------------------------------------------------------------------


def _jf(x: float) -> float | str:
    """JSON-safe float: NaN/Inf become the strings "nan", "inf", "-inf"."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _fmt(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4g}"


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "") + _fmt(x)


def fit_trend(steps: Sequence[int], losses: Sequence[float]) -> Trend:
    """Robust line: median of slopes between points half the window apart, median intercept."""
    n = len(steps)
    if n == 0:
        raise ValueError("fit_trend needs at least one point")
    half = max(1, n // 2)
    slopes = [
        (losses[i + half] - losses[i]) / (steps[i + half] - steps[i])
        for i in range(n - half)
        if steps[i + half] != steps[i]
    ]
    slope = statistics.median(slopes) if slopes else 0.0
    last = steps[-1]
    level = statistics.median(y - slope * (x - last) for x, y in zip(steps, losses, strict=True))
    return Trend(slope_per_step=slope, level_at_last=level, first_step=steps[0], last_step=last)


def local_level(steps: Sequence[int], losses: Sequence[float], step: int, num_points: int) -> float:
    """The loss near ``step`` from the ``num_points`` nearest points alone.

    A Theil-Sen line through those points (median of their pairwise slopes), read
    at ``step`` clamped to their range: it follows a bend that a line through the
    whole window misses, without the lag of a plain median on a falling curve, and
    it is held flat past the last point rather than extrapolated.
    """
    i = bisect.bisect_left(steps, step)
    lo = max(0, min(i - num_points // 2, len(steps) - num_points))
    xs, ys = steps[lo : lo + num_points], losses[lo : lo + num_points]
    slopes = [
        (ys[b] - ys[a]) / (xs[b] - xs[a])
        for a in range(len(xs))
        for b in range(a + 1, len(xs))
        if xs[b] != xs[a]
    ]
    slope = statistics.median(slopes) if slopes else 0.0
    at = min(max(step, xs[0]), xs[-1])
    return statistics.median(y + slope * (at - x) for x, y in zip(xs, ys, strict=True))


def curvature_free_residuals(steps: Sequence[int], losses: Sequence[float]) -> list[float] | None:
    """Residuals around a resistant parabola through the medians of the window's thirds.

    Early in training the window is strongly curved: residuals around a straight
    line then measure the curvature, not the noise, and inflate the tolerance.
    None when the window is too short (< 9 points) for three groups.
    """
    n = len(steps)
    if n < 9:
        return None
    third = n // 3
    groups = ((0, third), (third, n - third), (n - third, n))
    px = [statistics.median(steps[a:b]) for a, b in groups]
    py = [statistics.median(losses[a:b]) for a, b in groups]
    if len(set(px)) < 3:
        return None

    def parabola(x: float) -> float:
        (x0, x1, x2), (y0, y1, y2) = px, py
        return (
            y0 * (x - x1) * (x - x2) / ((x0 - x1) * (x0 - x2))
            + y1 * (x - x0) * (x - x2) / ((x1 - x0) * (x1 - x2))
            + y2 * (x - x0) * (x - x1) / ((x2 - x0) * (x2 - x1))
        )

    return [y - parabola(x) for x, y in zip(steps, losses, strict=True)]


def robust_spread(residuals: Sequence[float]) -> float:
    """1.4826 * median absolute deviation around the median."""
    if not residuals:
        return 0.0
    center = statistics.median(residuals)
    return MAD_TO_SIGMA * statistics.median(abs(r - center) for r in residuals)


def longest_run(flags: Iterable[bool]) -> int:
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def _quantile(sorted_values: Sequence[int], q: float) -> float:
    if not sorted_values:
        return 0.0
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


# -- from events to segments -------------------------------------------------------------


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
class _Item:
    """A marker or a point of the selected rank, in reading order, with its source."""

    source: str
    point: TracePoint | None
    marker: ResumeMarker | None
    redraw: bool = False


def _assign_steps(
    sources: Sequence[tuple[str, Sequence[LogEvent]]],
) -> tuple[list[_Item], str, int | None]:
    """Keep one rank, give every point a step; return items, step kind, selected rank of the log."""
    items: list[_Item] = []
    log_rank: int | None = None
    has_stepless = has_epoch = False
    # Step-less formats: number the points in order; after a restart (epoch goes
    # back, a restore line, or a separate baseline file) continue from the last
    # point logged at an earlier epoch, so equal epochs line up with equal positions.
    numbered: list[tuple[int, float | None]] = []
    restart_pending = False
    for source, events in sources:
        rank = select_rank(e for e in events if isinstance(e, LossPoint))
        if source == "log":
            log_rank = rank
        restart_pending = bool(numbered)
        for event in events:
            if isinstance(event, ResumeMarker):
                items.append(_Item(source, None, event))
                restart_pending = bool(numbered)
                continue
            if event.rank != rank:
                continue
            step = event.step
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
            point = TracePoint(step, event.loss, event.line_no, source)
            items.append(_Item(source, point, None, event.redraws_previous))
    step_kind = "logged" if not has_stepless else "epoch-aligned" if has_epoch else "ordinal"
    return items, step_kind, log_rank


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
    typical_max = max(float(interval), _quantile(diffs, 0.9))
    return interval, gap_tolerance_intervals * typical_max


def segment(items: Sequence[_Item], gap_tolerance: float) -> list[Segment]:
    """Split the points into runs (see the module docstring, step 3)."""
    segments: list[Segment] = []
    current: list[TracePoint] = []
    reason = "start"
    marker: ResumeMarker | None = None
    source = "log"
    pending_marker: ResumeMarker | None = None
    for item in items:
        if item.marker is not None:
            pending_marker = item.marker
            continue
        p = item.point
        assert p is not None
        if not current:
            reason, marker, source = "start", pending_marker, p.source
        else:
            prev = current[-1]
            new_reason: str | None = None
            if pending_marker is not None:
                new_reason = "log-marker"
            elif p.source != prev.source:
                new_reason = "baseline-file"
            elif p.step == prev.step and (item.redraw or _same(p.loss, prev.loss)):
                current[-1] = p  # the same step drawn again: keep the latest value
                continue
            elif p.step <= prev.step:
                new_reason = "step-counter-restart"
            elif p.step - prev.step > gap_tolerance:
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


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def stitch(segments: Sequence[Segment]) -> list[TracePoint]:
    """The pre-failure trajectory: for each step the value of the latest run that logged it."""
    by_step: dict[int, TracePoint] = {}
    for seg in segments:
        for p in seg.points:
            by_step[p.step] = p
    return [by_step[s] for s in sorted(by_step)]


# -- the decision ------------------------------------------------------------------------


def analyze(
    log_events: Sequence[LogEvent],
    *,
    baseline_events: Sequence[LogEvent] | None = None,
    resume_step: int | None = None,
    config: WatchConfig | None = None,
) -> WatchReport:
    """Judge the latest resume in ``log_events`` (see the module docstring)."""
    cfg = config or WatchConfig()
    sources: list[tuple[str, Sequence[LogEvent]]] = []
    if baseline_events is not None:
        sources.append(("baseline", baseline_events))
    sources.append(("log", log_events))
    items, step_kind, rank = _assign_steps(sources)
    points = [it.point for it in items if it.point is not None]
    interval, gap_tol = log_interval_and_gap(points, cfg.gap_tolerance_intervals)
    segments = segment(items, gap_tol)
    notes: list[str] = []
    findings: list[Finding] = []
    explanation: list[str] = []
    num_log_points = sum(1 for p in points if p.source == "log")
    num_baseline_points = len(points) - num_log_points
    logged_steps = step_kind == "logged"

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
    candidates = [i for i, s in enumerate(segments) if i > 0 and s.source == "log"]
    first_step_ever = segments[0].first_step if segments else None
    convention = _step_convention(first_step_ever, interval)
    resume_index: int | None = None
    rs, rs_source = (resume_step, "flag") if resume_step is not None else (None, None)
    if candidates:
        if rs is not None and logged_steps:
            lo, hi = _accepted_start(rs, convention, gap_tol)
            consistent = [i for i in candidates if lo <= segments[i].first_step <= hi]
            resume_index = consistent[-1] if consistent else candidates[-1]
        else:
            resume_index = candidates[-1]
        seg = segments[resume_index]
        if rs is None and seg.marker is not None and seg.marker.step is not None:
            rs, rs_source = seg.marker.step, "log-marker"
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
        )

    resumed = segments[resume_index]
    pre_segments = segments[:resume_index]
    post_segments = segments[resume_index:]
    pre = stitch(pre_segments)
    post = [p for s in post_segments for p in s.points]
    p1 = resumed.first_step
    unit = "step" if logged_steps else "point"
    explanation.append(
        f"resume: {_describe_detection(resumed)}; the resumed run starts at {unit} {p1} "
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
            _check_steps(
                resumed, post_segments, pre, rs, convention, interval, gap_tol, first_step_ever
            )
        )
        if rs is None and pre and p1 > pre[-1].step + gap_tol:
            notes.append(
                f"the resumed run starts at step {p1}, past the last pre-failure step logged "
                f"({pre[-1].step}): expected if the log lost its tail in the crash (buffered output); "
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
                    message=f"loss is {_fmt(p.loss)} at step {p.step} (line {p.line_no})",
                    step=p.step,
                    line_no=p.line_no,
                )
            )
            break

    # Losses.
    judged = post[: cfg.num_steps]
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
                f"{last_judged} (need {cfg.min_baseline_points}); no loss verdict"
            )
        else:
            (baseline_stats, threshold, observed, spike_finding, loss_decided) = _judge_losses(
                window, finite_judged, len(judged), interval, cfg
            )
            explanation.extend(_describe_losses(baseline_stats, threshold, observed, cfg, unit))
            if spike_finding is not None:
                findings.append(spike_finding)
            rerun, rerun_finding = _compare_reruns(
                finite_pre, finite_judged, threshold.tolerance, cfg
            )
            if rerun is not None:
                explanation.append(_describe_rerun(rerun))
            # A higher loss at re-run steps is the spike already reported; say it once.
            if rerun_finding is not None and not (
                spike_finding is not None and rerun is not None and rerun.median_diff > 0
            ):
                findings.append(rerun_finding)
    elif judged:
        explanation.append("no finite loss after the resume")

    verdict, decided = _decide(findings, judged, loss_decided, baseline_stats is not None, cfg)
    explanation.append(_describe_decision(verdict, decided, findings, judged, cfg))
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
    )


def _step_convention(first_step: int | None, interval: int) -> str:
    """'before' when the history starts at step 0, 'after' when at step 1..interval, else 'unknown'."""
    if first_step is None:
        return "unknown"
    if first_step == 0:
        return "before"
    if 1 <= first_step <= interval:
        return "after"
    return "unknown"


def _accepted_start(resume_step: int, convention: str, gap_tol: float) -> tuple[int, float]:
    lo = resume_step + 1 if convention == "after" else resume_step
    return lo, resume_step + gap_tol


def _check_steps(
    resumed: Segment,
    post_segments: Sequence[Segment],
    pre: Sequence[TracePoint],
    resume_step: int | None,
    convention: str,
    interval: int,
    gap_tol: float,
    first_step_ever: int | None,
) -> list[Finding]:
    found: list[Finding] = []
    p1 = resumed.first_step
    line = resumed.points[0].line_no
    if resume_step is not None:
        lo, hi = _accepted_start(resume_step, convention, gap_tol)
        expected = f"{lo}" if interval == 1 else f"{lo}..{resume_step + interval}"
        if p1 < lo:
            found.append(
                Finding(
                    verdict=REPLAYED,
                    message=f"the resumed run starts at step {p1} but the checkpoint restored step "
                    f"{resume_step} (expected {expected}): steps {p1}..{lo - 1} are trained again"
                    + (
                        " - the step counter restarted from the beginning"
                        if p1 <= max(first_step_ever or 0, interval)
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
        and first_step_ever is not None
        and p1 <= max(first_step_ever, interval)
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


def _judge_losses(
    window: Sequence[TracePoint],
    judged: Sequence[TracePoint],
    num_judged_total: int,
    interval: int,
    cfg: WatchConfig,
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
    complete = num_judged_total >= cfg.num_steps
    finding: Finding | None = None
    if observed.longest_run_above >= cfg.persistence:
        run_start = _run_start(judged_points, cfg.persistence)
        finding = Finding(
            verdict=SPIKE,
            message=f"{observed.longest_run_above} consecutive losses above the threshold from step "
            f"{run_start.step} (loss {_fmt(run_start.loss)} vs expected {_fmt(run_start.expected)}, "
            f"tolerance {_fmt(tolerance)}; persistence {cfg.persistence})",
            step=run_start.step,
            line_no=run_start.line_no,
        )
    elif complete and observed.median_excess > median_tolerance:
        finding = Finding(
            verdict=SPIKE,
            message=f"the median of the first {len(judged_points)} losses is {_fmt(observed.median_loss)}, "
            f"{_fmt(observed.median_excess)} above the expected level (median tolerance "
            f"{_fmt(median_tolerance)})",
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


def _compare_reruns(
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
            f"loss is {_fmt(abs(stats.median_diff))} {direction} (median) than before - beyond the "
            f"tolerance {_fmt(tolerance)}"
            + (
                "; a drop like this is what replayed (already seen) data looks like"
                if direction == "lower"
                else ""
            ),
            step=pairs[0][0].step,
            line_no=pairs[0][0].line_no,
        )
    return stats, None


def _decide(
    findings: Sequence[Finding],
    judged: Sequence[TracePoint],
    loss_decided: bool,
    has_baseline: bool,
    cfg: WatchConfig,
) -> tuple[str, bool]:
    for verdict in _PROBLEMS:
        if any(f.verdict == verdict for f in findings):
            # A problem seen cannot be unseen; a drop needs the full N points first.
            if verdict == DIVERGED and len(judged) < cfg.num_steps and not cfg.expect_identical:
                return verdict, False
            return verdict, True
    if has_baseline and loss_decided and len(judged) >= cfg.num_steps:
        return CONTINUOUS, True
    return INSUFFICIENT, False


# -- explanation -------------------------------------------------------------------------


def _describe_detection(seg: Segment) -> str:
    if seg.reason == "log-marker" and seg.marker is not None:
        text = seg.marker.text if len(seg.marker.text) <= 120 else seg.marker.text[:117] + "..."
        return f"restore line at line {seg.marker.line_no} ({text!r})"
    return {
        "step-counter-restart": "the step counter restarts",
        "step-gap": "the step counter jumps forward",
        "baseline-file": "the log follows the --baseline file",
    }.get(seg.reason, seg.reason)


def _describe_losses(
    b: BaselineStats, t: ThresholdStats, o: ObservedStats, cfg: WatchConfig, unit: str
) -> list[str]:
    source = {
        "log": "this log",
        "baseline": "the --baseline file",
        "both": "the baseline file and this log",
    }[b.source]
    return [
        f"baseline: {b.num_points} pre-failure points, {unit}s {b.first_step}..{b.last_step} from "
        f"{source}; expected level {_fmt(b.level)} at {unit} {o.points[0].step} (the larger of the "
        f"robust line {_fmt(b.line_level)}, slope {_signed(b.slope_per_step)}/{unit}, and a local line "
        f"through the {cfg.local_points} nearest points {_fmt(b.local_level)}); spread (1.4826 x MAD) "
        f"{_fmt(b.spread)}"
        + (f", logged every {b.log_interval} step(s)" if unit == "step" else ""),
        f"threshold: a point counts above level + {_fmt(t.tolerance)} = {_fmt(t.value)} "
        f"({_basis(t.basis, cfg.k, b.spread, cfg)}), {t.persistence} in a row make a spike; "
        f"the median of the first {t.num_steps} must stay under level + {_fmt(t.median_tolerance)} = "
        f"{_fmt(t.median_value)} ({_basis(t.median_basis, cfg.k_median, b.spread, cfg)})",
        f"observed: {o.num_points} point(s), {unit}s {o.points[0].step}..{o.points[-1].step}: median "
        f"{_fmt(o.median_loss)} ({_signed(o.median_excess)} vs expected), max {_fmt(o.max_loss)} at "
        f"{unit} {o.max_loss_step}, {o.num_above} above the point threshold, longest run {o.longest_run_above}",
    ]


def _basis(basis: str, k: float, spread: float, cfg: WatchConfig) -> str:
    if basis == "k*spread":
        return f"{_fmt(k)} x spread"
    if basis == "min-rel-tol":
        return f"the {_fmt(cfg.min_rel_tol * 100)}% floor; {_fmt(k)} x spread = {_fmt(k * spread)}"
    return f"the absolute floor {_fmt(cfg.min_abs_tol)}"


def _describe_rerun(r: RerunStats) -> str:
    return (
        f"re-run steps: {r.num_compared} step(s) ({r.first_step}..{r.last_step}) were also logged before "
        f"the failure: {r.num_identical} identical, median difference {_signed(r.median_diff)}, "
        f"largest {_fmt(r.max_abs_diff)}"
    )


def _describe_decision(
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


# -- incremental use ---------------------------------------------------------------------


@dataclass(slots=True)
class _StepWatch:
    """Cheap per-rank check that tells when a full analysis could find a resume."""

    last_step: dict[int | None, int] = field(default_factory=dict)
    last_diff: dict[int | None, int] = field(default_factory=dict)
    last_epoch: dict[int | None, float] = field(default_factory=dict)

    def is_boundary(self, p: LossPoint) -> bool:
        if p.step is None:
            prev_epoch = self.last_epoch.get(p.rank)
            if p.epoch is None:
                return False
            self.last_epoch[p.rank] = p.epoch
            return prev_epoch is not None and p.epoch < prev_epoch
        prev = self.last_step.get(p.rank)
        self.last_step[p.rank] = p.step
        if prev is None:
            return False
        diff = p.step - prev
        prev_diff = self.last_diff.get(p.rank, 0)
        if diff > 0:
            self.last_diff[p.rank] = diff
        if diff < 0 or (diff == 0 and not p.redraws_previous):
            return True
        return prev_diff > 0 and diff > 3 * prev_diff


class WatchSession:
    """Feed a baseline, then a live log line by line; ``evaluate`` at any time.

    ``feed`` returns the report once the verdict is decided (``None`` before), so a
    caller reading a child's output can stop as soon as there is an answer. A full
    analysis runs only after something that could be a resume has been seen (a
    restart, a jump, a restore line, or the first line after a separate baseline),
    so a long pre-failure history costs one pass at the end, not one per line.
    """

    def __init__(
        self,
        *,
        config: WatchConfig | None = None,
        resume_step: int | None = None,
        log_format: str = AUTO,
        pattern: str | None = None,
    ) -> None:
        self.config = config or WatchConfig()
        self.resume_step = resume_step
        self._log_parser = LossLogParser(log_format, pattern)
        self._baseline_parser = LossLogParser(log_format, pattern)
        self._log_events: list[LogEvent] = []
        self._baseline_events: list[LogEvent] | None = None
        self._watch = _StepWatch()
        self._maybe_resumed = False
        self._report: WatchReport | None = None

    @property
    def log_format(self) -> str | None:
        return self._log_parser.format

    @property
    def baseline_format(self) -> str | None:
        return self._baseline_parser.format if self._baseline_events is not None else None

    @property
    def num_log_lines(self) -> int:
        return self._log_parser.num_lines

    @property
    def num_log_points(self) -> int:
        return sum(1 for e in self._log_events if isinstance(e, LossPoint))

    @property
    def num_baseline_points(self) -> int:
        return sum(1 for e in self._baseline_events or () if isinstance(e, LossPoint))

    def feed_baseline(self, line: str) -> None:
        """One line of the pre-failure log (all of it before the first ``feed``)."""
        if self._baseline_events is None:
            self._baseline_events = []
        self._baseline_events.extend(self._baseline_parser.feed(line))

    def feed(self, line: str, *, evaluate: bool = True) -> WatchReport | None:
        """One line of the log; the report if the verdict is now decided, else None."""
        events = self._log_parser.feed(line)
        if not events:
            return None
        self._log_events.extend(events)
        for e in events:
            if (
                isinstance(e, ResumeMarker)
                or self._baseline_events is not None
                or self._watch.is_boundary(e)
            ):
                self._maybe_resumed = True
        if not (evaluate and self._maybe_resumed and any(isinstance(e, LossPoint) for e in events)):
            return None
        report = self.evaluate()
        return report if report.decided else None

    def evaluate(self) -> WatchReport:
        """Analyse everything read so far."""
        self._report = analyze(
            self._log_events,
            baseline_events=self._baseline_events,
            resume_step=self.resume_step,
            config=self.config,
        )
        return self._report
