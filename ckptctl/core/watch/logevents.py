"""What the log reader finds: loss points and checkpoint markers; how a marker line is told.

Pure, stdlib only (``ckptctl.core.watch.losslog`` is the reader; these are its values).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch import logtokens as lt

#: The metrics of a point that carries none (shared, read-only).
NO_METRICS: Mapping[str, float] = MappingProxyType({})
#: Metrics a point may carry (``LossPoint.metrics`` keys).
METRICS = (
    lk.LR, lk.TOKENS, lk.SAMPLES, lk.SEC_PER_STEP, lk.TOKENS_PER_S, lk.SAMPLES_PER_S,
    lk.STEPS_PER_S, lk.MFU, lk.TFLOPS, lk.LOSS_SCALE, lk.GRAD_NORM,
)  # fmt: skip


# A restore: a verb of loading/resuming with a checkpoint-ish object (not "Loading dataset").
# Also a run initialised from a checkpoint (torch-rnn's ``Initializing from cv/checkpoint_7000.t7``,
# TF's ``Warm-starting from: ...``) and torchtitan's ``Training starts at step 401``.
#: (A verb that is a command-line option's name is no event: ``--save checkpoint_5050.pt``,
#: ``--resume_from_checkpoint out/checkpoint-500`` in a command line echoed into the log.)
_NOT_OPTION = r"(?<![\s=]-)(?<![\s=]--)"
_RESTORE_RE = re.compile(
    _NOT_OPTION + r"\b(?:resum\w*|restor\w*|load\w*|reload\w*|continu\w* (?:training|at|from)|start\w* training from"
    r"|initiali[sz]\w* from|warm[- ]?start\w*|training start\w* at (?:step|iteration|iter|epoch))\b",
    re.IGNORECASE,
)
_SAVE_RE = re.compile(_NOT_OPTION + r"\b(?:sav(?:e|ed|ing)|writ\w+ checkpoint)\b|\bCHECKPOINT\s*:", re.IGNORECASE)
_CKPT_NOUN_RE = re.compile(
    r"checkpoint|ckpt|\bstates?\b|\bmodel\b|\btrainer\b|\btraining\b|\bweights\b|\.pth?\b|\bfrom step\b"
    r"|\b(?:from|at)\s+(?:the\s+)?(?:end\s+of\s+)?(?:epoch|step|iteration|iter|update|global\s+step)\b"
    # a bare number after "resume(s|d) from" (a run's notes: "Resumes from 400:"): the position resumed from
    r"|\bresum(?:e|es|ed|ing)\s+from\s+\d{1,15}(?:\s*[:.;,]|\s*$)",
    re.IGNORECASE,
)
#: (``step`` and ``iter`` may be glued to their number as a path's word: Marian's ``model.iter10000.npz``,
#: OLMo's ``step1000-unsharded``.)
_PATH_STEP_RE = re.compile(
    r"(?:global_step|step|iter|iteration|checkpoint|ckpt)(?:[_=-]|(?<=global_step)|(?<=\bstep)|(?<=\biter))(\d{1,15})(?!\d)"
    # a checkpoint file named by its step (detectron2's model_0039999.pth)
    r"|\bmodel[_-](\d{1,15})(?=\.(?:pth?|ckpt|bin|safetensors|tar)\b)",
    re.IGNORECASE,
)
#: A checkpoint path named by its epoch (``ckpt/epoch_6.pt``, ``model_e22.pt``, ``epoch=3-step=1200.ckpt``).
_PATH_EPOCH_RE = re.compile(
    r"(?:\bepoch|[_/-]e)[_=-]?(\d{1,9})(?=\.(?:pth?|ckpt|bin|safetensors|tar)\b|[-_])", re.IGNORECASE
)
#: Loading what is no checkpoint: the data (OpenNMT-py's ``Loading dataset from data.train.0.pt``,
#: a vocabulary, a shard, a tokenizer), whatever the file's extension; a line naming the
#: checkpoint, the model, its weights, optimizer or state is a restore all the same.
_DATA_LOAD_RE = re.compile(
    r"\b(?:load\w*|read\w*|reload\w*)\s+(?:the\s+|a\s+)?(?:(?:train|training|valid|validation|dev|test|eval)\s+)?"
    r"(?:dataset|datasets|data|vocab\w*|shards?|tokenizer|corpus|examples|features|index|cache)\b",
    re.IGNORECASE,
)
_STRONG_CKPT_RE = re.compile(r"checkpoint|ckpt|\bmodel\b|\bweights\b|optimi[sz]er|\bstates?\b|state_dict", re.IGNORECASE)
#: The number a restore line names is the first step (or epoch) of the resumed run, not the
#: checkpoint's: "continuing at epoch 18", "next step 5001", "starting at iteration 3000", detectron2's
#: "Starting training from iteration 5000" (its ``start_iter``, the checkpoint's iteration + 1).
_NAMES_NEXT_RE = re.compile(
    r"\b(?:next|(?:continu\w*|start\w*|resum\w*)\s+(?:training\s+)?(?:at|with)|start\w*\s+(?:training\s+)?from)\s+(?:the\s+)?(?:global\s+)?"
    r"(?P<unit>step|epoch|iteration|iter|update)\b(?:[ \t]{0,4}[:#=]?[ \t]{0,4}(?P<n>\d{1,9})(?![\d.]))?",
    re.IGNORECASE,
)
#: A trainer saying it restored the weights but not the optimizer (or scheduler, scaler) state.
_WEIGHTS_ONLY_RE = re.compile(
    r"\bweights?[ _-]only\b|\bonly\s+(?:the\s+)?model(?:\s+weights|\s+state)?\b"
    r"|\b(?:optimi[sz]er|scheduler|lr[ _]scheduler|scaler)(?:\s+and\s+(?:the\s+)?(?:optimi[sz]er|scheduler|lr[ _]scheduler|scaler))?"
    r"(?:\s+states?|\s+state_dict)?\s+(?:was\s+|were\s+|is\s+|are\s+)?(?:not\s+(?:found|loaded|restored|resumed|saved|included)|missing|ignored|skipped)\b"
    r"|\b(?:not|without|skip(?:ping)?)\s+(?:loading\s+|restoring\s+)?(?:the\s+)?(?:optimi[sz]er|scheduler)\b"
    r"|\b(?:fresh|new|re-?initiali[sz]ed?)\s+(?:\w+\s+)?optimi[sz]er\b"
    r"|--no-load-optim\b|\bno_load_optim\b[\s.:=]*True\b|\bload_optim\w*\s*=\s*False\b",
    re.IGNORECASE,
)


STEP_AXIS = "step"
EPOCH_AXIS = "epoch"
EPOCH_BATCH_AXIS = "epoch-batch"


class LossPoint(NamedTuple):
    """One training loss read from a log (one line, or one multi-line record).

    A tuple (millions are made; built by ``tuple.__new__`` on the fast path). Compare
    points by their fields, never by identity.
    """

    step: int | None
    """The position on the log's step axis (``axis``): the step counter as logged, the epoch,
    or epoch x batches per epoch + batch; ``None`` for formats without one (HF Trainer's dict)."""
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
    metrics: Mapping[str, float] = NO_METRICS
    """Other values of the record by meaning (``METRICS``): lr, tokens, tokens_per_s, ..."""
    wall: float | None = None
    """Seconds of the line's timestamp (or a ``time`` field), for lost-line accounting."""
    axis: str = STEP_AXIS
    """What ``step`` counts: ``step`` (a step, iteration or update counter), ``epoch``, or
    ``epoch-batch`` (a counter within the epoch composed with it: ``epoch x epoch_len + batch``)."""
    epoch_len: int | None = None
    """Batches per epoch of an ``epoch-batch`` position (the counter's total)."""
    shape: str = ""
    """The line's text without digits and blanks (a short prefix): records of one kind share it."""
    relative: bool = False
    """The line says its counter counts from the resume ("Step 12 (after resuming)")."""



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
    line: ``RestartDetector``), ``save`` (information only) or ``weights-only`` (the trainer says
    the optimizer or scheduler state was not restored; information only)."""
    tokens: float | None = None
    """Tokens (or samples) seen the line names, when it does."""
    epoch: int | None = None
    """The epoch the line names, when it does (an epoch-indexed log resumes at an epoch)."""
    names_next: bool = False
    """The number named is the resumed run's first step or epoch ("continuing at epoch 18")."""
    weights_only: bool = False
    """The line also says the optimizer (or scheduler) state was not restored."""
    on_epoch: bool = False
    """``step`` is the first position of the epoch the line names (placed by ``watch_axis``)."""
    step_in_path: bool = False
    """The step is only the number in the checkpoint's file name (``model_0039999.pth``): which
    checkpoint, not how the resumed run counts."""


LogEvent = LossPoint | ResumeMarker


#: Every marker line holds one of these (lower case): most lines skip the regexes.
MARKER_HINTS = ("resum", "restor", "load", "continu", "start", "sav", "writ", "checkpoint", "optim", "weights", "initiali")


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
        weights_only = _WEIGHTS_ONLY_RE.search(body) is not None
        if restore is None and save is None:
            if weights_only:
                return ResumeMarker(line_no=line_no, step=None, text=text[:200], kind="weights-only", weights_only=True)
            return None
        if not _CKPT_NOUN_RE.search(body):
            return None
        if restore is not None and _DATA_LOAD_RE.search(body) and not _STRONG_CKPT_RE.search(body):
            return None  # loading the data, not a checkpoint
        fields = lt.tokenize(body).fields
        if save is not None:
            return ResumeMarker(
                line_no=line_no, step=marker_step(body, fields), text=text[:200], kind="save", epoch=marker_epoch(body, fields)
            )
    tokens: float | None = None
    for f in fields:
        meaning = lk.classify_key(f.key, f.unit)
        if meaning is not None and meaning[0] in (lk.TOKENS, lk.SAMPLES) and tokens is None:
            tokens = f.value
    epoch = marker_epoch(body, fields)
    step = marker_step(body, fields)
    nxt = _NAMES_NEXT_RE.search(body)
    if nxt is not None and nxt.group("n") is not None and nxt.group("unit").lower() == "epoch":
        epoch = int(nxt.group("n"))  # "loaded epoch_1.params, resuming at epoch 2": the epoch named next, not the path's
    return ResumeMarker(
        line_no=line_no,
        step=step,
        step_in_path=step is not None and not any(
            (m := lk.classify_key(f.key, f.unit)) is not None and m[0] == lk.STEP for f in fields
        ),
        text=text[:200],
        tokens=tokens,
        epoch=epoch,
        names_next=nxt is not None,
        weights_only=doc is None and _WEIGHTS_ONLY_RE.search(body) is not None,
    )


def marker_step(body: str, fields: tuple[lt.Field, ...]) -> int | None:
    best: tuple[int, int] | None = None
    for f in fields:
        meaning = lk.classify_key(f.key, f.unit)
        is_step = meaning is not None and meaning[0] == lk.STEP and lt.is_count(f.value)
        if is_step and meaning is not None and (best is None or meaning[1] < best[0]):
            best = (meaning[1], int(f.value))
    if best is not None:
        return best[1]
    m = _PATH_STEP_RE.search(body)
    if m is not None:
        return int(m.group(1) or m.group(2))
    bare = _BARE_RESUME_RE.search(body)
    return int(bare.group(1)) if bare else None


#: A restore line naming its position by a bare number that ends the clause ("Resumes from 400:",
#: "Resumed from 1200."): the step resumed from (a number with a noun after it is something else).
_BARE_RESUME_RE = re.compile(r"\bresum(?:e|es|ed|ing)\s+from\s+(\d{1,15})(?:\s*[:.;,]|\s*$)", re.IGNORECASE)


def marker_epoch(body: str, fields: tuple[lt.Field, ...]) -> int | None:
    """The epoch a restore or save line names: a field (``epoch 7``), else its checkpoint path's."""
    for f in fields:
        meaning = lk.classify_key(f.key, f.unit)
        if meaning is not None and meaning[0] == lk.EPOCH and lt.is_count(f.value):
            return int(f.value)
    m = _PATH_EPOCH_RE.search(body)
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
#: Restarts in a row, one run of points apart, with the same start-up lines: those lines are an epoch's banner.
_BANNER_ROW = 3
_MAX_FIRE_SETS = 16


class RestartDetector:
    """Watches the lines that gave no event; ``see`` returns a ``restart`` marker when a run starts again."""

    def __init__(self) -> None:
        self._preamble: set[str] = set()
        self._data_seen = False
        self._back: set[str] = set()
        """Start-up lines seen again since the last data point."""
        self._recent: deque[bool] = deque(maxlen=_MAX_RECENT)
        """Whether each of the other lines since the last data point says the run failed (a
        line's shape decides that: ``failure_line``), read only when a start-up line comes back."""
        self._failed = False
        self._marked = False
        """A marker (restore or restart) since the last data point: nothing more to say."""
        self.settled = False
        """The state is the one ``saw_point`` leaves (most points follow points: nothing to do)."""
        self._groups = 0
        """Runs of points seen (a run: points with no other line between)."""
        self._streak: tuple[frozenset[str], int, int] | None = None
        """The last ``restart``: the start-up lines that came back, ``_groups`` then, how many restarts in a
        row came back with the same lines one run of points apart."""
        self._fires: dict[frozenset[str], list[int]] = {}
        """Lines of the ``restart`` markers given, by the start-up lines that came back (bounded)."""
        self.cancelled: set[int] = set()
        """Lines of ``restart`` markers found later to be a record's own header (``drop_cancelled``)."""

    def see(self, text: str, events: list[LogEvent], line_no: int, in_record: bool) -> ResumeMarker | None:
        """One line and what it gave; ``in_record``: a multi-line record is open (the data started)."""
        if events:
            if in_record:
                self._data_seen = True
            self.saw_events(events)
            return None
        return self.see_shape(text.translate(_SHAPE_TABLE), text, line_no, in_record, None)

    def saw_events(self, events: list[LogEvent]) -> None:
        if any(isinstance(e, LossPoint) for e in events):
            self.saw_point()
        if any(isinstance(e, ResumeMarker) and e.kind == "restore" for e in events):
            self._marked = True
            self.settled = False

    def saw_point(self) -> None:
        if self.settled:
            return
        self._groups += 1
        self._data_seen, self._failed, self._marked = True, False, False
        self._back.clear()
        self._recent.clear()
        self.settled = True

    def quiet(self, shape: str, failure: bool, in_record: bool) -> bool:
        """``see_shape`` of a line of this shape that surely gives no marker, done (the common case);
        False: call ``see_shape`` (nothing was changed that it would not change the same way)."""
        self.settled = False
        if in_record:
            self._data_seen = True
        if self._marked:
            return True
        if not self._data_seen or shape in self._preamble:
            return False
        self._recent.append(failure)
        return True

    def see_shape(self, shape: str, text: str, line_no: int, in_record: bool, failure: bool | None) -> ResumeMarker | None:
        """A line that gave no event, by its shape (``failure``: ``failure_line(text)`` when known)."""
        self.settled = False
        if in_record:
            self._data_seen = True
        if self._marked:
            return None
        if not self._data_seen:
            if len(shape) >= 4 and len(self._preamble) < _MAX_PREAMBLE:
                self._preamble.add(shape)
            return None
        if shape not in self._preamble:
            self._recent.append(failure_line(text) if failure is None else failure)
            return None
        self._back.add(shape)
        if not self._failed:
            self._failed = any(self._recent)
        needed = min(2, len(self._preamble)) if self._failed else max(3, (len(self._preamble) + 1) // 2)
        if len(self._back) >= needed:
            self._marked = True
            shapes, st = frozenset(self._back), self._streak
            row = st[2] + 1 if st is not None and st[0] == shapes and st[1] + 1 == self._groups and not self._failed else 1
            self._streak = (shapes, self._groups, row)
            if row >= _BANNER_ROW:
                # The same start-up lines back after every run of points, again and again, no failure
                # between: an epoch's own banner (its header, its warnings), not relaunches; so were the
                # markers these lines gave. They no longer count as start-up lines.
                self._preamble -= shapes
                self.cancelled.update(self._fires.pop(shapes, ()))
                self._streak = None
                return None
            fires = self._fires.setdefault(shapes, []) if len(self._fires) < _MAX_FIRE_SETS else self._fires.get(shapes, [])
            if len(fires) < _MAX_RECENT:
                fires.append(line_no)
            return ResumeMarker(line_no=line_no, step=None, text=text[:200], kind="restart")
        return None

    def drop_cancelled(self, events: list[LogEvent]) -> list[LogEvent]:
        """``events`` without the ``restart`` markers found later to be a record's header."""
        if not self.cancelled:
            return events
        return [e for e in events if not (isinstance(e, ResumeMarker) and e.kind == "restart" and e.line_no in self.cancelled)]


def line_shape(text: str) -> str:
    """A line without its digits and blanks (lines of one template share it)."""
    return text.translate(_SHAPE_TABLE)


_EXPONENT_RE = re.compile(r"(?<=\d)[eE][-+]?(?=\d)")


_RECORD_SHAPE_TABLE = str.maketrans("", "", "0123456789. \t")


def record_shape(text: str) -> str:
    """``line_shape`` without the points and exponents of numbers: one logger's records share it
    whether a value prints as ``100``, ``35.42`` or ``1.54e+02`` (speechbrain's ``valid CER: ...``)."""
    return (_EXPONENT_RE.sub("", text) if "e" in text or "E" in text else text).translate(_RECORD_SHAPE_TABLE)


def failure_line(text: str) -> bool:
    """The line says the run failed (a traceback, the scheduler or launcher reporting it)."""
    return _FAILURE_RE.search(text) is not None
