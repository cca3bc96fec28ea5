"""Parse training-log lines into (step, loss) points and resume markers.

Pure: a ``LossLogParser`` is fed one line at a time and returns what it found;
it reads nothing and keeps only the small state some formats need (the CSV
header, the format locked in by auto-detection, the last step of a progress
bar). Stdlib only.

Formats (``auto`` tries them in this order and locks onto the first that
yields a loss, so one stray line of another shape cannot mix in):

==============  ==========================================================================
``ckptctl``     ``ckptctl-train step=120 loss=2.345 tokens_seen=491520 lr=0.001 rank=0``
                (``examples/train.py``; one line per step)
``megatron``    `` iteration      120/  500000 | ... | lm loss: 2.345678E+00 | ...``;
                a line with ``number of nan iterations: N`` > 0 counts as a NaN loss,
                because Megatron leaves NaN iterations out of the printed average
``torchtitan``  ``step: 120  loss:  2.34567  grad_norm: ...`` (``validate step:`` lines skipped)
``nanogpt``     ``iter 120: loss 2.3456, time 123.45ms, mfu 12.34%``
``jsonl``       ``{"step": 120, "loss": 2.34}`` (a step key is required, see ``JSON_STEP_KEYS``)
``hf``          HF Trainer's printed dict ``{'loss': 2.34, 'grad_norm': ..., 'epoch': 0.12}``;
                it carries no step: steps are assigned from the order and the epoch
                (see ``ckptctl.core.watch``)
``lightning``   Lightning's tqdm bar ``Epoch 3:  45%|####5     | 450/1000 [..., train_loss=2.34]``;
                step = epoch * batches_per_epoch + batch (batches, not optimizer steps)
``lightning-csv`` a CSV with a step and a training-loss column: Lightning's ``CSVLogger``
                ``metrics.csv``, W&B's export (``Step,<run> - train/loss,...``), TensorBoard's
                scalar export (``Wall time,Step,Value``)
``generic``     any other line naming a step and a training loss, the shapes of hand-written
                loops: ``step 120 | loss 2.345``, ``Step 120/1000, Loss: 2.345``,
                ``train step=120 loss=2.345``, ``iteration 120 train_loss: 2.345``; tried last;
                lines that mention a validation/eval/test loss or start with ``{`` are skipped
``pattern``     ``--pattern REGEX`` with named groups ``loss`` (required), ``step``, ``rank``, ``epoch``
==============  ==========================================================================

Every line is first split on carriage returns (tqdm redraws), cleared of ANSI
colour codes and of torchrun's ``[default0]:`` / ``[rank0]:`` tags (the tag's
number becomes the point's rank unless the payload names one).
"""

from __future__ import annotations

import ast
import csv
import json
import math
import re
from dataclasses import dataclass
from typing import Any

AUTO = "auto"
PATTERN = "pattern"
#: Detection order for ``auto``: the most specific shapes first.
FORMATS: tuple[str, ...] = (
    "ckptctl",
    "megatron",
    "torchtitan",
    "nanogpt",
    "jsonl",
    "hf",
    "lightning",
    "lightning-csv",
    "generic",
)

#: JSON keys read as the step counter, in order of preference.
JSON_STEP_KEYS: tuple[str, ...] = (
    "step",
    "global_step",
    "iteration",
    "iter",
    "train/global_step",
    "trainer/global_step",
)
#: JSON keys read as the training loss, in order of preference (never ``eval_*``/``val_*``).
JSON_LOSS_KEYS: tuple[str, ...] = ("loss", "train/loss", "train_loss", "lm_loss", "lm loss")
#: Lightning progress-bar / CSV columns read as the training loss, in order of
#: preference: the per-step value before the plain name, never ``*_epoch`` averages.
LIGHTNING_LOSS_KEYS: tuple[str, ...] = (
    "train_loss_step",
    "train/loss_step",
    "loss_step",
    "train_loss",
    "train/loss",
    "loss",
)

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]")
# torchrun --tee / --redirects tags: "[default0]:" (role + local rank), "[rank0]:"
# (global rank). Anything with a date or spaces inside the brackets is not one.
_TORCHRUN_TAG_RE = re.compile(r"^\[([A-Za-z_]*?)(\d+)\]:\s?")
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|NaN|NAN|inf|Inf|INF|infinity|Infinity)"

_CKPTCTL_RE = re.compile(r"(?:^|\s)ckptctl-train\s+(?P<body>.*)$")
_CK_STEP_RE = re.compile(r"(?:^|\s)step=(\d+)(?=\s|$)")
_CK_LOSS_RE = re.compile(r"(?:^|\s)loss=(\S+)")
_CK_RANK_RE = re.compile(r"(?:^|\s)rank=(\d+)(?=\s|$)")
_KV_RE = re.compile(r"(?P<key>[A-Za-z_][\w/.-]*)=(?P<value>[^\s,]+)")
_MEGATRON_RE = re.compile(r"\biteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|")
_MEGATRON_LOSS_RE = re.compile(r"\|\s*lm loss:\s*(?P<loss>" + _NUMBER + r")\s*\|")
_MEGATRON_NAN_RE = re.compile(r"number of nan iterations:\s*(?P<n>\d+)")
_TORCHTITAN_RE = re.compile(
    r"(?:^|[\s\]-])step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>" + _NUMBER + r")(?=\s|$)"
)
_NANOGPT_RE = re.compile(r"(?:^|\s)iter (?P<step>\d+): loss (?P<loss>" + _NUMBER + r")\b")
_GENERIC_STEP_RE = re.compile(
    r"(?<![\w/.-])(?:global[_ ]step|step|iteration|iter)\b\s*[:=#]?\s*(?P<step>\d+)(?:\s*/\s*\d+)?(?![\w.])",
    re.IGNORECASE,
)
_GENERIC_LOSS_RE = re.compile(
    r"(?<![\w/.-])(?:train(?:ing)?[_ /-]?)?loss\b\s*[:=]?\s*(?P<loss>" + _NUMBER + r")(?![\w.])",
    re.IGNORECASE,
)
_GENERIC_EVAL_RE = re.compile(
    r"(?<![A-Za-z])(?:val|valid|validate|validation|eval|evaluate|evaluation|evaluating|test|testing)"
    r"[_ /:-]*(?:step|loss|ppl|iter)",
    re.IGNORECASE,
)
_LIGHTNING_RE = re.compile(
    r"Epoch (?P<epoch>\d+):.*?\|\s*(?P<n>\d+)/(?P<total>\d+|\?)\s*\[(?P<postfix>[^\]]*)\]"
)

# What trainers print when they restore a checkpoint. A marker starts a new run
# segment even when the step counter does not go back (a resume that skipped
# ahead), and a marker with a step tells which step the trainer says it restored.
_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ckptctl", re.compile(r"\bckptctl-train\s+resum\w*\b.*?\sstep=(?P<step>\d+)")),
    ("hf", re.compile(r"Continuing training from global step (?P<step>\d+)")),
    ("torchtitan", re.compile(r"Loading the checkpoint at step (?P<step>\d+)")),
    (
        "megatron",
        re.compile(r"successfully loaded checkpoint from \S.*? at iteration (?P<step>\d+)"),
    ),
    (
        "lightning",
        re.compile(r"Restoring states from the checkpoint path at (?P<path>\S+)"),
    ),
    ("nanogpt", re.compile(r"^Resuming training from \S+")),
)
_LIGHTNING_CKPT_STEP_RE = re.compile(r"step=(?P<step>\d+)")
_HF_BARE_NONFINITE_RE = re.compile(r"(?<=[:\[,\s])(-?inf|nan)(?=\s*[,}\]])")


@dataclass(frozen=True, kw_only=True, slots=True)
class LossPoint:
    """One training loss read from a log line."""

    step: int | None
    """The step counter as logged; ``None`` for formats without one (HF Trainer's dict)."""
    loss: float
    """May be NaN or +-Inf: the detector needs to see them."""
    line_no: int
    """1-based line number in its source (physical line; tqdm redraws share one)."""
    fmt: str
    """The format that parsed it (one of ``FORMATS`` or ``"pattern"``)."""
    rank: int | None = None
    """Rank from the payload (``rank=``, JSON ``rank``) or else from the torchrun tag."""
    epoch: float | None = None
    """Epoch when the format logs one (HF Trainer, Lightning)."""
    redraws_previous: bool = False
    """True when this is a progress bar redrawn at the same step: it replaces the previous value."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumeMarker:
    """A line where the trainer says it restored a checkpoint."""

    line_no: int
    step: int | None
    """The step the trainer says it restored, when the line names one."""
    text: str
    """The line, cleaned (ASCII colours and torchrun tags removed), for the explanation."""


LogEvent = LossPoint | ResumeMarker


class PatternError(ValueError):
    """The user's ``--pattern`` is not a usable regular expression; the message says why."""


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a user pattern; it must have a named group ``loss`` (``step``, ``rank``, ``epoch`` optional)."""
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise PatternError(f"--pattern is not a valid regular expression: {e}") from e
    if "loss" not in compiled.groupindex:
        raise PatternError("--pattern needs a named group 'loss', e.g. (?P<loss>[0-9.eE+-]+|nan)")
    unknown = set(compiled.groupindex) - {"loss", "step", "rank", "epoch"}
    if unknown:
        raise PatternError(
            f"--pattern has unknown named group(s) {sorted(unknown)}; use loss, step, rank, epoch"
        )
    return compiled


def parse_float(text: str) -> float | None:
    """A float from a log token ('2.34', '2.345678E+00', 'nan', 'inf', "'2.34'"), else None."""
    token = text.strip().strip("'\"").rstrip(",;|")
    if not token:
        return None
    try:
        return float(token)
    except ValueError:
        return None


def _parse_int(text: str) -> int | None:
    try:
        value = float(text.strip().strip("'\""))
    except ValueError:
        return None
    if not math.isfinite(value) or value != int(value) or value < 0:
        return None
    return int(value)


def clean_line(raw: str) -> tuple[str, int | None]:
    """Strip ANSI codes and up to two torchrun tags; return (text, rank from the tag)."""
    text = _ANSI_RE.sub("", raw) if "\x1b" in raw else raw
    text = text.strip("\n")
    rank: int | None = None
    for _ in range(2 if text.startswith("[") else 0):
        m = _TORCHRUN_TAG_RE.match(text)
        if m is None:
            break
        if rank is None:
            rank = int(m.group(2))
        text = text[m.end() :]
    return text.strip(), rank


@dataclass(frozen=True, slots=True)
class _Found:
    step: int | None
    loss: float
    rank: int | None = None
    epoch: float | None = None


def _parse_ckptctl(text: str) -> _Found | None:
    if "ckptctl-train" not in text:
        return None
    m = _CKPTCTL_RE.search(text)
    if m is None:
        return None
    body = m.group("body")
    step_m = _CK_STEP_RE.search(body)
    loss_m = _CK_LOSS_RE.search(body)
    if step_m is None or loss_m is None:
        return None
    loss = parse_float(loss_m.group(1))
    if loss is None:
        return None
    rank_m = _CK_RANK_RE.search(body)
    return _Found(int(step_m.group(1)), loss, int(rank_m.group(1)) if rank_m else None)


def _parse_megatron(text: str) -> _Found | None:
    m = _MEGATRON_RE.search(text)
    if m is None:
        return None
    step = int(m.group("step"))
    nan = _MEGATRON_NAN_RE.search(text)
    if nan is not None and int(nan.group("n")) > 0:
        # Megatron drops NaN iterations from the average it prints (and prints no
        # loss at all when every iteration was NaN): the counter is the signal.
        return _Found(step, math.nan)
    loss_m = _MEGATRON_LOSS_RE.search(text + "|")
    if loss_m is None:
        return None
    loss = parse_float(loss_m.group("loss"))
    return None if loss is None else _Found(step, loss)


def _parse_torchtitan(text: str) -> _Found | None:
    m = _TORCHTITAN_RE.search(text)
    if m is None:
        return None
    before = text[: m.start() + 1].lower()
    if before.rstrip().endswith(("validate", "validation", "val", "eval")):
        return None
    loss = parse_float(m.group("loss"))
    return None if loss is None else _Found(int(m.group("step")), loss)


def _parse_nanogpt(text: str) -> _Found | None:
    m = _NANOGPT_RE.search(text)
    if m is None:
        return None
    loss = parse_float(m.group("loss"))
    return None if loss is None else _Found(int(m.group("step")), loss)


def _parse_generic(text: str) -> _Found | None:
    if "oss" not in text and "OSS" not in text:
        return None
    if text.lstrip().startswith("{") or _GENERIC_EVAL_RE.search(text):
        return None
    loss_m = _GENERIC_LOSS_RE.search(text)
    if loss_m is None:
        return None
    step_m = _GENERIC_STEP_RE.search(text)
    if step_m is None:
        return None
    loss = parse_float(loss_m.group("loss"))
    return None if loss is None else _Found(int(step_m.group("step")), loss)


def _dict_text(text: str) -> str | None:
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end <= start:
        return None
    return text[start : end + 1]


def _first_key(doc: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in doc:
            return doc[key]
    return None


def _value_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return parse_float(value)
    return None


def _parse_jsonl(text: str) -> _Found | None:
    body = _dict_text(text)
    if body is None or '"' not in body:
        return None
    try:
        doc = json.loads(body)  # accepts NaN / Infinity tokens
    except ValueError:
        return None
    if not isinstance(doc, dict) or "train_runtime" in doc:
        # HF's end-of-training summary carries the whole-run average as train_loss.
        return None
    step_value = _first_key(doc, JSON_STEP_KEYS)
    loss = _value_float(_first_key(doc, JSON_LOSS_KEYS))
    if step_value is None or loss is None:
        return None
    step = _parse_int(str(step_value))
    if step is None:
        return None
    rank_value = doc.get("rank")
    rank = rank_value if isinstance(rank_value, int) and not isinstance(rank_value, bool) else None
    epoch = _value_float(doc.get("epoch"))
    return _Found(step, loss, rank, epoch)


def _parse_hf(text: str) -> _Found | None:
    body = _dict_text(text)
    if body is None or "'loss'" not in body:
        return None
    body = _HF_BARE_NONFINITE_RE.sub(lambda m: repr(m.group(1)), body)
    try:
        doc = ast.literal_eval(body)  # literals only: nothing in the log can run
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    loss = _value_float(doc.get("loss"))
    if loss is None or not ({"epoch", "learning_rate", "grad_norm", "step"} & set(doc)):
        return None
    step_value = doc.get("step", doc.get("global_step"))
    step = _parse_int(str(step_value)) if step_value is not None else None
    return _Found(step, loss, None, _value_float(doc.get("epoch")))


def _parse_lightning(text: str) -> _Found | None:
    m = _LIGHTNING_RE.search(text)
    if m is None:
        return None
    fields = {kv.group("key"): kv.group("value") for kv in _KV_RE.finditer(m.group("postfix"))}
    loss: float | None = None
    for key in LIGHTNING_LOSS_KEYS:
        if key in fields:
            loss = parse_float(fields[key])
            break
    if loss is None:
        return None
    epoch = int(m.group("epoch"))
    n = int(m.group("n"))
    total = m.group("total")
    # Global batch index: the bar counts batches within the epoch. With an unknown
    # length (iterable datasets) only the batch count is available.
    step = epoch * int(total) + n if total != "?" else n
    return _Found(step, loss, None, float(epoch))


def _parse_pattern(compiled: re.Pattern[str], text: str) -> _Found | None:
    m = compiled.search(text)
    if m is None:
        return None
    groups = m.groupdict()
    loss = parse_float(groups.get("loss") or "")
    if loss is None:
        return None
    step = _parse_int(groups["step"]) if groups.get("step") else None
    if groups.get("step") and step is None:
        return None
    rank = _parse_int(groups["rank"]) if groups.get("rank") else None
    epoch = parse_float(groups["epoch"]) if groups.get("epoch") else None
    return _Found(step, loss, rank, epoch)


_LINE_PARSERS = {
    "ckptctl": _parse_ckptctl,
    "megatron": _parse_megatron,
    "torchtitan": _parse_torchtitan,
    "nanogpt": _parse_nanogpt,
    "jsonl": _parse_jsonl,
    "hf": _parse_hf,
    "lightning": _parse_lightning,
    "generic": _parse_generic,
}


@dataclass(frozen=True, slots=True)
class _CsvHeader:
    step_col: int
    loss_col: int
    epoch_col: int | None
    num_cols: int


def _csv_row(text: str) -> list[str] | None:
    if "," not in text:
        return None
    try:
        rows = list(csv.reader([text]))
    except csv.Error:
        return None
    return rows[0] if rows else None


#: CSV columns read as the step, in order of preference (compared case-insensitively).
CSV_STEP_KEYS: tuple[str, ...] = (
    "step",
    "_step",
    "global_step",
    "trainer/global_step",
    "train/global_step",
    "iteration",
    "iter",
)
#: CSV loss columns besides ``LIGHTNING_LOSS_KEYS``: Megatron-style names, and TensorBoard's
#: scalar export (``Wall time,Step,Value``), whose one value column is the exported curve.
CSV_EXTRA_LOSS_KEYS: tuple[str, ...] = ("lm_loss", "lm loss", "train/lm_loss")


def _csv_name(cell: str) -> str:
    # W&B's export names a column "<run name> - train/loss" (and adds __MIN/__MAX columns)
    name = cell.strip().lower()
    return name.rsplit(" - ", 1)[-1] if " - " in name else name


def _csv_header(row: list[str]) -> _CsvHeader | None:
    names = [_csv_name(c) for c in row]
    if any(parse_float(c) is not None for c in names if c):
        return None
    step_col = next((names.index(k) for k in CSV_STEP_KEYS if k in names), None)
    if step_col is None:
        return None
    keys = (*LIGHTNING_LOSS_KEYS, *CSV_EXTRA_LOSS_KEYS)
    if names == ["wall time", "step", "value"]:
        keys = ("value",)
    for key in keys:
        if key in names:
            epoch_col = names.index("epoch") if "epoch" in names else None
            return _CsvHeader(step_col, names.index(key), epoch_col, len(names))
    return None


class LossLogParser:
    """Incremental parser: ``feed(line)`` returns the points and markers on that line."""

    def __init__(self, fmt: str = AUTO, pattern: str | None = None) -> None:
        if pattern is not None:
            self._pattern: re.Pattern[str] | None = compile_pattern(pattern)
            fmt = PATTERN
        else:
            self._pattern = None
            if fmt != AUTO and fmt not in FORMATS:
                raise ValueError(f"unknown log format {fmt!r}; expected auto or one of {FORMATS}")
        self._requested = fmt
        self._locked: str | None = None if fmt == AUTO else fmt
        self._csv: _CsvHeader | None = None
        self._last_bar_step: int | None = None
        self.num_lines = 0

    @property
    def format(self) -> str | None:
        """The format in use: the requested one, or the one auto-detection locked onto (None yet)."""
        return self._locked

    def feed(self, line: str) -> list[LogEvent]:
        """Parse one physical line (its trailing newline optional)."""
        self.num_lines += 1
        line_no = self.num_lines
        events: list[LogEvent] = []
        for part in line.rstrip("\n").split("\r"):
            if not part.strip():
                continue
            text, tag_rank = clean_line(part)
            if not text:
                continue
            marker = _match_marker(text, line_no)
            if marker is not None:
                events.append(marker)
                continue
            found = self._parse_text(text)
            if found is None:
                continue
            fmt, hit = found
            redraw = False
            if fmt == "lightning":
                # tqdm redraws the bar when the batch count moves and again when the
                # postfix changes: the last drawing of a step carries its loss.
                redraw = hit.step is not None and hit.step == self._last_bar_step
                self._last_bar_step = hit.step
            events.append(
                LossPoint(
                    step=hit.step,
                    loss=hit.loss,
                    line_no=line_no,
                    fmt=fmt,
                    rank=hit.rank if hit.rank is not None else tag_rank,
                    epoch=hit.epoch,
                    redraws_previous=redraw,
                )
            )
        return events

    def _parse_text(self, text: str) -> tuple[str, _Found] | None:
        if self._pattern is not None:
            hit = _parse_pattern(self._pattern, text)
            return None if hit is None else (PATTERN, hit)
        candidates = (self._locked,) if self._locked is not None else FORMATS
        for fmt in candidates:
            assert fmt is not None
            hit = self._csv_line(text) if fmt == "lightning-csv" else _LINE_PARSERS[fmt](text)
            if hit is not None:
                self._locked = fmt
                return fmt, hit
        return None

    def _csv_line(self, text: str) -> _Found | None:
        row = _csv_row(text)
        if row is None:
            return None
        header = _csv_header(row)
        if header is not None:
            # A new header (CSVLogger rewrites the file when metrics are added, and a
            # resumed run may append a fresh one) replaces the old column map.
            self._csv = header
            return None
        h = self._csv
        if h is None or len(row) != h.num_cols:
            return None
        loss = parse_float(row[h.loss_col]) if row[h.loss_col].strip() else None
        step = _parse_int(row[h.step_col]) if row[h.step_col].strip() else None
        if loss is None or step is None:
            return None  # a validation row: the training loss cell is empty
        epoch = parse_float(row[h.epoch_col]) if h.epoch_col is not None else None
        return _Found(step, loss, None, epoch)


#: Substrings one of which every restore line contains: most lines skip the regexes.
_MARKER_HINTS = (
    "esum",
    "Continuing training",
    "Loading the checkpoint",
    "loaded checkpoint",
    "Restoring states",
)


def _match_marker(text: str, line_no: int) -> ResumeMarker | None:
    if not any(hint in text for hint in _MARKER_HINTS):
        return None
    for name, regex in _MARKERS:
        m = regex.search(text)
        if m is None:
            continue
        step: int | None = None
        if "step" in regex.groupindex:
            step = int(m.group("step"))
        elif name == "lightning":
            inner = _LIGHTNING_CKPT_STEP_RE.search(m.group("path"))
            step = int(inner.group("step")) if inner else None
        return ResumeMarker(line_no=line_no, step=step, text=text[:200])
    return None


def parse_lines(lines: list[str], fmt: str = AUTO, pattern: str | None = None) -> list[LogEvent]:
    """Parse a whole list of lines (convenience for tests and small inputs)."""
    parser = LossLogParser(fmt, pattern)
    events: list[LogEvent] = []
    for line in lines:
        events.extend(parser.feed(line))
    return events
