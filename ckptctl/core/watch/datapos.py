"""The data-position line of ``ckptctl.training`` and the ``data-position-mismatch`` check.

Pure, stdlib only. The training library logs where its data loader stands, with the
prefix of its other messages (``ckptctl: ``), in one stable line:

    ckptctl: data position recorded step=<S> epoch=<E> index=<I>
    ckptctl: data position first-batch step=<S> epoch=<E> index=<I>

``recorded``: the position saved with the checkpoint of step S (the next batch the
loader would hand out), printed when that checkpoint is saved. ``first-batch``: the
position of the first batch a run resumed from the checkpoint of step S draws,
printed at the resume. ``epoch`` and ``index`` are integers (``index``: batches, or
samples, consumed in the epoch, in the loader's own unit). A loader that has no such
numbers (a stateful loader) gives ``digest=<hex>`` (a digest of its state) instead of,
or beside, them; a per-rank loader adds ``rank=<R>`` and each rank prints its own.
Keys are ``key=value`` words after the kind, in any order; unknown keys are ignored
(keys are added, never renamed). Anything before ``ckptctl:`` (a logging prefix, a
timestamp, torchrun's rank tag) is allowed. The words avoid those of a restore or
save line, so the loss reader never takes the line for one.

The check: the first-batch position of every resume in the log must equal the
position recorded with the checkpoint of the same step (the latest ``recorded`` line
for that step and rank before it). The resume being judged (its first-batch line
lies between the last pre-failure point and the resumed run's second point) gives
``data-position-mismatch`` when it does not continue, a note when it does; earlier
resumes that did not continue give a note (``earlier-data-position-mismatch``): the
second resume is checked as the first was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ckptctl.core.watch.context import CheckContext, CheckResult, DataPosition
from ckptctl.core.watch.loaderdesign import expected_restart
from ckptctl.core.watch.logtokens import MAX_LINE_CHARS, clean_line
from ckptctl.core.watch.model import (
    DATA_POSITION_MISMATCH,
    DATA_RESTARTED,
    EARLIER_DATA_POSITION_MISMATCH,
    Finding,
)

PREFIX = "ckptctl: data position"
RECORDED = "recorded"
FIRST_BATCH = "first-batch"
KINDS = (RECORDED, FIRST_BATCH)

_LINE_RE = re.compile(r"ckptctl: data position (recorded|first-batch)((?:\s+[a-z_]+=\S+)+)\s*$")
_FIELD_RE = re.compile(r"(?<![a-z_])([a-z_]+)=(\S+)")  # (?<!...): a run of letters is tried once
_INT_RE = re.compile(r"\d{1,18}")
_DIGEST_RE = re.compile(r"[0-9a-fA-F]{1,128}")


def format_data_position(
    kind: str,
    step: int,
    *,
    epoch: int | None = None,
    index: int | None = None,
    digest: str | None = None,
    rank: int | None = None,
) -> str:
    """The line ``watch`` reads (for the training library to log, exactly this)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if (epoch is None) != (index is None):
        raise ValueError("give epoch and index together")
    if epoch is None and digest is None:
        raise ValueError("give epoch and index, or a digest")
    if digest is not None and not _DIGEST_RE.fullmatch(digest):
        raise ValueError(f"digest must be hexadecimal, got {digest!r}")
    parts = [f"{PREFIX} {kind} step={int(step)}"]
    if epoch is not None:
        parts.append(f"epoch={int(epoch)} index={int(index or 0)}")
    if digest is not None:
        parts.append(f"digest={digest.lower()}")
    if rank is not None:
        parts.append(f"rank={int(rank)}")
    return " ".join(parts)


def parse_data_position(line: str, line_no: int, source: str = "log") -> DataPosition | None:
    """The data position a log line gives, or None (any other line, or a malformed one)."""
    if PREFIX not in line:
        return None
    text, tag_rank = clean_line(line[:MAX_LINE_CHARS])
    m = _LINE_RE.search(text)
    if m is None:
        return None
    fields = dict(_FIELD_RE.findall(m.group(2)))

    def integer(key: str) -> int | None:
        value = fields.get(key)
        return int(value) if value is not None and _INT_RE.fullmatch(value) else None

    step, epoch, index, rank = integer("step"), integer("epoch"), integer("index"), integer("rank")
    digest = fields.get("digest")
    if digest is not None and not _DIGEST_RE.fullmatch(digest):
        return None
    if step is None or (epoch is None) != (index is None) or (epoch is None and digest is None):
        return None
    return DataPosition(
        kind=m.group(1),
        step=step,
        epoch=epoch,
        index=index,
        digest=digest.lower() if digest is not None else None,
        rank=rank if rank is not None else tag_rank,
        line_no=line_no,
        source=source,
    )


def _where(p: DataPosition) -> str:
    return f"line {p.line_no}" + (" of the baseline" if p.source == "baseline" else "")


def _pairs(positions: Sequence[DataPosition]) -> list[tuple[DataPosition, DataPosition | None]]:
    """Each first-batch line with the latest recorded line of its step and rank before it."""
    recorded: dict[tuple[int, int | None], DataPosition] = {}
    out: list[tuple[DataPosition, DataPosition | None]] = []
    for p in positions:  # reading order: the baseline, then the log
        if p.kind == RECORDED:
            recorded[(p.step, p.rank)] = p
        else:
            out.append((p, recorded.get((p.step, p.rank))))
    return out


def check_data_position(ctx: CheckContext) -> CheckResult:
    """The data-position check (see the module docstring)."""
    res = CheckResult()
    if not ctx.data_positions:
        return res
    # The judged resume's first-batch lines: after the log's last pre-failure point, before
    # the resumed run's second point.
    log_pre = [p.line_no for s in ctx.pre_segments if s.source == "log" for p in s.points]
    lo = max(log_pre) if log_pre else 0
    pts = ctx.resumed.points
    hi = pts[1].line_no if len(pts) > 1 and ctx.resumed.source == "log" else None
    current: list[tuple[DataPosition, DataPosition | None]] = []
    earlier: list[tuple[DataPosition, DataPosition]] = []
    for first, rec in _pairs(ctx.data_positions):
        if first.source == "log" and first.line_no > lo and (hi is None or first.line_no < hi):
            current.append((first, rec))
        elif rec is not None and not first.same_position(rec):
            earlier.append((first, rec))
    for first, rec in earlier:
        res.notes.append(
            (EARLIER_DATA_POSITION_MISMATCH, f"an earlier resume from step {first.step} started its data at "
             f"{first.describe()} ({_where(first)}), but the checkpoint recorded {rec.describe()} "
             f"({_where(rec)}): the data since then was not the planned stream")
        )  # fmt: skip
    if not current:
        if earlier:
            res.checks["data_position"] = {"ok": None, "earlier_mismatches": len(earlier)}
        return res
    compared = [(f, r) for f, r in current if r is not None]
    bad = [(f, r) for f, r in compared if not f.same_position(r)]
    first_line = current[0][0]
    stats: dict[str, Any] = {
        "step": first_line.step,
        "first_batch": _json(first_line),
        "recorded": _json(current[0][1]) if current[0][1] is not None else None,
        "num_compared": len(compared),
        "num_mismatched": len(bad),
        "earlier_mismatches": len(earlier),
        "ok": None if not compared else not bad,
    }
    res.checks["data_position"] = stats
    if bad:
        f, r = bad[0]
        message = (
            f"the resumed run's first batch is at {f.describe()} ({_where(f)})"
            + (f" on rank {f.rank}" if f.rank is not None else "")
            + f", but the checkpoint of step {r.step} recorded {r.describe()} ({_where(r)}): the data "
            "loader did not continue from the checkpoint"
        )
        why = expected_restart(ctx)
        if why is not None:
            res.notes.append((DATA_RESTARTED, message + f" (expected: {why})"))
        else:
            res.findings.append(Finding(verdict=DATA_POSITION_MISMATCH, message=message, step=f.step, line_no=f.line_no))
    elif compared:
        f, r = compared[0]
        res.notes.append(
            (None, f"the resumed run's first batch ({f.describe()}, {_where(f)}) is where "
             f"the checkpoint of step {r.step} recorded the data loader ({_where(r)})")
        )  # fmt: skip
    else:
        res.notes.append(
            (None, f"the resumed run's first batch is at {first_line.describe()} ({_where(first_line)}) but no "
             f"position was recorded for step {first_line.step} in the log: not checked")
        )  # fmt: skip
    if ctx.rs is not None and first_line.step != ctx.rs:
        res.notes.append(
            (None, f"the data-position line names step {first_line.step} ({_where(first_line)}), the "
             f"checkpoint step is {ctx.rs}")
        )  # fmt: skip
    return res


def _json(p: DataPosition) -> dict[str, Any]:
    return {"step": p.step, "epoch": p.epoch, "index": p.index, "digest": p.digest, "rank": p.rank,
            "line": p.line_no, "source": p.source}  # fmt: skip
