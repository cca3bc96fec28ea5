"""What a watch check reads (``CheckContext``, ``DataPosition``) and what it returns (``CheckResult``).

Pure, stdlib only. ``analyze`` reads the log once (rank, steps, segments, the resume)
and hands every registered check (``ckptctl.core.watch.registry.CHECKS``) the same
context; each check returns its findings, notes, explanation lines and numbers, and
``analyze`` composes them into the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptctl.core.watch.axis import Axis
from ckptctl.core.watch.logevents import LogEvent
from ckptctl.core.watch.model import (
    BaselineStats,
    Finding,
    ObservedStats,
    RerunStats,
    Segment,
    ThresholdStats,
    TracePoint,
    WatchConfig,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class DataPosition:
    """One data-position line of ``ckptctl.training`` (format: ``ckptctl.core.watch.datapos``)."""

    kind: str
    """``recorded`` (the position saved with the checkpoint of ``step``) or ``first-batch``
    (the position of the first batch a run resumed from the checkpoint of ``step`` draws)."""
    step: int
    epoch: int | None
    index: int | None
    """Position inside the epoch, in the loader's own unit (batches or samples consumed)."""
    digest: str | None
    """A digest of a stateful loader's state, when it has no epoch/index."""
    rank: int | None
    line_no: int
    source: str
    """``"log"`` or ``"baseline"``."""

    def same_position(self, other: DataPosition) -> bool:
        return (self.epoch, self.index, self.digest) == (other.epoch, other.index, other.digest)

    def describe(self) -> str:
        if self.digest is not None and self.epoch is None:
            return f"digest {self.digest}"
        where = f"epoch {self.epoch} index {self.index}"
        return where + (f" digest {self.digest}" if self.digest is not None else "")


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckContext:
    """The log as read, around the resume being judged."""

    cfg: WatchConfig
    final: bool
    """The log is complete (not followed)."""
    sources: Sequence[tuple[str, Sequence[LogEvent]]]
    """The events read, ``("baseline", ...)`` first when there is a separate baseline file."""
    resumed: Segment
    """The resumed run's first segment (steps read as checkpoint step + counter when relative)."""
    pre_segments: Sequence[Segment]
    """Every segment before the resume, in log order."""
    post_segments: Sequence[Segment]
    """The resumed segment and every later one."""
    pre: Sequence[TracePoint]
    """The pre-failure trajectory: for each step the value of the latest run that logged it."""
    post: Sequence[TracePoint]
    """Every point from the resume on."""
    resume_step: int | None
    """The checkpoint step as given by the caller (``--resume-step``), else None."""
    rs: int | None
    """The checkpoint step: given, else the restore line's."""
    convention: str
    """When a step is logged: ``after`` / ``before`` the update, or ``unknown`` (``after`` too
    when a save line naming ``rs`` came after the line logging that step)."""
    window: tuple[int, float] | None
    """Where the resumed run's first position may be (``axis.resume_window``); None without ``rs``."""
    interval: int
    """Steps between logged points (median)."""
    gap_tol: float
    """The largest forward jump that is still not a gap."""
    first_step_ever: int | None
    history_start: int | None
    """``first_step_ever`` when the log itself holds the history; None with a separate
    ``--baseline`` file (an excerpt need not start where training did)."""
    axis: Axis
    """What the log's positions count (step, epoch, epoch-batch: ``axis``)."""
    sec_per_step: float | None
    logged_steps: bool
    """The log numbers its steps (not ordinal or epoch-aligned positions)."""
    checkpoint_tokens: float | None
    """Tokens (or samples) seen at the checkpoint: the caller's manifest value, else the restore line's."""
    data_positions: Sequence[DataPosition] = ()
    """The data-position lines read (baseline first, then the log), in reading order."""

    @property
    def judged(self) -> Sequence[TracePoint]:
        """The first N points after the resume (``WatchConfig.num_steps``)."""
        return self.post[: self.cfg.num_steps]

    @property
    def unit(self) -> str:
        return "step" if self.logged_steps else "point"


@dataclass(frozen=True, kw_only=True, slots=True)
class LossJudgement:
    """What the loss check found besides findings: the numbers of the report and whether it decided."""

    baseline: BaselineStats | None = None
    threshold: ThresholdStats | None = None
    observed: ObservedStats | None = None
    rerun: RerunStats | None = None
    decided: bool = False
    """The loss judgement is complete (N points, or a complete log with enough of them)."""
    self_based: bool = False
    """Judged against the run's own level (too few pre-failure points for a trend)."""


@dataclass(slots=True)
class CheckResult:
    """What one check found: verdict findings, notes (``(code or None, text)``), explanation
    lines, its numbers for the report's ``checks`` and, for the loss check, its judgement."""

    findings: list[Finding] = field(default_factory=list)
    notes: list[tuple[str | None, str]] = field(default_factory=list)
    explanation: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    loss: LossJudgement | None = None
