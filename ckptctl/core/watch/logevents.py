"""What the log reader finds: loss points and checkpoint markers; how a marker line is told.

Pure, stdlib only (``ckptctl.core.watch.losslog`` is the reader; these are its values).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptctl.core.watch import logtokens as lt

#: Metrics a point may carry (``LossPoint.metrics`` keys).
METRICS = (
    lt.LR, lt.TOKENS, lt.SAMPLES, lt.SEC_PER_STEP, lt.TOKENS_PER_S, lt.SAMPLES_PER_S,
    lt.STEPS_PER_S, lt.MFU, lt.TFLOPS, lt.LOSS_SCALE, lt.GRAD_NORM,
)  # fmt: skip


# A restore: a verb of loading/resuming with a checkpoint-ish object (not "Loading dataset").
_RESTORE_RE = re.compile(
    r"\b(?:resum\w*|restor\w*|load\w*|continu\w* training|start\w* training from)\b", re.IGNORECASE
)
_SAVE_RE = re.compile(r"\b(?:sav(?:e|ed|ing)|writ\w+ checkpoint)\b|\bCHECKPOINT\s*:", re.IGNORECASE)
_CKPT_NOUN_RE = re.compile(
    r"checkpoint|ckpt|\bstates?\b|\bmodel\b|\btrainer\b|\btraining\b|\bweights\b|\.pth?\b|\bfrom step\b",
    re.IGNORECASE,
)
_PATH_STEP_RE = re.compile(
    r"(?:global_step|step|iter|iteration|checkpoint|ckpt)(?:[_=-]|(?<=global_step))(\d{1,15})(?!\d)", re.IGNORECASE
)


@dataclass(frozen=True, kw_only=True, slots=True)
class LossPoint:
    """One training loss read from a log (one line, or one multi-line record)."""

    step: int | None
    """The step counter as logged; ``None`` for formats without one (HF Trainer's dict)."""
    loss: float
    """May be NaN or +-Inf: the detector needs to see them."""
    line_no: int
    """1-based line number in its source (physical line; tqdm redraws share one)."""
    fmt: str
    """The format that read it (one of ``FORMATS`` or ``"pattern"``)."""
    rank: int | None = None
    """Rank from the payload (``rank=``, JSON ``rank``) or else from the torchrun tag."""
    epoch: float | None = None
    """Epoch when the format logs one (HF Trainer, Lightning)."""
    redraws_previous: bool = False
    """True when this is a progress bar redrawn at the same step: it replaces the previous value."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Other values of the record by meaning (``METRICS``): lr, tokens, tokens_per_s, ..."""
    wall: float | None = None
    """Seconds of the line's timestamp (or a ``time`` field), for lost-line accounting."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumeMarker:
    """A line where the trainer says it restored (or saved) a checkpoint."""

    line_no: int
    step: int | None
    """The step the trainer names, when the line has one."""
    text: str
    """The line, cleaned (ANSI colours and torchrun tags removed), for the explanation."""
    kind: str = "restore"
    """``restore`` (starts a resumed run), ``restart`` (the start-up lines printed again, no restore
    line: ``RestartDetector``) or ``save`` (information only)."""
    tokens: float | None = None
    """Tokens (or samples) seen the line names, when it does."""


LogEvent = LossPoint | ResumeMarker


#: Every marker line holds one of these (lower case): most lines skip the regexes.
MARKER_HINTS = ("resum", "restor", "load", "continu", "start", "sav", "writ", "checkpoint")


def match_marker(text: str, body: str, line_no: int, doc: dict[str, Any] | None) -> ResumeMarker | None:
    lower = body.lower()
    for hint in MARKER_HINTS:  # (a loop, not any(): this runs on every line)
        if hint in lower:
            break
    else:
        return None
    if doc is not None:
        words = " ".join([*map(str, doc.keys()), *(v for v in doc.values() if isinstance(v, str))])
        if not _RESTORE_RE.search(words):
            return None
        fields = lt.dict_fields(doc)
    else:
        restore = _RESTORE_RE.search(body)
        save = _SAVE_RE.search(body) if restore is None else None
        if restore is None and save is None:
            return None
        if not _CKPT_NOUN_RE.search(body):
            return None
        fields = lt.tokenize(body).fields
        if save is not None:
            return ResumeMarker(line_no=line_no, step=marker_step(body, fields), text=text[:200], kind="save")
    tokens: float | None = None
    for f in fields:
        meaning = lt.classify_key(f.key, f.unit)
        if meaning is not None and meaning[0] in (lt.TOKENS, lt.SAMPLES) and tokens is None:
            tokens = f.value
    return ResumeMarker(line_no=line_no, step=marker_step(body, fields), text=text[:200], tokens=tokens)


def marker_step(body: str, fields: tuple[lt.Field, ...]) -> int | None:
    best: tuple[int, int] | None = None
    for f in fields:
        meaning = lt.classify_key(f.key, f.unit)
        is_step = meaning is not None and meaning[0] == lt.STEP and lt.is_count(f.value)
        if is_step and meaning is not None and (best is None or meaning[1] < best[0]):
            best = (meaning[1], int(f.value))
    if best is not None:
        return best[1]
    m = _PATH_STEP_RE.search(body)
    return int(m.group(1)) if m else None


# -- restarts with no restore line -----------------------------------------------------------
#
# A job relaunched into the same log prints its start-up lines again (banner, config or
# parameter table, "building model ..."): the lines seen before the first data point. When
# half of them, at least 3, come back after the data started (or 2 after a failure line),
# a new run began there: a ``restart`` marker (no step; the counters say the rest). A
# warning printed at start-up and again every epoch is not a restart.

#: Words of a line that says the run failed (a traceback, the scheduler or launcher reporting it).
_FAILURE_RE = re.compile(
    r"traceback \(most recent call last\)|\b(?:srun|slurmstepd): error|\berror\b|\bexception\b|\bkilled\b"
    r"|\bfailed\b|\brestart(?:ing)?\b|\bfatal\b|\bsegmentation fault\b",
    re.IGNORECASE,
)
_SHAPE_TABLE = str.maketrans("", "", "0123456789 \t")
_MAX_PREAMBLE = 256
_MAX_RECENT = 64


class RestartDetector:
    """Watches the lines that gave no event; ``see`` returns a ``restart`` marker when a run starts again."""

    def __init__(self) -> None:
        self._preamble: set[str] = set()
        self._data_seen = False
        self._back: set[str] = set()
        """Start-up lines seen again since the last data point."""
        self._recent: deque[str] = deque(maxlen=_MAX_RECENT)
        """The other lines since the last data point (a failure line among them?), read only
        when a start-up line comes back (rare): most lines cost a set lookup."""
        self._failed = False
        self._marked = False
        """A marker (restore or restart) since the last data point: nothing more to say."""

    def see(self, text: str, events: list[LogEvent], line_no: int, in_record: bool) -> ResumeMarker | None:
        """One line and what it gave; ``in_record``: a multi-line record is open (the data started)."""
        if in_record:
            self._data_seen = True
        if events:
            if any(isinstance(e, LossPoint) for e in events):
                self._data_seen, self._failed, self._marked = True, False, False
                self._back.clear()
                self._recent.clear()
            if any(isinstance(e, ResumeMarker) and e.kind == "restore" for e in events):
                self._marked = True
            return None
        if self._marked:
            return None
        shape = text.translate(_SHAPE_TABLE)
        if not self._data_seen:
            if len(shape) >= 4 and len(self._preamble) < _MAX_PREAMBLE:
                self._preamble.add(shape)
            return None
        if shape not in self._preamble:
            self._recent.append(text)
            return None
        self._back.add(shape)
        if not self._failed:
            self._failed = any(_FAILURE_RE.search(t) for t in self._recent)
        needed = min(2, len(self._preamble)) if self._failed else max(3, (len(self._preamble) + 1) // 2)
        if len(self._back) >= needed:
            self._marked = True
            return ResumeMarker(line_no=line_no, step=None, text=text[:200], kind="restart")
        return None
