"""False-alarm and miss rates of ``ckptctl watch`` on generated loss curves.

Each trial is one resumed run: a power-law loss curve ``c + a * (t + t0) ** -alpha``
with noise proportional to the level (Gaussian, or Student-t with 3 degrees of
freedom for heavy tails), benign bumps that come and go on their own (a Poisson
process; height 2-6 noise sd, decay 3-20 steps) before and after the resume,
logging every 1, 5 or 10 steps, a crash 0-200 steps after the checkpoint, a
pre-failure log that sometimes lost its last lines (buffered output), and a
resume that is sometimes deterministic (re-run steps reproduce the pre-failure
losses) and otherwise re-runs the same batches give or take a tenth of the noise.

One trial in five resumes early in training (steps 25-80 of a curve that
still bends hard), where a straight baseline alone would be wrong.

* clean trials: the resume is correct; any verdict other than ``continuous`` is
  a false alarm.
* jump trials: at the resume the loss jumps by a fraction of its level, either
  for good or decaying over 5-50 steps (a bad restore that training partly
  repairs); ``continuous`` is a miss.

The curves go straight into ``ckptctl.core.watch.analyze.analyze`` (the same function the
CLI calls) as parsed points, with the checkpoint step given, default thresholds
unless ``--k``/``--min-rel-tol`` say otherwise.

Run: ``.venv/bin/python bench/bench_watch.py`` (about 20 s; ``--trials`` to change).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import dataclass

from ckptctl.core.watch.analyze import analyze
from ckptctl.core.watch.logevents import LogEvent, LossPoint, ResumeMarker
from ckptctl.core.watch.model import CONTINUOUS, WatchConfig

NOISE_LEVELS = (0.005, 0.02, 0.05)
"""Noise sd as a fraction of the loss level."""
JUMPS = (0.02, 0.05, 0.10, 0.20, 0.50)
"""Injected jump at the resume, as a fraction of the loss level."""


@dataclass(frozen=True)
class Trial:
    noise: float
    jump: float
    seed: int
    wander: float = 0.5
    """sd of the slow wander, in noise sds."""


def _bumps(
    rng: random.Random, first: int, last: int, sd_of: float
) -> list[tuple[int, float, float]]:
    """Benign bumps: (start step, height, decay steps), about one per 300 steps."""
    out = []
    t = first
    while True:
        t += int(rng.expovariate(1 / 300)) + 1
        if t > last:
            return out
        out.append((t, rng.uniform(2, 6) * sd_of, rng.uniform(3, 20)))


def _bump_at(bumps: list[tuple[int, float, float]], t: int) -> float:
    return sum(h * math.exp(-(t - s) / tau) for s, h, tau in bumps if t >= s)


def run_trial(trial: Trial, config: WatchConfig) -> tuple[str, bool]:
    """The verdict, and whether the injected jump (if any) stays for good."""
    rng = random.Random(trial.seed)
    c, a, alpha, t0 = (
        rng.uniform(1.5, 3.0),
        rng.uniform(2, 10),
        rng.uniform(0.2, 0.6),
        rng.uniform(50, 500),
    )
    interval = rng.choice((1, 1, 1, 5, 10))
    resume = interval * rng.randint(60, 1000)  # checkpoint step, a multiple of the log interval
    if rng.random() < 0.2:
        # Early in training: the curve still bends hard inside the baseline window.
        t0, resume = rng.uniform(2, 20), interval * rng.randint(25, 80)
    crash = resume + interval * rng.choice((0, 0, rng.randint(1, 20)))
    heavy = rng.random() < 0.5
    deterministic = rng.random() < 0.3

    def level(t: int) -> float:
        return c + a * (t + t0) ** -alpha

    def noise(t: int) -> float:
        z = rng.gauss(0, 1)
        if heavy:
            # Student-t(3), scaled to unit variance.
            chi2 = sum(rng.gauss(0, 1) ** 2 for _ in range(3))
            z = rng.gauss(0, 1) / math.sqrt(chi2 / 3) / math.sqrt(3)
        return trial.noise * level(t) * z

    # Slow wander (data order, domain mix): an AR(1) process per logged point with
    # sd of 0.5 noise sd and a correlation time of about 30 logged points.
    wander_sd = trial.wander * trial.noise
    rho = math.exp(-1 / 30)
    wander = [rng.gauss(0, wander_sd)]

    def drift(t: int) -> float:
        wander.append(rho * wander[-1] + math.sqrt(1 - rho * rho) * rng.gauss(0, wander_sd))
        return wander[-1] * level(t)

    sd = trial.noise * level(resume)
    first = max(interval, resume - 400 * interval)
    pre_bumps = _bumps(rng, first, crash, sd)
    post_bumps = _bumps(rng, resume, resume + 60 * interval, sd)
    pre_steps = list(range(first, crash + 1, interval))
    if rng.random() < 0.3:  # the crash lost the buffered tail of the log
        pre_steps = pre_steps[: max(10, len(pre_steps) - rng.randint(1, 40))]
    pre_loss = {t: level(t) + noise(t) + drift(t) + _bump_at(pre_bumps, t) for t in pre_steps}
    # Half the trials give the pre-failure log separately (``--baseline``, how
    # ``recover`` calls it); the other half one log where the trainer prints a
    # restore line before the resumed steps (a seamless resume, e.g. after a
    # preemption checkpoint, is invisible in one log without it).
    separate = rng.random() < 0.5
    pre_events: list[LogEvent] = []
    line = 0
    for t in pre_steps:
        line += 1
        pre_events.append(LossPoint(step=t, loss=pre_loss[t], line_no=line, fmt="bench"))
    events: list[LogEvent] = [] if separate else pre_events
    if not separate:
        line += 1
        events.append(ResumeMarker(line_no=line, step=resume, text="restored"))
    decay = rng.uniform(5, 50) * interval if rng.random() < 0.5 else math.inf
    for t in range(resume + interval, resume + (config.num_steps + 10) * interval + 1, interval):
        line += 1
        if t in pre_loss:
            # A re-run step trains on the same batch as before the crash: the same loss when
            # the training is deterministic, else give or take a tenth of the noise.
            value = pre_loss[t] if deterministic else pre_loss[t] + 0.1 * noise(t)
        else:
            value = level(t) + noise(t) + drift(t) + _bump_at(post_bumps, t)
        value += trial.jump * level(resume) * math.exp(-(t - resume) / decay)
        events.append(LossPoint(step=t, loss=value, line_no=line, fmt="bench"))
    baseline = pre_events if separate else None
    report = analyze(events, baseline_events=baseline, resume_step=resume, config=config)
    return report.verdict, math.isinf(decay)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400, help="clean trials per noise level")
    parser.add_argument(
        "--jump-trials", type=int, default=200, help="trials per noise level and jump"
    )
    parser.add_argument("--k", type=float, default=WatchConfig().k)
    parser.add_argument("--k-median", type=float, default=WatchConfig().k_median)
    parser.add_argument("--min-rel-tol", type=float, default=WatchConfig().min_rel_tol)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--wander", type=float, default=0.5, help="sd of the slow wander, in noise sds"
    )
    args = parser.parse_args()
    config = WatchConfig(k=args.k, k_median=args.k_median, min_rel_tol=args.min_rel_tol)
    started = time.perf_counter()
    seed = args.seed * 1_000_003
    print(
        f"ckptctl watch benchmark: k={config.k:g}, k_median={config.k_median:g}, min_rel_tol={config.min_rel_tol:g}, "
        f"N={config.num_steps}, W={config.window}, persistence={config.persistence}; "
        f"slow wander {args.wander:g} noise sd"
    )
    print(
        f"{args.trials} clean and {args.jump_trials} jumped trials per cell; verdict != continuous = alarm\n"
    )
    header = f"{'noise sd':>9} | {'false alarms':>13} | " + " | ".join(
        f"{'miss @' + format(j, '.0%'):>15}" for j in JUMPS
    )
    print(header)
    print(f"{'':>9} | {'':>13} | " + " | ".join(f"{'all (kept/dec)':>15}" for _ in JUMPS))
    print("-" * len(header))
    total_alarms = total_clean = 0
    for noise in NOISE_LEVELS:
        alarms = 0
        for _ in range(args.trials):
            seed += 1
            alarms += run_trial(Trial(noise, 0.0, seed, args.wander), config)[0] != CONTINUOUS
        total_alarms += alarms
        total_clean += args.trials
        cells = []
        for jump in JUMPS:
            counts = {True: [0, 0], False: [0, 0]}  # kept for good / decaying: [missed, trials]
            for _ in range(args.jump_trials):
                seed += 1
                verdict, kept = run_trial(Trial(noise, jump, seed, args.wander), config)
                counts[kept][0] += verdict == CONTINUOUS
                counts[kept][1] += 1
            missed = counts[True][0] + counts[False][0]
            cell = f"{missed / args.jump_trials:.0%} ({_rate(counts[True])}/{_rate(counts[False])})"
            cells.append(f"{cell:>15}")
        fa = f"{alarms / args.trials:.2%} ({alarms})"
        print(f"{noise:>9.1%} | {fa:>13} | " + " | ".join(cells))
    print(
        f"\noverall false-alarm rate: {total_alarms / total_clean:.2%} ({total_alarms}/{total_clean}); "
        "miss = continuous on a jumped run (kept: the jump stays; dec: it decays over 5-50 logged "
        f"points); {time.perf_counter() - started:.1f} s"
    )


def _rate(missed_trials: list[int]) -> str:
    missed, trials = missed_trials
    return f"{missed / trials:.0%}" if trials else "-"


if __name__ == "__main__":
    main()
