"""Robust statistics of the watch: trend lines, local levels, spread (pure, stdlib only)."""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Sequence

from ckptctl.core.watch.model import MAD_TO_SIGMA, Trend


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


def quantile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
