"""The watch's plain data: verdict names, thresholds (``WatchConfig``), the report and its parts.

Pure, stdlib only; shared by ``resume``, ``judge``, ``checks`` and ``analyze``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ckptctl.core.watch.logevents import ResumeMarker

CONTINUOUS = "continuous"
SPIKE = "spike"
NAN = "nan"
REPLAYED = "replayed-steps"
SKIPPED = "skipped-steps"
DIVERGED = "diverged"
INSUFFICIENT = "insufficient-data"
TOKENS_MISMATCH = "tokens-mismatch"
"""The tokens/samples counter does not continue from the checkpoint's value (data replayed or skipped)."""
SCHEDULE_RESET = "schedule-reset"
"""The learning rate departs from the pre-failure schedule (warm-up restarted, a jump, a restart)."""
DATA_POSITION_MISMATCH = "data-position-mismatch"
"""The resumed run's first batch is not where the checkpoint recorded the data loader to be
(``ckptctl.training``'s data-position lines, ``datapos``)."""
DATA_STREAM_RESET = "data-stream-reset"
"""The re-run steps' losses are at the same level as before the failure but their per-step
pattern is unrelated: other batches, the data loader's position was not restored (``replay``)."""
#: Every verdict, most severe first (the order of precedence): the trainer's own facts
#: (steps, tokens, the data position, the schedule) before the statistics of the loss; a
#: spike (seen) before a data-stream reset (inferred from a level that held).
VERDICTS: tuple[str, ...] = (
    NAN, REPLAYED, SKIPPED, TOKENS_MISMATCH, DATA_POSITION_MISMATCH, SCHEDULE_RESET, SPIKE,
    DATA_STREAM_RESET, DIVERGED, CONTINUOUS, INSUFFICIENT,
)  # fmt: skip

# What each verdict means for the resume, declared once (``ckptctl recover`` acts on the
# class, never on the verdict's name): ``good`` the resume is verified; ``bad`` it restored
# the wrong state (fall back one checkpoint, quarantine); ``undecided`` the watch cannot tell.
GOOD = "good"
BAD = "bad"
UNDECIDED = "undecided"
VERDICT_CLASSES: tuple[str, ...] = (GOOD, BAD, UNDECIDED)
VERDICT_CLASS: Mapping[str, str] = MappingProxyType({
    NAN: BAD,
    REPLAYED: BAD,
    SKIPPED: BAD,
    TOKENS_MISMATCH: BAD,
    DATA_POSITION_MISMATCH: BAD,
    SCHEDULE_RESET: BAD,
    DATA_STREAM_RESET: BAD,
    SPIKE: BAD,
    DIVERGED: BAD,
    CONTINUOUS: GOOD,
    INSUFFICIENT: UNDECIDED,
})  # fmt: skip
#: The bad verdicts, in precedence order.
PROBLEMS: tuple[str, ...] = tuple(v for v in VERDICTS if VERDICT_CLASS[v] == BAD)


def verdict_class(verdict: str | None) -> str:
    """``good`` / ``bad`` / ``undecided`` (``None`` or a verdict this version does not know:
    ``undecided``, never read as a success nor acted on as a failure)."""
    return UNDECIDED if verdict is None else VERDICT_CLASS.get(verdict, UNDECIDED)

# Note codes (``WatchReport.note_codes``): facts worth a look that do not fail the resume.
THROUGHPUT_REGRESSION = "throughput-regression"
"""Post-resume throughput below the pre-failure band (RB-7: suspect the replacement node's fabric)."""
LOSS_SCALE_RESTART = "loss-scale-restart"
"""The fp16 loss scale started again from a high initial value after the resume."""
GRAD_NORM_SHIFT = "grad-norm-shift"
"""The gradient norm's level moved by a large factor after the resume."""
LOST_LOG_LINES = "lost-log-lines"
"""A step gap whose wall time matches the missing steps: the lines were lost, the steps ran."""
RELATIVE_COUNTER = "relative-step-counter"
"""The resumed run counts steps from 0 again; read as checkpoint step + counter (restore line)."""
SELF_BASELINE = "self-baseline"
"""Too few pre-failure points for a trend: judged against the run's own recent level."""
UNREAD_INPUT = "unread-input"
"""Part of the source could not be read (a record failing its checksum, bytes past a broken
header): no ``continuous`` verdict passes over it; such a verdict becomes ``insufficient-data``."""
EARLIER_DATA_POSITION_MISMATCH = "earlier-data-position-mismatch"
"""An earlier resume in the log did not continue the data position (the resume judged did)."""
WEIGHTS_ONLY = "weights-only-restore"
"""The trainer says it restored the model weights but not the optimizer (or scheduler) state."""
PARTIAL_RESTORE = "partial-restore"
"""A resume restored fewer keys than the checkpoint and the live state hold (``ckptctl: restored:
N/M keys``, N < M): a load with an allowance; what it left out started over (``restored``)."""
DATA_RESTARTED = "data-restarted-by-design"
"""``data_may_restart``: the data loader started over on the resume (other batches at the re-run
steps, or a first batch elsewhere than the checkpoint recorded), as the run says its loader does."""
NOTE_CODES: tuple[str, ...] = (
    THROUGHPUT_REGRESSION, LOSS_SCALE_RESTART, GRAD_NORM_SHIFT, LOST_LOG_LINES, RELATIVE_COUNTER, SELF_BASELINE,
    EARLIER_DATA_POSITION_MISMATCH, UNREAD_INPUT, WEIGHTS_ONLY, PARTIAL_RESTORE, DATA_RESTARTED,
)  # fmt: skip

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
    data_may_restart: bool = False
    """The run's data loader is not resumable by design (it starts its epoch or stream over on a
    resume): ``data-stream-reset`` and ``data-position-mismatch`` become the note
    ``data-restarted-by-design`` (``--data-may-restart``; ``watch.data_may_restart``). Without
    it, every mid-epoch resume of such a run is bad and ``recover`` would fall back in vain."""
    data_must_continue: bool = False
    """Judge a data loader that starts over as a fault even for the loggers whose stock loader
    does so by design (``loaderdesign.RESTARTS_BY_DESIGN``: detectron2, nanoGPT), which get the
    note ``data-restarted-by-design`` otherwise (``--data-must-continue``)."""
    identical_rel_tol: float = 1e-6
    """Relative difference under which two logged losses count as identical (print rounding)."""
    min_judged_points: int = 3
    """Adaptive window: a complete log (not followed) with at least this many points after
    the resume, but fewer than N, is judged on what it has (the fewest in which a spike of
    ``persistence`` = 3 points in a row can show; confidence ``medium``, ``low`` under
    ``medium_judged_points``)."""
    medium_judged_points: int = 5
    """Adaptive window: fewer points than this after the resume give confidence ``low``."""
    self_baseline_rel_shift: float = 0.25
    """Self-baseline (fewer pre-failure points than ``min_baseline_points``): a sustained
    rise of the loss above its recent level by this fraction is a ``spike``."""
    lr_rel_tol: float = 0.3
    """``schedule-reset`` when the resumed learning rate departs from the predicted one
    by more than this fraction (and by more than 5% of the schedule's peak)."""
    tokens_rel_tol: float = 0.5
    """``tokens-mismatch`` when the tokens/samples counter is off by more than this many
    steps' worth of tokens."""
    throughput_drop: float = 0.15
    """``throughput-regression`` note when the post-resume median is this fraction below the
    pre-failure median and below its 10th percentile."""
    min_replay_points: int = 10
    """Re-run steps among the N judged points, logged before the failure too (by the run
    that wrote the checkpoint), needed before the replay check says anything."""
    replay_consistent_corr: float = 0.5
    """Correlation of the per-step deviations from the trend at or above which differing
    re-run losses read as a faithful restore under non-determinism (a note)."""
    replay_faithful_corr: float = 0.7
    """The lowest correlation a faithful restore is assumed to give (the same batches; other
    dropout, kernels or world size); ``data-stream-reset`` needs a correlation this is
    ruled out for at ``replay_z`` standard errors."""
    replay_reset_corr: float = 0.3
    """``data-stream-reset`` only below this correlation (unrelated patterns) as well."""
    replay_z: float = 2.33
    """One-sided bound of the faithful-restore test in standard errors (2.33: 1%)."""

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
            ("min_judged_points", self.min_judged_points >= 1, "at least 1"),
            ("self_baseline_rel_shift", 0 < self.self_baseline_rel_shift < 10, "between 0 and 10"),
            ("lr_rel_tol", 0 < self.lr_rel_tol < 10, "between 0 and 10"),
            ("tokens_rel_tol", self.tokens_rel_tol > 0, "> 0"),
            ("throughput_drop", 0 < self.throughput_drop < 1, "between 0 and 1"),
            ("min_replay_points", self.min_replay_points >= 5, "at least 5"),
            ("replay_consistent_corr", 0 < self.replay_consistent_corr < 1, "between 0 and 1"),
            ("replay_faithful_corr", 0 < self.replay_faithful_corr < 1, "between 0 and 1"),
            ("replay_reset_corr", -1 < self.replay_reset_corr < self.replay_consistent_corr,
             "between -1 and replay_consistent_corr"),
            ("replay_z", 0 < self.replay_z < 10, "between 0 and 10"),
        ]  # fmt: skip
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
            "data_may_restart": self.data_may_restart,
            "data_must_continue": self.data_must_continue,
            "min_judged_points": self.min_judged_points,
            "medium_judged_points": self.medium_judged_points,
            "self_baseline_rel_shift": self.self_baseline_rel_shift,
            "lr_rel_tol": self.lr_rel_tol,
            "tokens_rel_tol": self.tokens_rel_tol,
            "throughput_drop": self.throughput_drop,
            "min_replay_points": self.min_replay_points,
            "replay_consistent_corr": self.replay_consistent_corr,
            "replay_faithful_corr": self.replay_faithful_corr,
            "replay_reset_corr": self.replay_reset_corr,
            "replay_z": self.replay_z,
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
    metrics: Mapping[str, float] = field(default_factory=dict)
    """The point's other values (learning rate, tokens, throughput, ...; ``losslog.METRICS``)."""
    wall: float | None = None
    """Seconds of the line's timestamp, when it has one."""
    relative: bool = False
    """The line says its counter counts from the resume ("Step 12 (after resuming)")."""


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
            "level": jf(self.level),
            "line_level": jf(self.line_level),
            "local_level": jf(self.local_level),
            "slope_per_step": jf(self.slope_per_step),
            "spread": jf(self.spread),
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
            "value": jf(self.value),
            "tolerance": jf(self.tolerance),
            "basis": self.basis,
            "median_value": jf(self.median_value),
            "median_tolerance": jf(self.median_tolerance),
            "median_basis": self.median_basis,
            "k": self.k,
            "k_median": self.k_median,
            "spread_term": jf(self.spread_term),
            "relative_floor": jf(self.relative_floor),
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
            "median_loss": jf(self.median_loss),
            "median_excess": jf(self.median_excess),
            "max_loss": jf(self.max_loss),
            "max_loss_step": self.max_loss_step,
            "num_above_threshold": self.num_above,
            "longest_run_above_threshold": self.longest_run_above,
            "losses": [[p.step, jf(p.loss)] for p in self.points],
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
            "median_diff": jf(self.median_diff),
            "max_abs_diff": jf(self.max_abs_diff),
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
class CurvePoint:
    step: int
    loss: float
    lr: float | None = None
    """The learning rate logged with the loss (None when the line has none)."""


#: Most pre-failure points a ``LossCurve`` keeps (the baseline window, capped: a picture, not the log).
CURVE_MAX_BEFORE = 200


@dataclass(frozen=True, kw_only=True, slots=True)
class LossCurve:
    """The points around the resume that a picture of the verdict needs (``curve`` in the JSON).

    Nothing here is computed for the picture: ``before`` are the last pre-failure points
    (the baseline window, at most ``CURVE_MAX_BEFORE``), ``after`` the judged points after
    the resume, and ``expected`` the level and point threshold the verdict compared each
    judged point with (empty without a fitted baseline: self-baseline, no finite loss).
    """

    before: tuple[CurvePoint, ...]
    after: tuple[CurvePoint, ...]
    expected: tuple[tuple[int, float, float], ...] = ()
    """``(step, expected level, point threshold = level + tolerance)`` per judged point."""

    def to_json(self) -> dict[str, Any]:
        def pts(points: tuple[CurvePoint, ...]) -> list[list[Any]]:
            return [[p.step, jf(p.loss), None if p.lr is None else jf(p.lr)] for p in points]

        return {
            "before": pts(self.before),
            "after": pts(self.after),
            "expected": [[s, jf(e), jf(t)] for s, e, t in self.expected],
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
    note_codes: tuple[str, ...] = ()
    """Typed codes of the notes that have one (``NOTE_CODES``), for scripts."""
    confidence: str | None = None
    """``high`` (N points after the resume against a fitted baseline), ``medium`` (fewer
    points, complete log), ``low`` (self-baseline); None while undecided."""
    checks: Mapping[str, Any] = field(default_factory=dict)
    """RB-7's other checks: ``tokens``, ``throughput``, ``schedule``, ``loss_scale``,
    ``grad_norm`` (each with its numbers, or absent when the log does not carry it)."""
    step_axis: str = "step"
    """What the log's positions count (``watch_axis``): ``step`` (a step, iteration or update
    counter), ``epoch`` (one record per epoch) or ``epoch-batch`` (epoch x ``epoch_len`` + batch)."""
    epoch_len: int | None = None
    """Positions per epoch on the ``epoch-batch`` axis."""
    step_axis_composed: bool = False
    """The log's step counter starts again every epoch; composed with the epoch here."""
    curve: LossCurve | None = None
    """The points around the resume and the threshold they were judged against (None: no resume)."""




def jf(x: float) -> float | str:
    """JSON-safe float: NaN/Inf become the strings "nan", "inf", "-inf"."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def fmt_num(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4g}"


def signed(x: float) -> str:
    return ("+" if x >= 0 else "") + fmt_num(x)
