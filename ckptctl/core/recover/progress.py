"""Is the relaunched job making progress? recover's hang rule, pure (no clock: times are passed in).

A relaunched job is **hung** when it logs no training step within the *start deadline*
(counted from when it started running: a Slurm job waiting in the queue is not late),
or no new step for longer than the *progress timeout* after the last one. Hangs are
among the most common failures of large runs (a collective that never completes, a
rank stuck in I/O); torch's own watchdog needs ten minutes (NCCL) or thirty (gloo) to
notice one, and a job whose ranks all wait quietly may never end.

The timeout, unless fixed (``recover.progress_timeout_s``, ``--progress-timeout``):

    max(PROGRESS_FLOOR_S, STEP_FACTOR x the typical step interval seen so far)
      + the allowance for a checkpoint save

The typical interval is the median of the last ``INTERVALS_KEPT`` intervals between
step lines as ckptctl saw them arrive. The save allowance is twice the longest gap
seen across a save line (the trainer said it saves: the next step comes later), else
``SAVE_ALLOWANCE_S`` until one has been seen, so a slow save is not a hang. The floor
is torch's NCCL collective timeout: a shorter limit would cut torch's own diagnosis
short. A fixed timeout is used as given; ``0`` turns the check off (for either limit).

Which lines are steps is the watch's business: ``ProgressTracker`` reads each line
through the loss log parser (``core.watch.losslog``: every logger it knows), so a
line counts as progress exactly when the watch would read a training loss from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any, Literal

from ckptctl.core.watch.logevents import LossPoint, ResumeMarker
from ckptctl.core.watch.losslog import AUTO, LossLogParser

#: The least no-progress time that is a hang (s): torch's default NCCL collective timeout.
PROGRESS_FLOOR_S = 600.0
#: A hang is this many typical step intervals without a step (above the floor).
STEP_FACTOR = 10.0
#: Time allowed for a checkpoint save before one has been seen (s).
SAVE_ALLOWANCE_S = 300.0
#: Default start deadline (s): torchrun's rendezvous, the checkpoint load, the first step.
START_TIMEOUT_S = 1800.0
#: Step intervals kept for the typical one.
INTERVALS_KEPT = 50

HangKind = Literal["start", "progress"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProgressPolicy:
    """The two limits; ``None`` progress timeout: adapt (module docstring); ``0``: off."""

    start_timeout_s: float = START_TIMEOUT_S
    progress_timeout_s: float | None = None
    floor_s: float = PROGRESS_FLOOR_S
    step_factor: float = STEP_FACTOR
    save_allowance_s: float = SAVE_ALLOWANCE_S

    def describe(self) -> str:
        """One line for the plan."""
        start = "off" if self.start_timeout_s == 0 else f"{self.start_timeout_s:g} s"
        if self.progress_timeout_s == 0:
            prog = "off"
        elif self.progress_timeout_s is not None:
            prog = f"{self.progress_timeout_s:g} s (fixed)"
        else:
            prog = (
                f"adaptive: max({self.floor_s:g} s, {self.step_factor:g} x the step time) "
                f"+ a save allowance ({self.save_allowance_s:g} s until a save is seen)"
            )
        return f"first step within {start}; then a step at least every {prog}"

    def to_json(self) -> dict[str, Any]:
        return {
            "start_timeout_s": self.start_timeout_s,
            "progress_timeout_s": self.progress_timeout_s,
            "floor_s": self.floor_s,
            "step_factor": self.step_factor,
            "save_allowance_s": self.save_allowance_s,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Hang:
    """No progress: which limit, how long it waited, and the facts it was decided on."""

    kind: HangKind
    waited_s: float
    limit_s: float
    basis: str
    """How the limit was set (``fixed``, ``start deadline``, ``floor``, ``10 x step time 3.1 s`` ...)."""
    last_step: int | None
    steps_seen: int

    @property
    def reason(self) -> str:
        if self.kind == "start":
            return (
                f"hang: no training step logged {self.waited_s:.0f} s after the job started "
                f"(start deadline {self.limit_s:g} s)"
            )
        return (
            f"hang: no new training step for {self.waited_s:.0f} s after step {self.last_step} "
            f"(progress timeout {self.limit_s:.0f} s: {self.basis})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "waited_s": round(self.waited_s, 3),
            "limit_s": round(self.limit_s, 3),
            "basis": self.basis,
            "last_step": self.last_step,
            "steps_seen": self.steps_seen,
            "reason": self.reason,
        }


@dataclass(slots=True)
class ProgressTracker:
    """Feed the job's lines with the time each arrived; ``check(now)`` says whether it hangs."""

    policy: ProgressPolicy = field(default_factory=ProgressPolicy)
    started_at: float | None = None
    """When the job started running (None while it waits to, e.g. PENDING under Slurm)."""
    last_step_at: float | None = None
    last_step: int | None = None
    steps_seen: int = 0
    last_step_by_rank: dict[int | None, int | None] = field(default_factory=dict)
    intervals: list[float] = field(default_factory=list)
    save_seen_at: float | None = None
    longest_save_gap: float | None = None
    _parser: LossLogParser = field(default_factory=lambda: LossLogParser(AUTO, None))

    def running(self, now: float) -> None:
        """The job runs (from now on, unless it already did): the start deadline counts from here."""
        if self.started_at is None:
            self.started_at = now

    def feed(self, line: str, now: float) -> None:
        """One line of the job's output, arrived at ``now``."""
        self.running(now)
        for e in self._parser.feed(line):
            if isinstance(e, LossPoint):
                self._step(e, now)
            elif isinstance(e, ResumeMarker) and e.kind == "save":
                self.save_seen_at = now

    def _step(self, p: LossPoint, now: float) -> None:
        self.last_step_by_rank[p.rank] = p.step
        if self.last_step_at is not None:
            gap = now - self.last_step_at
            if self.save_seen_at is not None and self.save_seen_at >= self.last_step_at:
                self.longest_save_gap = max(gap, self.longest_save_gap or 0.0)
            else:
                self.intervals.append(gap)
                del self.intervals[:-INTERVALS_KEPT]
        self.last_step_at = now
        self.last_step = p.step if p.step is not None else self.last_step
        self.steps_seen += 1
        self.save_seen_at = None

    @property
    def typical_step_s(self) -> float | None:
        return median(self.intervals) if len(self.intervals) >= 3 else None

    def progress_limit(self) -> tuple[float, str]:
        """The progress timeout now (s) and how it was set."""
        pol = self.policy
        if pol.progress_timeout_s is not None:
            return pol.progress_timeout_s, "fixed"
        typical = self.typical_step_s
        base, basis = pol.floor_s, f"floor {pol.floor_s:g} s"
        if typical is not None and typical * pol.step_factor > base:
            base, basis = typical * pol.step_factor, f"{pol.step_factor:g} x step time {typical:.3g} s"
        if self.longest_save_gap is not None:
            allowance, why = 2 * self.longest_save_gap, f"2 x the longest save seen {self.longest_save_gap:.3g} s"
        else:
            allowance, why = pol.save_allowance_s, f"save allowance {pol.save_allowance_s:g} s"
        return base + allowance, f"{basis} + {why}"

    def check(self, now: float) -> Hang | None:
        """A ``Hang`` when a limit has passed at ``now``; None while the job progresses (or waits to run)."""
        if self.started_at is None:
            return None
        if self.last_step_at is None:
            limit = self.policy.start_timeout_s
            waited = now - self.started_at
            if limit > 0 and waited > limit:
                return Hang(kind="start", waited_s=waited, limit_s=limit, basis="start deadline",
                            last_step=None, steps_seen=0)
            return None
        limit, basis = self.progress_limit()
        waited = now - self.last_step_at
        if limit > 0 and waited > limit:
            return Hang(kind="progress", waited_s=waited, limit_s=limit, basis=basis,
                        last_step=self.last_step, steps_seen=self.steps_seen)
        return None

    def waiting_for(self) -> str:
        """What the tracker waits for, for people (``first step within 1800 s``)."""
        if self.last_step_at is None:
            limit = self.policy.start_timeout_s
            return "the first training step" + ("" if limit == 0 else f" (start deadline {limit:g} s)")
        limit, basis = self.progress_limit()
        return f"the next training step (progress timeout {limit:.0f} s: {basis})" if limit > 0 else "the next step"
