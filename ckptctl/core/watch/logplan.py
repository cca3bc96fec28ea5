"""What a line's fields make: a record (step, loss, epoch, rank, metrics, wall time), by plan.

Pure, stdlib only. A line's fields are read by their meanings (``logkeys.classify_key``)
in one fixed way; the part of that reading that depends only on the keys (which field is
the step, which the loss, which metrics) is a ``Plan``, made once per set of keys and kept;
``apply`` then reads the values. The reader (``ckptctl.core.watch.losslog``) and its fast path
for lines of a known shape (``ckptctl.core.watch.logfast``) share both, so they read alike.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.logevents import EPOCH_AXIS, STEP_AXIS

#: The meaning of each field of a line (``None``: none), in the line's order.
Meanings = tuple[tuple[str, int] | None, ...]

#: Metrics a record keeps (``LossPoint.metrics``), by meaning.
METRIC_KINDS = frozenset({
    lk.LR, lk.TOKENS, lk.SAMPLES, lk.SEC_PER_STEP, lk.TOKENS_PER_S, lk.SAMPLES_PER_S,
    lk.STEPS_PER_S, lk.MFU, lk.TFLOPS, lk.LOSS_SCALE, lk.GRAD_NORM,
})  # fmt: skip


@dataclass(slots=True)
class Record:
    """What one line (or a record of several) says."""

    step: int | None = None
    loss: float | None = None
    loss_rank: int = 99
    epoch: float | None = None
    rank: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    wall: float | None = None
    line_no: int = 0
    fmt: str = "generic"
    from_bar: bool = False
    axis: str = STEP_AXIS
    epoch_len: int | None = None
    shape: str = ""
    relative: bool = False
    weak: bool = False
    """The line carries an evaluation along (``LossLogParser.lock``)."""

    def merge(self, other: Record) -> None:
        """Add a later line of the same record (its loss only if better ranked)."""
        if other.loss is not None and other.loss_rank < self.loss_rank:
            self.loss, self.loss_rank = other.loss, other.loss_rank
        for k, v in other.metrics.items():
            self.metrics.setdefault(k, v)
        self.epoch = self.epoch if self.epoch is not None else other.epoch
        self.rank = self.rank if self.rank is not None else other.rank
        self.wall = self.wall if self.wall is not None else other.wall


# Operations of a plan on the other fields, in the line's order (later ones win where the
# reading assigns, the first wins where it only adds: ``metrics.setdefault``).
OP_NAN_COUNT, OP_EPOCH, OP_RANK, OP_WALL, OP_SEC, OP_SEC_MS, OP_METRIC, OP_DICT_WALL, OP_DICT_SEC = range(9)


class Plan(NamedTuple):
    steps: tuple[int, ...]
    """Indices of the step fields, best first: the first whose value is a count is the step."""
    loss: int
    """Index of the training loss field (-1: none)."""
    loss_rank: int
    saw_eval: bool
    """A field is an evaluation (``eval_loss``)."""
    ops: tuple[tuple[int, int, str], ...]
    """(operation, field index, metric kind) for every other field with a meaning."""
    epoch: int
    """Index of the (last) epoch field, -1: none."""


@functools.lru_cache(maxsize=4096)
def plan_for(meanings: Meanings, keys: tuple[tuple[str, str], ...]) -> Plan:
    """The plan of a line whose fields have these meanings (and these ``(key, unit)``)."""
    steps: list[tuple[int, int]] = []
    loss, loss_rank = -1, 99
    saw_eval = False
    epoch = -1
    ops: list[tuple[int, int, str]] = []
    for i, meaning in enumerate(meanings):
        if meaning is None:
            continue
        kind, rank = meaning
        if kind == lk.STEP:
            steps.append((rank, i))
        elif kind == lk.LOSS:
            if rank < loss_rank:
                loss, loss_rank = i, rank
        elif kind == lk.EVAL:
            saw_eval = True
        elif kind == lk.NAN_COUNT:
            ops.append((OP_NAN_COUNT, i, kind))
        elif kind == lk.EPOCH:
            ops.append((OP_EPOCH, i, kind))
            epoch = i
        elif kind == lk.RANK:
            ops.append((OP_RANK, i, kind))
        elif kind == lk.WALL:
            ops.append((OP_WALL, i, kind))
        elif kind == lk.SEC_PER_STEP:
            key, unit = keys[i]
            ms = "ms" in lk.key_words(key) or unit.startswith("ms") or key.startswith("ms")
            ops.append((OP_SEC_MS if ms else OP_SEC, i, kind))
        elif kind in METRIC_KINDS:
            ops.append((OP_METRIC, i, kind))
    ordered = tuple(i for _rank, i in sorted(steps))
    return Plan(ordered, loss, loss_rank, saw_eval, tuple(ops), epoch)


@functools.lru_cache(maxsize=1024)
def dict_plan_for(keys: tuple[str, ...]) -> Plan:
    """The plan of a dict line (HF Trainer, JSON lines): its keys' meanings, read a dict's way.

    An evaluation key makes the record none (``saw_eval``); only a loss ranked 2 or better
    counts, or with none the first part under a ``loss/`` path (TRL PPO's ``loss/policy_avg``,
    ``loss/value_avg``: the loss's own namespace); a time above 1e8 is the wall clock; other
    metrics are kept as they are.
    """
    steps: list[tuple[int, int]] = []
    loss, loss_rank = -1, 99
    saw_eval = False
    epoch = -1
    loss_ns = -1
    ops: list[tuple[int, int, str]] = []
    for i, key in enumerate(keys):
        meaning = lk.classify_key(key)
        if meaning is None:
            continue
        kind, rank = meaning
        if kind == lk.EVAL:
            saw_eval = True
        elif kind == lk.STEP:
            steps.append((rank, i))
        elif kind == lk.LOSS:
            if rank < loss_rank and rank <= 2:
                loss, loss_rank = i, rank
            elif rank == 3 and loss_ns < 0 and key.split("/", 1)[0] == "loss":
                loss_ns = i  # a part under the loss's own namespace (TRL PPO's "loss/policy_avg")
        elif kind == lk.EPOCH:
            ops.append((OP_EPOCH, i, kind))
            epoch = i
        elif kind == lk.RANK:
            ops.append((OP_RANK, i, kind))
        elif kind == lk.WALL:
            ops.append((OP_DICT_WALL, i, kind))
        elif kind == lk.SEC_PER_STEP:
            ops.append((OP_DICT_SEC, i, kind))
        elif kind in METRIC_KINDS:
            ops.append((OP_METRIC, i, kind))
    if loss < 0 and loss_ns >= 0:
        loss, loss_rank = loss_ns, 3  # only when no key is the loss itself
    return Plan(tuple(i for _rank, i in sorted(steps)), loss, loss_rank, saw_eval, tuple(ops), epoch)


class Reading(NamedTuple):
    """A plan applied to values: the record's parts (before the counter and epoch rules)."""

    step: int | None
    loss: float | None
    loss_rank: int
    epoch: float | None
    epoch_total: float | None
    rank: int | None
    wall: float | None
    nan_count: float
    metrics: dict[str, float]
    saw_eval: bool


def apply(plan: Plan, values: list[float], totals: list[float | None]) -> Reading:
    """Read the values (one per field) by the plan (``totals``: each field's ``N/T`` total)."""
    step: int | None = None
    for i in plan.steps:
        v = values[i]
        if math.isfinite(v) and v >= 0 and v == int(v) and v < 2**53:
            step = int(v)
            break
    loss = values[plan.loss] if plan.loss >= 0 else None
    epoch: float | None = None
    epoch_total: float | None = None
    rank: int | None = None
    wall: float | None = None
    nan_count = 0.0
    metrics: dict[str, float] = {}
    for op, i, kind in plan.ops:
        v = values[i]
        if op == OP_METRIC:
            metrics.setdefault(kind, v)
        elif op in (OP_SEC, OP_SEC_MS):
            if v > 1e8:
                wall = v  # a "time" field holding a Unix time
            else:
                metrics.setdefault(kind, v / 1000 if op == OP_SEC_MS else v)
        elif op == OP_EPOCH:
            epoch, epoch_total = v, totals[i]
        elif op == OP_RANK:
            rank = int(v) if math.isfinite(v) and v >= 0 and v == int(v) and v < 2**53 else None
        elif op == OP_WALL:
            wall = v if v > 1e8 else None
        elif op == OP_DICT_WALL:
            if v > 1e8:
                wall = v
        elif op == OP_DICT_SEC:
            if v > 1e8:
                wall = v
            else:
                metrics.setdefault(kind, v)
        else:
            nan_count = v
    return Reading(step, loss, plan.loss_rank, epoch, epoch_total, rank, wall, nan_count, metrics, plan.saw_eval)


# -- rules of the reader that are not a line's fields ------------------------------------------

#: How a line is recognised as one logger's (naming only: reading is the same for all).
#: Ordered: the first match names the line.
DIALECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ckptctl", re.compile(r"ckptctl-train")),
    ("megatron", re.compile(r"\biteration\s+[\d,]+\s*/\s*[\d,]+\s*\|")),
    ("torchtitan", re.compile(r"(?:^|[\s\]-])step:\s*\d+\s+loss:")),
    ("nanogpt", re.compile(r"(?:^|\s)iter \d+: loss ")),
    ("detectron2", re.compile(r"\biter: \d+\s+total_loss:")),
    ("fairseq", re.compile(r"\bnum_updates[=\s]\d")),
    ("deepspeed", re.compile(r"(?:^|\s)steps: \d+ loss: |\bstep=\d+, skipped=\d+")),
    ("coqui", re.compile(r"GLOBAL_STEP:")),
    # Lightning's RichProgressBar: "Epoch 3/9 ━━━╸━━ 120/500 0:00:41 • 0:02:03 2.91it/s loss: 0.4"
    # (rich_progress.py: the epoch's "N/T" then rich's BarColumn, drawn with ━ ╸ ╺)
    ("lightning", re.compile(r"(?<![\w/])Epoch \d+/\d+ +[\u2501\u2578\u257a]")),
    ("keras", re.compile(r"(?<!\d)\d+/\d+ (?:\u2501|\[[=>.]*\])")),  # (?<!\d), \A(?>.*?A): linear
    ("lightning", re.compile(r"\A(?>.*?Epoch \d+:).*\|")),  # (tests/test_hostile_regex.py)
)

#: A data line that says its counter counts from the resume ("Step 12 (after resuming)",
#: "Extra step 10").
RELATIVE_RE = re.compile(
    r"\b(?:after|since)\s+(?:the\s+)?(?:resum\w*|restart\w*|restor\w*|relaunch\w*)|\b(?:extra|additional)\s+(?:step|iter\w*|epoch)\b",
    re.IGNORECASE,
)
SHAPE_CHARS = 96



#: A CSV header has a cell that is a step key (``CSV_STEP_KEYS`` all end so): one ends here.
MAYBE_CSV_HEADER_RE = re.compile(r"(?:step|iter|iteration|epoch)\s*\"?\s*(?:,|$)", re.IGNORECASE)
# Starts only at a word's first letter (from every letter, 2,000 lines of 1,900 letters took 23 s).
_METRIC_SHAPE_RE = re.compile(r"(?<![A-Za-z_])[A-Za-z_]\w*\s*[:=]?\s*-?\d")


def looks_like_metrics(text: str) -> bool:
    """A word followed by a number: a line someone may have meant as a metric line."""
    return any(c.isdigit() for c in text[:512]) and _METRIC_SHAPE_RE.search(text[:512]) is not None


def maybe_csv_header(text: str) -> bool:
    return "," in text and MAYBE_CSV_HEADER_RE.search(text) is not None


def dialect(text: str) -> str:
    """The logger the line looks like (the first of ``DIALECTS`` that matches)."""
    for name, regex in DIALECTS:
        if regex.search(text):
            return name
    return "generic"


def dict_record(doc: dict[str, Any], style: str) -> Record | None:
    """The record of a dict line (HF Trainer's ``str(dict)``, a JSON line), else None."""
    if "train_runtime" in doc:
        return None  # HF's end-of-training summary: the whole-run average as train_loss
    fields = lt.dict_fields(doc)
    plan = dict_plan_for(tuple(f.key for f in fields))
    epoch_summary = style == "jsonl" and not plan.steps and plan.epoch >= 0 and plan.loss_rank <= 1
    if plan.saw_eval and not epoch_summary:
        return None
    r = apply(plan, [f.value for f in fields], [None] * len(fields))
    if r.loss is None:
        return None
    if style == "jsonl" and r.step is None:
        # a JSON line needs its step, or (one line per epoch: DeiT/MAE/ConvNeXt's log.txt
        # {"train_lr": .., "train_loss": .., "test_loss": .., "epoch": 3}) a whole epoch and a
        # named training loss; the test stats it carries along are no evaluation record
        if not epoch_summary or r.epoch is None or not lt.is_count(r.epoch):
            return None
        return Record(step=int(r.epoch), loss=r.loss, loss_rank=r.loss_rank, epoch=r.epoch, rank=r.rank,
                      metrics=r.metrics, wall=r.wall, fmt=style, axis=EPOCH_AXIS)  # fmt: skip
    if style == "hf" and r.step is None and not ({"epoch", "learning_rate", "grad_norm"} & set(doc)):
        return None
    return Record(step=r.step, loss=r.loss, loss_rank=r.loss_rank, epoch=r.epoch, rank=r.rank, metrics=r.metrics, wall=r.wall, fmt=style)
