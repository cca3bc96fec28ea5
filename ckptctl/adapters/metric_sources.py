"""Structured metric sources read directly: TensorBoard event files, MLflow runs.

A scalar the trainer logged as such is more reliable than any text line: no
format to guess, the step is the writer's own. ``detect(path)`` says what a local
path is; ``read_lines(path, kind, metric=...)`` turns its scalars into JSON lines
(``{"step": N, "loss": X, "time": T, "<tag>": v, ...}``) that the watch's one
reader takes like any JSON-lines log, so the judgement is the same.

* TensorBoard: an ``events.out.tfevents.*`` file, or a directory holding them
  (searched 3 levels deep), framed by ``adapters.tfrecord`` (every length and CRC-32C
  checked; damage reported, never skipped silently) and parsed with TensorBoard's
  ``Event`` message (the ``tensorboard`` package, optional extra ``ckptctl[tensorboard]``). Files are read
  oldest first; each later file is a new writer process, i.e. a restart, and is
  announced by a restore marker line so the resume is found even when the step
  counter carries on.
* MLflow: a run directory (``mlruns/<exp>/<run>``), its ``metrics/`` directory, or
  one metric file; each metric file holds ``<timestamp_ms> <value> <step>`` lines.

The training loss is the scalar named by ``metric`` (``--metric train/loss``),
else the best loss-like name (``loss`` before ``train/loss`` before other
``*loss``, never eval/val). Local paths only.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Iterator
from typing import Any

from ckptctl.adapters.follow import bounded_lines
from ckptctl.adapters.tfrecord import RecordReader
from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch import logtokens as lt
from ckptctl.errors import InputError, UsageError

TENSORBOARD = "tensorboard"
MLFLOW = "mlflow"
_EVENTS_PREFIX = "events.out.tfevents."
#: Most scalar points read from one source (a bound on memory).
MAX_POINTS = 2_000_000


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def detect(path: str) -> str | None:
    """``tensorboard``, ``mlflow`` or None (a text log) for a local path; never opens a file."""
    if not _is_local(path):
        return None
    p = _local(path)
    try:
        st = os.stat(p)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        if os.path.basename(p).startswith(_EVENTS_PREFIX):
            return TENSORBOARD
        parts = os.path.normpath(p).split(os.sep)
        return MLFLOW if "metrics" in parts[:-1] and "mlruns" in parts else None
    if not stat.S_ISDIR(st.st_mode):
        return None
    if _event_files(p):
        return TENSORBOARD
    if os.path.isdir(os.path.join(p, "metrics")) or os.path.basename(os.path.normpath(p)) == "metrics":
        return MLFLOW
    return None


def _event_files(root: str, depth: int = 3) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath[len(root) :].count(os.sep) >= depth:
            dirnames[:] = []
        found += [os.path.join(dirpath, f) for f in filenames if f.startswith(_EVENTS_PREFIX)]
    # the name carries the writer's start time: oldest first
    return sorted(found, key=lambda f: (os.path.basename(f), f))


def read_lines(
    path: str,
    kind: str,
    *,
    metric: str | None = None,
    damage: list[str] | None = None,
    notes: list[str] | None = None,
) -> Iterator[str]:
    """JSON lines of the source's scalars (see the module docstring).

    ``damage`` receives what could not be read in the middle of a source (a record that fails
    its CRC, a header past which nothing can be framed, a payload that is no event): the
    verdict must not pass over it. ``notes``: facts that change nothing (a last record cut short).
    """
    p = _local(path)
    damage = [] if damage is None else damage
    notes = [] if notes is None else notes
    if kind == TENSORBOARD:
        files = [p] if os.path.isfile(p) else _event_files(p)
        runs = [_read_tensorboard(f, damage, notes) for f in files]
    elif kind == MLFLOW:
        runs = [_read_mlflow(p)]
    else:
        raise ValueError(f"unknown source kind {kind!r}")
    tags = sorted({t for run in runs for _, point in run for t in point if t != "time"})
    loss_tag = _loss_tag(tags, metric, path)
    for i, run in enumerate(runs):
        if i > 0:
            yield json.dumps({"event": "resumed (a new event file)", "file": os.path.basename(files[i])})
        for step, values in run:
            if loss_tag not in values:
                continue
            doc: dict[str, Any] = {"step": step, "loss": values[loss_tag]}
            for tag, v in values.items():
                meaning = lk.classify_key(tag.lower())
                if tag != loss_tag and meaning is not None and meaning[0] not in (lk.LOSS, lk.EVAL, lk.STEP):
                    doc[tag] = v
            yield json.dumps(doc)


def _loss_tag(tags: list[str], metric: str | None, path: str) -> str:
    if metric is not None:
        if metric not in tags:
            raise UsageError(
                f"--metric {metric!r} is not a scalar of {path}; it has: {', '.join(tags[:20]) or 'none'}"
            )
        return metric
    best: tuple[int, str] | None = None
    for tag in tags:
        meaning = lk.classify_key(tag.lower())
        if meaning is not None and meaning[0] == lk.LOSS and (best is None or meaning[1] < best[0]):
            best = (meaning[1], tag)
    if best is None:
        raise InputError(
            f"{path}: no training-loss scalar among {', '.join(tags[:20]) or 'no scalars'}",
            hint="name the scalar with --metric TAG",
        )
    return best[1]


def _read_tensorboard(file: str, damage: list[str], notes: list[str]) -> list[tuple[int, dict[str, float]]]:
    """Scalars of one event file, framed by ``adapters.tfrecord`` (every length and CRC checked;
    what could not be read goes to ``damage``), parsed with TensorBoard's ``Event`` message."""
    try:
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError as e:
        raise InputError(
            f"{file}: reading TensorBoard event files needs the tensorboard package",
            hint="pip install 'ckptctl[tensorboard]' (or export the scalars as CSV and watch that)",
        ) from e
    by_step: dict[int, dict[str, float]] = {}
    count = undecodable = 0
    reader = RecordReader(file)
    try:
        for data in reader:
            try:
                event = Event.FromString(data)
            except (DecodeError, ValueError, RecursionError):
                undecodable += 1
                continue
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                number = _scalar(value)
                if number is None:
                    continue
                point = by_step.setdefault(int(event.step), {})
                point[value.tag] = number
                point.setdefault("time", float(event.wall_time))
                count += 1
                if count > MAX_POINTS:
                    raise InputError(f"{file}: more than {MAX_POINTS:,} scalar points; give one run's file")
    except OSError as e:
        raise InputError(f"{file}: not a readable TensorBoard event file ({e.strerror or e})") from e
    if undecodable:
        damage.append(f"{os.path.basename(file)}: {undecodable} record(s) are not TensorBoard events (skipped)")
    damage.extend(reader.damage)
    notes.extend(reader.notes)
    return list(by_step.items())


#: TensorFlow's DT_FLOAT and DT_DOUBLE.
_DT_FLOAT, _DT_DOUBLE = 1, 2


def _scalar(value: Any) -> float | None:
    """A summary value's number: ``simple_value``, or a float/double tensor of exactly one element.

    The tensor's declared shape is checked before anything is read (a shape of [2**31] is no
    scalar: skipped, never allocated); the number comes from ``float_val``/``double_val`` or
    the 4/8 bytes of ``tensor_content``.
    """
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if not value.HasField("tensor") or value.tensor.dtype not in (_DT_FLOAT, _DT_DOUBLE):
        return None
    t = value.tensor
    if len(t.tensor_shape.dim) > 8 or any(d.size != 1 for d in t.tensor_shape.dim):
        return None  # not one element
    if t.dtype == _DT_FLOAT:
        if t.float_val:
            return float(t.float_val[0])
        return struct.unpack("<f", t.tensor_content)[0] if len(t.tensor_content) == 4 else None
    if t.double_val:
        return float(t.double_val[0])
    return struct.unpack("<d", t.tensor_content)[0] if len(t.tensor_content) == 8 else None


def _read_mlflow(path: str) -> list[tuple[int, dict[str, float]]]:
    """Points in the order they were logged (a resumed run re-logging steps stays visible)."""
    if os.path.isfile(path):
        root, files = os.path.dirname(path), [path]
    else:
        root = path if os.path.basename(os.path.normpath(path)) == "metrics" else os.path.join(path, "metrics")
        files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    entries: list[tuple[float, int, str, float]] = []
    for f in sorted(files):
        if not stat.S_ISREG(os.stat(f).st_mode):
            continue  # a FIFO or device is never opened
        tag = os.path.relpath(f, root).replace(os.sep, "/")
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in bounded_lines(fh):  # cut before a line is read whole
                parts = line.split()
                if len(parts) < 2:
                    continue
                value = lt.parse_float(parts[1])
                step = lt.parse_int(parts[2]) if len(parts) > 2 else 0
                stamp = lt.parse_float(parts[0])
                if value is None or step is None or stamp is None:
                    continue
                entries.append((stamp, step, tag, value))
                if len(entries) > MAX_POINTS:
                    raise InputError(f"{path}: more than {MAX_POINTS:,} metric points")
    entries.sort(key=lambda e: (e[0], e[1]))
    out: list[tuple[int, dict[str, float]]] = []
    for stamp, step, tag, value in entries:
        if not out or out[-1][0] != step or tag in out[-1][1]:
            out.append((step, {"time": stamp / 1000}))
        out[-1][1][tag] = value
    return out
