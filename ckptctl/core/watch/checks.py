"""RB-7's checks beside the loss: tokens seen, learning-rate schedule, throughput, loss scale,
grad norm; and the self-baseline for runs with too few pre-failure points.

Pure, stdlib only. Each check reads the metrics the log's points carry
(``TracePoint.metrics``, keys from ``ckptctl.core.watch.logtokens``) and returns what it
found: a ``Finding`` (a verdict), notes ``(code, text)``, and its numbers for the
report's ``checks``. A check whose metric the log does not carry returns nothing.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch.context import CheckResult
from ckptctl.core.watch.model import (
    GRAD_NORM_SHIFT,
    LOSS_SCALE_RESTART,
    SCHEDULE_RESET,
    SPIKE,
    THROUGHPUT_REGRESSION,
    TOKENS_MISMATCH,
    Finding,
    TracePoint,
    WatchConfig,
    fmt_num,
)
from ckptctl.core.watch.stats import quantile


def _series(points: Sequence[TracePoint], key: str) -> list[tuple[int, float, TracePoint]]:
    out = []
    for p in points:
        v = p.metrics.get(key)
        if v is not None and math.isfinite(v):
            out.append((p.step, v, p))
    return out


def _rate(series: Sequence[tuple[int, float, TracePoint]]) -> float | None:
    """Median increase per step between consecutive points."""
    rates = [
        (b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(series) if b[0] > a[0]
    ]
    return statistics.median(rates) if rates else None


def check_tokens(
    pre: Sequence[TracePoint],
    post: Sequence[TracePoint],
    resume_step: int | None,
    checkpoint_tokens: float | None,
    cfg: WatchConfig,
) -> CheckResult:
    """The resumed run's tokens (or samples) counter continues from the checkpoint's value.

    Expected at the first resumed point: the checkpoint's value (the caller's manifest
    ``tokens_seen``, or the restore line's) plus the pre-failure rate times the steps
    since the checkpoint; without one, the pre-failure counter at that step (a re-run
    step) or extrapolated from the nearest earlier point. A difference of more than
    ``tokens_rel_tol`` steps' worth is ``tokens-mismatch``: data replayed (lower) or
    skipped (higher) even when the step counter looks right.
    """
    res = CheckResult()
    key = lk.TOKENS if any(lk.TOKENS in p.metrics for p in (*pre, *post)) else lk.SAMPLES
    pre_s, post_s = _series(pre, key), _series(post, key)
    if not post_s:
        return res
    rate = _rate(pre_s) or _rate(post_s)
    if rate is None or rate <= 0:
        return res
    step, actual, point = post_s[0]
    expected: float | None = None
    source = ""
    if checkpoint_tokens is not None and resume_step is not None:
        expected = checkpoint_tokens + (step - resume_step) * rate
        source = f"the checkpoint's {fmt_num(checkpoint_tokens)} at step {resume_step}"
    else:
        earlier = [s for s in pre_s if s[0] <= step]
        if earlier:
            s0, v0, _ = earlier[-1]
            expected = v0 + (step - s0) * rate
            source = f"the pre-failure counter ({fmt_num(v0)} at step {s0})"
    if expected is None:
        return res
    diff = actual - expected
    tol = max(cfg.tokens_rel_tol * rate, 1e-6 * abs(expected))
    res.checks["tokens"] = {
        "key": key,
        "step": step,
        "actual": actual,
        "expected": expected,
        "per_step": rate,
        "difference_steps": diff / rate,
        "ok": abs(diff) <= tol,
    }
    if abs(diff) > tol:
        what = "replayed" if diff < 0 else "skipped"
        res.findings.append(
            Finding(
                verdict=TOKENS_MISMATCH,
                message=f"{key} seen at step {step} is {fmt_num(actual)}, expected {fmt_num(expected)} "
                f"from {source} at {fmt_num(rate)}/step: off by {fmt_num(abs(diff / rate))} steps of data "
                f"({what})",
                step=step,
                line_no=point.line_no,
            )
        )
    return res


def _predict_lr(pre_s: Sequence[tuple[int, float, TracePoint]], step: int) -> float | None:
    """The pre-failure learning rate at ``step``: the logged value at a re-run step, else a
    line through the last points at or before it, clamped to the schedule's range."""
    exact = [v for s, v, _ in pre_s if s == step]
    if exact:
        return exact[-1]
    earlier = [(s, v) for s, v, _ in pre_s if s <= step][-5:]
    if not earlier:
        return None
    if len(earlier) == 1 or earlier[-1][1] == earlier[-2][1]:
        return earlier[-1][1]  # a constant stretch (a step schedule between milestones): held flat
    xs, ys = [e[0] for e in earlier], [e[1] for e in earlier]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    value = ys[-1] + slope * (step - xs[-1])
    top = max(v for _, v, _ in pre_s)
    return min(max(value, 0.0), top)


#: Learning-rate points after the resume a ``schedule-reset`` needs (never a verdict from one sample).
MIN_LR_POINTS = 3


def check_schedule(
    pre: Sequence[TracePoint], post: Sequence[TracePoint], cfg: WatchConfig
) -> CheckResult:
    """The learning rate after the resume follows the pre-failure schedule (``schedule-reset``)."""
    res = CheckResult()
    pre_s, post_s = _series(pre, lk.LR), _series(post, lk.LR)
    if len(pre_s) < 2 or not post_s:
        return res
    peak = max(v for _, v, _ in pre_s)
    if peak <= 0:
        return res
    judged = post_s[:5]
    # A rate logged far less often than the loss (once per epoch) is judged at its own cadence:
    # its first points after the resume, however many steps they span; a verdict needs a few.
    devs: list[float] = []
    pairs: list[tuple[int, float, float]] = []
    for step, actual, _ in judged:
        predicted = _predict_lr(pre_s, step)
        if predicted is None:
            continue
        devs.append(abs(actual - predicted) / max(abs(predicted), 0.05 * peak))
        pairs.append((step, actual, predicted))
    if not devs:
        return res
    dev = statistics.median(devs)
    step, actual, predicted = pairs[0]
    res.checks["schedule"] = {
        "step": step,
        "lr": actual,
        "predicted_lr": predicted,
        "relative_deviation": dev,
        "ok": dev <= cfg.lr_rel_tol,
    }
    if dev > cfg.lr_rel_tol and len(devs) < MIN_LR_POINTS:
        res.notes.append(
            (None, f"learning rate {fmt_num(actual)} at step {step} where the pre-failure schedule predicts "
             f"{fmt_num(predicted)}, but only {len(devs)} learning-rate point(s) after the resume: not enough to judge")
        )
        res.checks["schedule"]["ok"] = None
    elif dev > cfg.lr_rel_tol:
        ratio = actual / predicted if predicted else math.inf
        if ratio < 0.5:
            kind = "far below the schedule: a restarted warm-up or a lost scheduler state"
        elif ratio > 2:
            kind = f"x{ratio:.3g} the schedule: the scheduler or optimizer state was not restored"
        else:
            kind = "off the schedule: the schedule started over"
        res.findings.append(
            Finding(
                verdict=SCHEDULE_RESET,
                message=f"learning rate {fmt_num(actual)} at step {step} where the pre-failure schedule "
                f"predicts {fmt_num(predicted)} ({kind}; median deviation {dev:.0%} over "
                f"{len(devs)} point(s), tolerance {cfg.lr_rel_tol:.0%})",
                step=step,
                line_no=judged[0][2].line_no,
            )
        )
    return res


_HIGHER_IS_BETTER = (lk.TOKENS_PER_S, lk.SAMPLES_PER_S, lk.STEPS_PER_S, lk.MFU, lk.TFLOPS)


def check_throughput(
    pre: Sequence[TracePoint], post: Sequence[TracePoint], cfg: WatchConfig
) -> CheckResult:
    """Post-resume throughput against the pre-failure band (a note: suspect the new node)."""
    res = CheckResult()
    for key in (*_HIGHER_IS_BETTER, lk.SEC_PER_STEP):
        pre_v = [v for _, v, _ in _series(pre, key) if v > 0][-50:]
        # the first point after a restart pays for compilation and warm caches
        post_v = [v for _, v, _ in _series(post, key) if v > 0][1 : cfg.num_steps + 1]
        if len(pre_v) >= 3 and len(post_v) >= 3:
            break
    else:
        return res
    if key == lk.SEC_PER_STEP:
        pre_v, post_v = [1 / v for v in pre_v], [1 / v for v in post_v]
    base, post_med = statistics.median(pre_v), statistics.median(post_v)
    p10 = quantile(sorted(pre_v), 0.1)
    low = post_med < (1 - cfg.throughput_drop) * base and post_med < p10
    res.checks["throughput"] = {
        "key": key if key != lk.SEC_PER_STEP else "steps_per_s (from time per step)",
        "pre_median": base,
        "pre_p10": p10,
        "post_median": post_med,
        "ratio": post_med / base if base else None,
        "ok": not low,
    }
    if low:
        res.notes.append(
            (
                THROUGHPUT_REGRESSION,
                f"throughput after the resume is {post_med / base:.0%} of the pre-failure median "
                f"({fmt_num(post_med)} vs {fmt_num(base)}, {res.checks['throughput']['key']}): suspect "
                "the replacement node's fabric or GPUs, not the resume (RB-7)",
            )
        )
    return res


def check_loss_scale_and_grad_norm(
    pre: Sequence[TracePoint], post: Sequence[TracePoint], cfg: WatchConfig
) -> CheckResult:
    """Notes: an fp16 loss scale starting over high, and a grad-norm level shift."""
    res = CheckResult()
    pre_s, post_s = _series(pre, lk.LOSS_SCALE), _series(post, lk.LOSS_SCALE)
    if pre_s and post_s:
        before = statistics.median(v for _, v, _ in pre_s[-3:])
        after = post_s[0][1]
        restarted = before > 0 and after >= 4 * before
        res.checks["loss_scale"] = {"pre": before, "post_first": after, "restarted": restarted}
        if restarted:
            res.notes.append(
                (
                    LOSS_SCALE_RESTART,
                    f"the loss scale is {fmt_num(after)} after the resume, {fmt_num(before)} before: the "
                    "grad scaler's state was not restored (it starts over; harmless unless it recurs)",
                )
            )
    pre_g = [v for _, v, _ in _series(pre, lk.GRAD_NORM)][-20:]
    post_g = [v for _, v, _ in _series(post, lk.GRAD_NORM)][1 : cfg.num_steps + 1]
    if len(pre_g) >= 3 and len(post_g) >= 3:
        before, after = statistics.median(pre_g), statistics.median(post_g)
        shifted = before > 0 and (after > 3 * before or after < before / 3)
        res.checks["grad_norm"] = {"pre_median": before, "post_median": after, "shifted": shifted}
        if shifted:
            res.notes.append(
                (
                    GRAD_NORM_SHIFT,
                    f"the gradient norm's median is {fmt_num(after)} after the resume, "
                    f"{fmt_num(before)} before: optimizer state or data order may differ",
                )
            )
    return res


def self_baseline_shift(
    pre: Sequence[TracePoint], post: Sequence[TracePoint], cfg: WatchConfig
) -> Finding | None:
    """With too few pre-failure points for a trend: a sustained level shift is a spike.

    Reference: the last (up to 5) pre-failure losses plus the post-resume losses
    before the shift. A shift: from some post-resume point on, at least 3 points,
    every one above every reference point, and their median above the reference
    median by ``self_baseline_rel_shift`` of its size. Training loss does not climb
    by a quarter and stay there on a healthy run.
    """
    ref0 = [p.loss for p in pre if math.isfinite(p.loss)][-5:]
    losses = [p for p in post if math.isfinite(p.loss)]
    if not ref0:
        return None
    for j in range(len(losses) - 2):
        ref = ref0 + [p.loss for p in losses[:j]]
        after = [p.loss for p in losses[j:]]
        level = statistics.median(ref)
        if min(after[:3]) > max(ref) and statistics.median(after) > level + cfg.self_baseline_rel_shift * abs(level):
            p = losses[j]
            return Finding(
                verdict=SPIKE,
                message=f"the loss rose to {fmt_num(statistics.median(after))} (median of {len(after)} "
                f"points from step {p.step}) from a level of {fmt_num(level)} ({len(ref)} point(s) before) "
                f"and stayed there: more than {cfg.self_baseline_rel_shift:.0%} above (self-baseline)",
                step=p.step,
                line_no=p.line_no,
            )
    return None
