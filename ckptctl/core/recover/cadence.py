"""Checkpoint cadence against the failure rate (RB-7 verification: "cadence still below MTBF").

Pure, stdlib only: ``plan_cadence`` takes what a run root says (when each
checkpoint was written, how long its save took, when recoveries happened) and
returns the numbers.

* save cost C: the median of the checkpoints' save durations (ckptctl's manifest
  ``save_duration_s``; else the span of a checkpoint's file times, newest minus
  oldest, a lower bound on the write time);
* current interval tau: the median time between consecutive checkpoints;
* MTBF M: given (``--mtbf``), else observed: the run's span divided by the
  recoveries its audit log records;
* Young/Daly optimum: ``tau* = sqrt(2 * C * M)`` (first order; valid while C << M);
* expected lost work per failure: tau / 2 (on average a failure lands half way
  through an interval), at the current and at the optimal interval; and the
  expected overhead ``C / tau + tau / (2 M)`` (time saving plus time redone).
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_DURATION_RE = re.compile(
    r"^\s*(?P<n>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>s|sec|m|min|h|hr|d|w)?\s*$", re.IGNORECASE
)
_UNIT_S = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}

OK = "ok"
TOO_RARE = "too-rare"
"""The interval is more than twice the optimum: a failure throws away more work than it should."""
TOO_FREQUENT = "too-frequent"
"""The interval is under half the optimum: saving costs more than the work it protects."""
ABOVE_MTBF = "interval-above-mtbf"
"""Checkpoints come less often than failures: most failures lose everything since the last one."""
UNKNOWN = "unknown"


class DurationError(ValueError):
    """Not a duration such as ``90m``, ``3h``, ``2d``, ``45s`` or seconds."""


def parse_duration(text: str) -> float:
    """Seconds in ``90m``, ``3h``, ``2d``, ``1.5h``, ``45s``, ``3600`` (seconds)."""
    m = _DURATION_RE.match(text)
    if m is None:
        raise DurationError(f"not a duration: {text!r} (use e.g. 90m, 3h, 2d, 45s)")
    seconds = float(m.group("n")) * _UNIT_S[(m.group("unit") or "").lower()]
    if not math.isfinite(seconds) or seconds <= 0:
        raise DurationError(f"a duration must be positive, got {text!r}")
    return seconds


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointTiming:
    """When one checkpoint was written and what its save cost."""

    step: int | None
    time_s: float
    """When the save finished (manifest ``created_unix_s``, else the newest file time)."""
    save_duration_s: float | None
    save_duration_source: str
    """``manifest`` or ``file-times`` (newest minus oldest file time)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CadenceReport:
    num_checkpoints: int
    save_cost_s: float | None
    save_cost_source: str | None
    interval_s: float | None
    interval_steps: float | None
    mtbf_s: float | None
    mtbf_source: str | None
    """``flag`` (``--mtbf``), ``audit`` (recoveries in the audit log) or None."""
    num_failures: int
    optimal_interval_s: float | None
    lost_work_per_failure_s: float | None
    """At the current interval: tau / 2."""
    optimal_lost_work_per_failure_s: float | None
    overhead: float | None
    """Expected fraction of time spent saving or redoing work at the current interval."""
    optimal_overhead: float | None
    status: str
    """``ok``, ``too-rare``, ``too-frequent``, ``interval-above-mtbf`` or ``unknown``."""
    explanation: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "num_checkpoints": self.num_checkpoints,
            "save_cost_s": self.save_cost_s,
            "save_cost_source": self.save_cost_source,
            "interval_s": self.interval_s,
            "interval_steps": self.interval_steps,
            "mtbf_s": self.mtbf_s,
            "mtbf_source": self.mtbf_source,
            "num_failures": self.num_failures,
            "optimal_interval_s": self.optimal_interval_s,
            "lost_work_per_failure_s": self.lost_work_per_failure_s,
            "optimal_lost_work_per_failure_s": self.optimal_lost_work_per_failure_s,
            "overhead": self.overhead,
            "optimal_overhead": self.optimal_overhead,
            "status": self.status,
            "explanation": list(self.explanation),
        }


def young_daly_interval(save_cost_s: float, mtbf_s: float) -> float:
    """Young's first-order optimal checkpoint interval: sqrt(2 * C * M)."""
    return math.sqrt(2.0 * save_cost_s * mtbf_s)


def overhead(interval_s: float, save_cost_s: float, mtbf_s: float) -> float:
    """Expected fraction of time lost: saving (C / tau) plus work redone (tau / 2M)."""
    return save_cost_s / interval_s + interval_s / (2.0 * mtbf_s)


def human(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    if seconds < 172800:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"


def plan_cadence(
    checkpoints: Sequence[CheckpointTiming],
    *,
    failure_times_s: Sequence[float] = (),
    mtbf_s: float | None = None,
) -> CadenceReport:
    """The cadence numbers for a run (see the module docstring)."""
    cks = sorted(checkpoints, key=lambda c: c.time_s)
    why: list[str] = []
    costs = [
        c.save_duration_s for c in cks if c.save_duration_s is not None and c.save_duration_s >= 0
    ]
    sources = {c.save_duration_source for c in cks if c.save_duration_s is not None}
    save_cost = statistics.median(costs) if costs else None
    save_source = (
        (
            "manifest"
            if sources == {"manifest"}
            else "file-times"
            if sources == {"file-times"}
            else "mixed"
        )
        if costs
        else None
    )
    gaps = [b.time_s - a.time_s for a, b in itertools.pairwise(cks) if b.time_s > a.time_s]
    interval = statistics.median(gaps) if gaps else None
    step_gaps = [
        b.step - a.step
        for a, b in itertools.pairwise(cks)
        if a.step is not None and b.step is not None and b.step > a.step
    ]
    interval_steps = statistics.median(step_gaps) if step_gaps else None
    mtbf_source: str | None = None
    num_failures = len(failure_times_s)
    if mtbf_s is not None:
        mtbf_source = "flag"
    elif num_failures and cks:
        start = cks[0].time_s
        end = max([cks[-1].time_s, *failure_times_s])
        if end > start:
            mtbf_s = (end - start) / num_failures
            mtbf_source = "audit"
    why.append(
        f"{len(cks)} checkpoint(s); save cost {human(save_cost)}"
        + (
            f" (median, from {save_source})"
            if save_cost is not None
            else " (no manifest save duration, too few files)"
        )
        + f"; interval {human(interval)}"
        + (f" ({interval_steps:g} steps)" if interval_steps is not None else "")
    )
    why.append(
        f"MTBF {human(mtbf_s)}"
        + (
            " (given)"
            if mtbf_source == "flag"
            else f" ({num_failures} recovery(ies) in the audit log)"
            if mtbf_source == "audit"
            else " (no recoveries recorded; pass --mtbf)"
        )
    )
    optimal = lost = opt_lost = ovh = opt_ovh = None
    status = UNKNOWN
    if save_cost is not None and mtbf_s is not None and save_cost > 0:
        optimal = young_daly_interval(save_cost, mtbf_s)
        opt_lost = optimal / 2
        opt_ovh = overhead(optimal, save_cost, mtbf_s)
        why.append(
            f"Young/Daly optimum sqrt(2 x {human(save_cost)} x {human(mtbf_s)}) = {human(optimal)}: "
            f"{human(opt_lost)} lost per failure, overhead {opt_ovh:.1%}"
        )
    if interval is not None:
        lost = interval / 2
        if save_cost is not None and mtbf_s is not None and save_cost > 0:
            ovh = overhead(interval, save_cost, mtbf_s)
        why.append(
            f"current interval {human(interval)}: {human(lost)} lost per failure"
            + (f", overhead {ovh:.1%}" if ovh is not None else "")
        )
    if interval is not None and mtbf_s is not None and interval >= mtbf_s:
        status = ABOVE_MTBF
    elif interval is not None and optimal is not None:
        status = (
            TOO_RARE if interval > 2 * optimal else TOO_FREQUENT if interval < optimal / 2 else OK
        )
    return CadenceReport(
        num_checkpoints=len(cks),
        save_cost_s=save_cost,
        save_cost_source=save_source,
        interval_s=interval,
        interval_steps=interval_steps,
        mtbf_s=mtbf_s,
        mtbf_source=mtbf_source,
        num_failures=num_failures,
        optimal_interval_s=optimal,
        lost_work_per_failure_s=lost,
        optimal_lost_work_per_failure_s=opt_lost,
        overhead=ovh,
        optimal_overhead=opt_ovh,
        status=status,
        explanation=tuple(why),
    )
