"""Incremental use of the watch: feed a baseline, then a live log line by line.

Pure, stdlib only. ``WatchSession`` keeps the parsed events and runs
``ckptctl.core.watch.analyze.analyze`` only once something that could be a resume has
been seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ckptctl.core.watch.analyze import analyze
from ckptctl.core.watch.context import DataPosition
from ckptctl.core.watch.datapos import parse_data_position
from ckptctl.core.watch.logevents import LogEvent, LossPoint, ResumeMarker
from ckptctl.core.watch.losslog import AUTO, LossLogParser
from ckptctl.core.watch.model import WatchConfig, WatchReport


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
        checkpoint_tokens: float | None = None,
    ) -> None:
        self.config = config or WatchConfig()
        self.resume_step = resume_step
        self.checkpoint_tokens = checkpoint_tokens
        self._log_parser = LossLogParser(log_format, pattern)
        self._baseline_parser = LossLogParser(log_format, pattern)
        self._log_events: list[LogEvent] = []
        self._baseline_events: list[LogEvent] | None = None
        self._baseline_positions: list[DataPosition] = []
        self._log_positions: list[DataPosition] = []
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
        position = parse_data_position(line, self._baseline_parser.num_lines, "baseline")
        if position is not None:
            self._baseline_positions.append(position)

    def end_baseline(self) -> None:
        """The baseline is complete: emit its last multi-line record."""
        if self._baseline_events is not None:
            self._baseline_events.extend(self._baseline_parser.flush())

    def end_log(self) -> None:
        """The log is complete (not followed): emit its last multi-line record."""
        self._log_events.extend(self._log_parser.flush())

    @property
    def parser(self) -> LossLogParser:
        """The log's parser (for its counters and the lines it could not read)."""
        return self._log_parser

    def feed(self, line: str, *, evaluate: bool = True) -> WatchReport | None:
        """One line of the log; the report if the verdict is now decided, else None."""
        events = self._log_parser.feed(line)
        position = parse_data_position(line, self._log_parser.num_lines, "log")
        if position is not None:
            self._log_positions.append(position)
        if not events:
            return None
        self._log_events.extend(events)
        for e in events:
            if (
                (isinstance(e, ResumeMarker) and e.kind in ("restore", "restart"))
                or self._baseline_events is not None
                or (isinstance(e, LossPoint) and self._watch.is_boundary(e))
            ):
                self._maybe_resumed = True
        if not (evaluate and self._maybe_resumed and any(isinstance(e, LossPoint) for e in events)):
            return None
        report = self.evaluate()
        return report if report.decided else None

    def evaluate(self, *, final: bool = False) -> WatchReport:
        """Analyse everything read so far (``final``: the log is complete; see ``analyze``)."""
        pending = self._log_parser.peek()
        log_events = self._log_parser.restarts.drop_cancelled(self._log_events)
        baseline = self._baseline_events
        self._report = analyze(
            log_events if pending is None else [*log_events, pending],
            baseline_events=baseline if baseline is None else self._baseline_parser.restarts.drop_cancelled(baseline),
            resume_step=self.resume_step,
            config=self.config,
            checkpoint_tokens=self.checkpoint_tokens,
            final=final,
            data_positions=[*self._baseline_positions, *self._log_positions],
        )
        return self._report
