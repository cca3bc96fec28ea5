"""Use case: is the loss continuous across a resume? Returns a ``WatchResult``; never prints.

Three ways in, one decision (``ckptctl.core.watch.analyze.analyze``):

* ``watch_log(path, ...)`` reads a log file, an fsspec URL or ``-`` (stdin),
  whole or ``follow=True`` until a decision or ``timeout_s``.
* ``watch_lines(lines, ...)`` consumes any iterable of lines, e.g. the live
  output of a torchrun child, and stops as soon as the verdict is decided.
* ``LossWatcher`` is the push form for a caller that already owns the read
  loop: ``feed(line)`` returns the result once decided, ``result()`` at any time.

``ckptctl recover`` acts on the verdict's class (``core.watch.model.VERDICT_CLASS``):
``continuous`` (good) lets the run go on; a bad one (``spike``, ``nan``,
``replayed-steps``, ``skipped-steps``, ``tokens-mismatch``, ``data-position-mismatch``,
``schedule-reset``, ``data-stream-reset``, ``diverged``) means fall back one
checkpoint; ``insufficient-data`` (undecided) means the question is still open (not
enough steps yet, or no pre-failure baseline): resumed, not verified. When the job has
ended, ``LossWatcher.result(final=True)`` judges a complete log on fewer than N
points (at least ``min_judged_points``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import IO, Any

from ckptctl.adapters import metric_sources
from ckptctl.adapters.follow import STDIN, LineReader, open_lines
from ckptctl.core.watch.logpattern import PatternError
from ckptctl.core.watch.losslog import AUTO, FORMATS
from ckptctl.core.watch.model import (
    CONTINUOUS,
    INSUFFICIENT,
    UNREAD_INPUT,
    WatchConfig,
    WatchConfigError,
    WatchReport,
)
from ckptctl.core.watch.session import WatchSession
from ckptctl.errors import InputError, UsageError

#: Version of the JSON document; additions keep it, renames/removals bump it.
SCHEMA = "ckptctl.watch/1"
#: How long ``--follow`` waits for a decision by default.
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_POLL_INTERVAL_S = 0.5


def make_config(**fields: Any) -> WatchConfig:
    """A ``WatchConfig`` whose range errors are usage errors (they come from flags)."""
    try:
        return WatchConfig(**fields)
    except WatchConfigError as e:
        raise UsageError(f"invalid threshold: {e}") from e


@dataclass(frozen=True, kw_only=True, slots=True)
class WatchResult:
    """The verdict on one resume, with every number behind it.

    ``to_json()`` is the documented ``--json`` document (docs/watch.md).
    """

    verdict: str
    """One of ``VERDICTS``: ``continuous`` is the only healthy one."""
    report: WatchReport
    """The analysis: resume, baseline, threshold, observed points, findings, explanation."""
    log: str
    """The log read (path, URL, ``-`` or a caller-chosen name for a stream)."""
    baseline_path: str | None
    log_format: str | None
    """Format of the log as detected or requested (None: no loss line recognised)."""
    baseline_format: str | None
    num_lines: int
    """Lines read from the log."""
    followed: bool
    timed_out: bool
    """The deadline ended reading before a decision."""
    config: WatchConfig

    @property
    def is_continuous(self) -> bool:
        return self.verdict == CONTINUOUS

    @property
    def decided(self) -> bool:
        """More log lines cannot change the verdict."""
        return self.report.decided

    def to_json(self) -> dict[str, Any]:
        r = self.report
        return {
            "schema": SCHEMA,
            "verdict": self.verdict,
            "decided": r.decided,
            "resume_step": r.resume_step,
            "resume_step_source": r.resume_step_source,
            "resume_detected_by": r.resume_detected_by,
            "resume_line": r.resume_line,
            "first_resumed_step": r.first_resumed_step,
            "baseline": r.baseline.to_json() if r.baseline else None,
            "threshold": r.threshold.to_json() if r.threshold else None,
            "observed": r.observed.to_json() if r.observed else None,
            "rerun": r.rerun.to_json() if r.rerun else None,
            "findings": [f.to_json() for f in r.findings],
            "explanation": list(r.explanation),
            "notes": list(r.notes),
            "note_codes": list(r.note_codes),
            "confidence": r.confidence,
            "checks": dict(r.checks),
            "log": {
                "path": self.log,
                "format": self.log_format,
                "num_lines": self.num_lines,
                "num_points": r.num_points,
                "rank": r.rank,
                "step_kind": r.step_kind,
                "step_axis": r.step_axis,
                "epoch_len": r.epoch_len,
                "step_axis_composed": r.step_axis_composed,
                "log_interval": r.log_interval,
                "num_segments": r.num_segments,
            },
            "baseline_log": (
                {
                    "path": self.baseline_path,
                    "format": self.baseline_format,
                    "num_points": r.num_baseline_points,
                }
                if self.baseline_path is not None
                else None
            ),
            "followed": self.followed,
            "timed_out": self.timed_out,
            "config": self.config.to_json(),
            "curve": r.curve.to_json() if r.curve else None,
        }


class LossWatcher:
    """Push API: ``feed(line)`` each line of the resumed run; the result once decided.

    The baseline (the pre-failure log) is read first, from ``baseline_path`` or
    ``baseline_lines``; without one the pre-failure lines must come through
    ``feed`` too (the same log across the restart).
    """

    def __init__(
        self,
        *,
        resume_step: int | None = None,
        config: WatchConfig | None = None,
        log_format: str = AUTO,
        pattern: str | None = None,
        baseline_path: str | None = None,
        baseline_lines: Iterable[str] | None = None,
        source: str = "<stream>",
        checkpoint_tokens: float | None = None,
    ) -> None:
        if resume_step is not None and resume_step < 0:
            raise UsageError(f"--resume-step must be >= 0, got {resume_step}")
        if log_format != AUTO and log_format not in FORMATS:
            raise UsageError(
                f"unknown log format {log_format!r}; choose auto or one of {', '.join(FORMATS)}"
            )
        if baseline_path is not None and baseline_lines is not None:
            raise UsageError("give the baseline as a path or as lines, not both")
        try:
            self._session = WatchSession(
                config=config,
                resume_step=resume_step,
                log_format=log_format,
                pattern=pattern,
                checkpoint_tokens=checkpoint_tokens,
            )
        except PatternError as e:
            raise UsageError(str(e)) from e
        self.source = source
        self.baseline_path = baseline_path
        if baseline_path is not None:
            if baseline_path == STDIN:
                raise UsageError("--baseline cannot be stdin ('-'); give the pre-failure log file")
            baseline_lines = (line for line in open_lines(baseline_path) if line is not None)
        if baseline_lines is not None:
            for line in baseline_lines:
                self._session.feed_baseline(line)
            self._session.end_baseline()
            if self._session.num_baseline_points == 0:
                name = baseline_path or "the baseline"
                raise InputError(
                    f"{name}: no training loss lines recognised",
                    hint=_FORMAT_HINT,
                )
            if baseline_path is None:
                self.baseline_path = "<lines>"

    @property
    def config(self) -> WatchConfig:
        return self._session.config

    @property
    def num_lines(self) -> int:
        return self._session.num_log_lines

    @property
    def num_points(self) -> int:
        return self._session.num_log_points

    def feed(self, line: str, *, evaluate: bool = True) -> WatchResult | None:
        """One line of the log; the result when the verdict is decided, else None."""
        report = self._session.feed(line, evaluate=evaluate)
        return None if report is None else self._result(report, timed_out=False)

    def result(self, *, timed_out: bool = False, final: bool = False) -> WatchResult:
        """The verdict on everything fed so far (``insufficient-data`` while undecided).

        ``final``: the log is complete; its last record is read, and fewer than N
        points after the resume may decide (``WatchConfig.min_judged_points``).
        """
        if final:
            self._session.end_log()
        return self._result(self._session.evaluate(final=final), timed_out=timed_out)

    def unread_samples(self) -> list[str]:
        """A few lines that carried numbers but gave no loss (for an error message)."""
        return list(self._session.parser.unread_samples)

    def _result(self, report: WatchReport, *, timed_out: bool) -> WatchResult:
        if timed_out and not report.decided:
            report = _with_note(report, "timed out before a decision")
        return WatchResult(
            verdict=report.verdict,
            report=report,
            log=self.source,
            baseline_path=self.baseline_path,
            log_format=self._session.log_format,
            baseline_format=self._session.baseline_format,
            num_lines=self._session.num_log_lines,
            followed=False,
            timed_out=timed_out,
            config=self._session.config,
        )


_FORMAT_HINT = (
    "watch reads key/value metrics (step/iter/iteration + loss/lm loss/train_loss ...) in any "
    f"logger's shape (named: {', '.join(FORMATS)}), TensorBoard event files and MLflow runs; "
    "for anything else give --pattern with named groups (?P<step>...) and (?P<loss>...)"
)


def _with_note(report: WatchReport, note: str) -> WatchReport:
    return replace(report, notes=(*report.notes, note))


def _unread(report: WatchReport, damage: list[str]) -> WatchReport:
    """No verdict from unread bytes: ``continuous`` past damage in the source becomes
    ``insufficient-data`` with the reason; a problem found in what was read stands."""
    shown = damage[:3] + ([f"... and {len(damage) - 3} more"] if len(damage) > 3 else [])
    notes = (*report.notes, *(f"unread: {d}" for d in shown))
    codes = (*report.note_codes, UNREAD_INPUT)
    if report.verdict != CONTINUOUS:
        return replace(report, notes=notes, note_codes=codes)
    return replace(
        report, verdict=INSUFFICIENT, decided=False, confidence=None, notes=notes, note_codes=codes,
        explanation=(*report.explanation, "decision: insufficient-data - part of the source could not be read "
                     "(see the notes); a resume is never judged continuous past bytes that were not read"),
    )  # fmt: skip


def watch_lines(
    lines: Iterable[str],
    *,
    resume_step: int | None = None,
    config: WatchConfig | None = None,
    log_format: str = AUTO,
    pattern: str | None = None,
    baseline_path: str | None = None,
    baseline_lines: Iterable[str] | None = None,
    stop_when_decided: bool = True,
    source: str = "<stream>",
) -> WatchResult:
    """Judge a resume from an iterable of lines; stops reading at the decision by default."""
    watcher = LossWatcher(
        resume_step=resume_step,
        config=config,
        log_format=log_format,
        pattern=pattern,
        baseline_path=baseline_path,
        baseline_lines=baseline_lines,
        source=source,
    )
    for line in lines:
        decided = watcher.feed(line, evaluate=stop_when_decided)
        if decided is not None:
            return decided
    return watcher.result(final=True)


def watch_log(
    path: str,
    *,
    resume_step: int | None = None,
    config: WatchConfig | None = None,
    log_format: str = AUTO,
    pattern: str | None = None,
    baseline_path: str | None = None,
    follow: bool = False,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    stdin: IO[str] | None = None,
    metric: str | None = None,
    checkpoint_tokens: float | None = None,
) -> WatchResult:
    """Judge the latest resume in the log at ``path`` (a file, an fsspec URL, or ``-``).

    ``path`` may also be a structured source read directly (more reliable than any
    text log): a TensorBoard event file or log directory, an MLflow run (its
    ``metrics/`` files); ``metric`` names the scalar that is the training loss
    (default: the best loss-like name). Gzip logs (``.gz``) are read as they are.

    Without ``follow`` the whole log is read, then judged. With ``follow`` the
    content already there is read and judged first; then new lines are judged as
    they arrive until the verdict is decided or ``timeout_s`` passes (None: no limit).
    Raises ``InputError`` when a complete (not followed) log has no loss line.
    """
    if timeout_s is not None and timeout_s < 0:
        raise UsageError(f"--timeout must be >= 0, got {timeout_s}")
    structured = None if path == STDIN else metric_sources.detect(path)
    if structured is not None:
        if follow:
            raise UsageError(f"--follow reads a growing text log; {path} is a {structured} source")
        damage: list[str] = []
        notes: list[str] = []
        result = watch_lines(
            metric_sources.read_lines(path, structured, metric=metric, damage=damage, notes=notes),
            resume_step=resume_step,
            config=config,
            baseline_path=baseline_path,
            stop_when_decided=False,
            source=path,
            log_format="jsonl",
        )
        report = result.report
        for note in notes:
            report = _with_note(report, note)
        report = _unread(report, damage) if damage else report
        return replace(result, verdict=report.verdict, report=report)
    if metric is not None:
        raise UsageError("--metric names a scalar of a TensorBoard or MLflow source; LOG is a text log")
    watcher = LossWatcher(
        resume_step=resume_step,
        config=config,
        log_format=log_format,
        pattern=pattern,
        baseline_path=baseline_path,
        source=path,
        checkpoint_tokens=checkpoint_tokens,
    )
    reader = open_lines(
        path, follow=follow, timeout_s=timeout_s, poll_interval_s=poll_interval_s, stdin=stdin
    )
    result = _read_until_decided(watcher, reader, final=not follow)
    if not follow and watcher.num_points == 0:
        what = "stdin" if path == STDIN else path
        tried = watcher.unread_samples()
        raise InputError(
            f"{what}: no training loss lines recognised in {watcher.num_lines} line(s)"
            + (f" (e.g. {'; '.join(tried[:3])})" if tried else ""),
            hint=_FORMAT_HINT,
        )
    report = result.report
    if reader.num_truncations:
        report = _with_note(report, "the log shrank while followed (truncated or rotated)")
    if follow and watcher.num_points == 0:
        report = _with_note(report, f"no training loss line read in {watcher.num_lines} line(s)")
    return replace(result, report=report, followed=follow)


#: Largest manifest read for --checkpoint (a manifest lists files; 16 MiB is ~100k of them).
MAX_MANIFEST_BYTES = 16 << 20


def read_checkpoint(url: str) -> tuple[int, float | None]:
    """(step, tokens or samples seen) from the ckptctl manifest of a checkpoint directory."""
    from ckptctl.adapters.storage import Storage
    from ckptctl.core.verify.manifest import MANIFEST_NAME, ManifestError, parse_manifest

    storage, path = Storage.for_url(url)
    target = path.rstrip("/") + "/" + MANIFEST_NAME
    entry = storage.info(target)
    if entry is None or entry.is_dir:
        raise InputError(
            f"{url}: no {MANIFEST_NAME} (written by ckptctl.training)",
            hint="give --resume-step N instead",
        )
    if entry.size_bytes > MAX_MANIFEST_BYTES:
        raise InputError(f"{url}/{MANIFEST_NAME}: {entry.size_bytes} bytes, over the {MAX_MANIFEST_BYTES} limit")
    try:
        manifest = parse_manifest(storage.read_bytes(target))
    except ManifestError as e:
        raise InputError(f"{url}/{MANIFEST_NAME}: {e}") from e
    seen = manifest.tokens_seen if manifest.tokens_seen is not None else manifest.samples_seen
    return manifest.step, None if seen is None else float(seen)


def _read_until_decided(watcher: LossWatcher, reader: LineReader, *, final: bool = False) -> WatchResult:
    caught_up = False
    for line in reader:
        if line is None:
            # Caught up with the writer: judge what is there before waiting for more.
            caught_up = True
            current = watcher.result()
            if current.decided:
                return current
            continue
        decided = watcher.feed(line, evaluate=caught_up)
        if decided is not None:
            return decided
    return watcher.result(timed_out=reader.timed_out, final=final)
