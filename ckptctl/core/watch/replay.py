"""Replay consistency: the steps a resume re-runs, compared step by step with the same steps
logged before the failure.

Pure, stdlib only. A resume from step N after a crash at step M > N re-runs N+1..M,
which the log already holds. The reference is the run that wrote the checkpoint: the
latest pre-failure segment that passed through the resumed run's first step (it
logged steps before it and went on past it); steps logged by a run that itself
started later, from another checkpoint, are left out (``excluded_steps``). Only steps
present in both runs are compared, so a run logging every k steps compares every
k-th step (or the common multiples when the two runs log at different intervals).

With P pairs (P >= ``min_replay_points``; fewer: nothing is said but the numbers):

* every pair equal (to the print precision): the restore is exact, a note
  ("37 re-run steps bit-identical ...", status ``identical``);
* else the per-step deviations from each run's own trend (the loss minus a Theil-Sen
  line through the 9 nearest points: what is left is the batch's own difficulty;
  9 rather than 5 or 7 because its residuals of independent noise scatter least, sd
  0.233 against 0.265 for 5 on 20 pairs, so the test has the most power) are compared by
  Spearman's rank correlation r (when both runs scatter about as much, within a
  factor of 3; else nothing is shown). The same batches give the same pattern even when
  other kernels, dropout draws or another world size move every loss a little:
  r >= ``replay_consistent_corr`` is a faithful restore under non-determinism (a
  note, status ``consistent``);
* r below both ``replay_reset_corr`` and the lower bound of what a faithful restore
  gives (Fisher's z: tanh(atanh(``replay_faithful_corr``) - ``replay_z`` * se), se =
  sqrt(1.06 / (P - 3)) for a rank correlation), while the median difference stays
  within the level tolerance (max(k_median x spread, min_rel_tol x level)): the same
  level, other batches: ``data-stream-reset``. A level that moved is the loss
  check's to report (a model or optimizer not restored changes the level, and then
  the pattern says nothing about the data);
* in between: a note that neither is shown (status ``inconclusive``).

The notes are confirmations, not facts worth a look, so they carry no note code; the
report's ``checks.replay`` holds the numbers and the ``status`` (``identical``,
``consistent``, ``same-batches`` (the pattern holds, the level moved: the data is
right, the state is not; the loss check reports the level), ``unrelated``,
``level-differs``, ``inconclusive``, ``too-few``).

The pairs are the re-run steps among the N points the loss check judges (``--steps``),
and the test is made when those N points are there (or the log is complete): once, on
the same points whether the log is followed or read whole, never again at every new
line (which would raise the false-alarm rate with each look).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from ckptctl.core.watch.context import CheckContext, CheckResult
from ckptctl.core.watch.loaderdesign import expected_restart
from ckptctl.core.watch.model import (
    DATA_RESTARTED,
    DATA_STREAM_RESET,
    MAD_TO_SIGMA,
    Finding,
    Segment,
    TracePoint,
    fmt_num,
    signed,
)
from ckptctl.core.watch.stats import local_level

#: Points of the local line a step's deviation is taken from (its trend).
TREND_POINTS = 9
#: The two runs' scatters (robust sd of the deviations) must be within this factor of each other.
SPREAD_RATIO = 3.0
#: Variance factor of Spearman's r against Pearson's under the Fisher transform (Fieller et al.).
SPEARMAN_VARIANCE = 1.06


def reference_segment(pre_segments: Sequence[Segment], first_step: int) -> Segment | None:
    """The pre-failure run the re-run steps are compared with (see the module docstring)."""
    through = [s for s in pre_segments if s.first_step < first_step <= s.last_step]
    if through:
        return through[-1]
    # No run passed through the checkpoint in the log: one that started from it (a repeat).
    later = [s for s in pre_segments if s.last_step >= first_step]
    return later[-1] if later else None


def deviations(steps: Sequence[int], values: Sequence[float], width: int = TREND_POINTS) -> list[float]:
    """Each value minus its trend: a Theil-Sen line through the ``width`` nearest points,
    read at its step (exact for a straight stretch, one odd point cannot tilt it, and no
    lag on a steep descent, where a running median would leave the slope in the residuals)."""
    return [v - local_level(steps, values, s, width) for s, v in zip(steps, values, strict=True)]


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties averaged); None when either side is constant."""
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True)) / math.sqrt(va * vb)


def reset_bound(num_pairs: int, faithful_corr: float, z: float) -> float:
    """The lowest correlation a faithful restore (true correlation ``faithful_corr``) gives
    with P pairs, at ``z`` standard errors (Fisher's z of a rank correlation)."""
    se = math.sqrt(SPEARMAN_VARIANCE / max(num_pairs - 3, 1))
    return math.tanh(math.atanh(faithful_corr) - z * se)


def check_replay(ctx: CheckContext) -> CheckResult:
    """The replay-consistency check (see the module docstring)."""
    res = CheckResult()
    if not ctx.logged_steps:
        return res
    resumed = ctx.resumed
    p1 = resumed.first_step
    ref = reference_segment(ctx.pre_segments, p1)
    if ref is None:
        return res
    cfg = ctx.cfg
    before = {p.step: p for p in ref.points if p.step >= p1 and math.isfinite(p.loss)}
    excluded = sorted({p.step for p in ctx.pre if p.step >= p1 and p.step not in before})
    # The re-run steps among the N judged points: the test is made once, when the loss check
    # has its N points (or the log is complete), on the same points whatever more is read.
    pairs: list[tuple[TracePoint, TracePoint]] = [
        (before[p.step], p) for p in resumed.points[: cfg.num_steps] if p.step in before and math.isfinite(p.loss)
    ]
    n = len(pairs)
    complete = ctx.final or len(ctx.judged) >= cfg.num_steps
    stats: dict[str, Any] = {
        "num_compared": n,
        "first_step": pairs[0][1].step if pairs else None,
        "last_step": pairs[-1][1].step if pairs else None,
        "num_rerun_logged": len(before),
        "reference_first_step": ref.first_step,
        "reference_last_step": ref.last_step,
        "excluded_steps": len(excluded),
        "restart_by_design": expected_restart(ctx),
    }
    if n < cfg.min_replay_points:
        if complete:
            stats["status"] = "too-few"
            res.checks["replay"] = stats
        return res
    if not complete:
        return res
    res.checks["replay"] = stats
    steps = f"steps {pairs[0][1].step}..{pairs[-1][1].step}"
    olds = [b.loss for b, _ in pairs]
    news = [a.loss for _, a in pairs]
    exact = sum(a == b for a, b in zip(olds, news, strict=True))
    close = sum(
        abs(a - b) <= cfg.identical_rel_tol * max(1.0, abs(b)) for a, b in zip(olds, news, strict=True)
    )
    stats.update(num_bit_identical=exact, num_identical=close)
    if close == n:
        stats["status"] = "identical"
        how = "bit-identical" if exact == n else "identical to the printed precision"
        res.notes.append(
            (None, f"{n} re-run steps {how} to the losses logged before the failure ({steps}): "
             "the restore is exact")
        )  # fmt: skip
        return res
    xs = [a.step for _, a in pairs]
    dev_old, dev_new = deviations(xs, olds), deviations(xs, news)
    spread = MAD_TO_SIGMA * statistics.median(abs(d) for d in dev_old)
    spread_new = MAD_TO_SIGMA * statistics.median(abs(d) for d in dev_new)
    median_diff = statistics.median(a - b for a, b in zip(news, olds, strict=True))
    level = statistics.median(olds)
    level_tol = max(cfg.k_median * spread, cfg.min_rel_tol * abs(level), cfg.min_abs_tol)
    # Per-step patterns compare only when both runs show one of about the same size: the same
    # batches or other ones give the same scatter; one run far smoother than the other logs
    # another quantity (an average, a quieter run) and its ranks would be noise.
    comparable = spread > 0 and spread_new > 0 and 1 / SPREAD_RATIO <= spread_new / spread <= SPREAD_RATIO
    r = spearman(dev_old, dev_new) if comparable else None
    bound = reset_bound(n, cfg.replay_faithful_corr, cfg.replay_z)
    below = min(cfg.replay_reset_corr, bound)
    stats.update(
        median_diff=median_diff,
        level=level,
        level_tolerance=level_tol,
        same_level=abs(median_diff) <= level_tol,
        spread=spread,
        spread_after=spread_new,
        correlation=r,
        consistent_at=cfg.replay_consistent_corr,
        reset_below=below,
        trend=f"Theil-Sen line through the {TREND_POINTS} nearest points",
    )
    what = (
        f"{n} re-run steps ({steps}) differ from before the failure (median {signed(median_diff)}, "
        f"{close} identical)"
    )
    if r is None:
        stats["status"] = "inconclusive"
        res.notes.append(
            (None, f"{what}; their scatter around the trend differs too much ({fmt_num(spread)} before, "
             f"{fmt_num(spread_new)} after) to compare the per-step patterns")
        )  # fmt: skip
        return res
    if r >= cfg.replay_consistent_corr and abs(median_diff) > level_tol:
        stats["status"] = "same-batches"
        res.notes.append(
            (None, f"{what}: the same per-step pattern (rank correlation {r:.2f} of the deviations from "
             f"the trend) at another level (beyond {fmt_num(level_tol)}): the same batches as before the "
             "failure, so the data stream continued; the state they train is not the same")
        )  # fmt: skip
    elif r >= cfg.replay_consistent_corr:
        stats["status"] = "consistent"
        res.notes.append(
            (None, f"{what} but follow the same per-step pattern (rank correlation "
             f"{r:.2f} of the deviations from the trend): consistent with a faithful restore under "
             "non-determinism")
        )  # fmt: skip
    elif r < below and abs(median_diff) <= level_tol:
        stats["status"] = "unrelated"
        first = pairs[0][1]
        message = (
            f"{what}: the same level (within {fmt_num(level_tol)}) but an unrelated per-step "
            f"pattern (rank correlation {r:.2f} of the deviations from the trend; a faithful restore "
            f"gives at least {below:.2f} on {n} steps): other batches - the data loader's position "
            "was not restored"
        )
        why = stats["restart_by_design"]
        if why is not None:
            res.notes.append((DATA_RESTARTED, message + f" (expected: {why})"))
        else:
            res.findings.append(
                Finding(verdict=DATA_STREAM_RESET, message=message, step=first.step, line_no=first.line_no)
            )
    elif r < below:
        stats["status"] = "level-differs"
    else:
        stats["status"] = "inconclusive"
        res.notes.append(
            (None, f"{what}; their per-step pattern (rank correlation {r:.2f}) neither shows the same "
             f"batches (>= {cfg.replay_consistent_corr:.2f}) nor other ones (< {below:.2f})")
        )  # fmt: skip
    return res
