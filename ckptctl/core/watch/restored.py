"""The load-coverage line of ``ckptctl.training`` and the check that reports it.

Pure, stdlib only. Every successful load of ``ckptctl.training`` logs, on rank 0, one
line with the prefix of its other messages (``ckptctl: ``)::

    ckptctl: restored: <N>/<M> keys step=<S>
    ckptctl: restored: <N>/<M> keys step=<S> allowed-missing=<A> allowed-unexpected=<U> allowed=<G>,...

``N``: keys read from the checkpoint into the live state; ``M``: every key either side
holds; ``S``: the step restored. A load that would leave a key out raises
(``LoadCoverageError``) unless the trainer named the key in an allowance, so a line with
N < M names the allowances (``A``: expected by the live state, not in the checkpoint,
left as freshly built; ``U``: in the checkpoint, restored into nothing) and N + A + U = M;
``allowed``: the top-level entries of the state those keys belong to (``optimizer``,
``model``, ``dataloader``: the names the trainer gave them), comma-separated.
Keys are ``key=value`` words after ``keys``, in any order; unknown keys are ignored (keys
are added, never renamed). Anything before ``ckptctl:`` (a logging prefix, a timestamp,
torchrun's rank tag) is allowed.

The log reader takes the line for a restore line (it is one: it names the step it
restored), so a resume whose trainer prints nothing else is still found, and next to the
trainer's own restore line it is the same resume (consecutive restore lines are one).

The check (``restore_coverage``): the coverage line of the resume being judged (between
the last pre-failure point and the resumed run's second point) is reported, in a note
and in the report's ``checks``. N = M: every saved key restored, every expected key
found. N < M is a ``partial-restore`` note and no verdict: an allowance is the trainer's
deliberate choice (a new head, a changed optimizer), and what it left out shows, if it
matters, in the other checks (a reset data loader: ``data-position-mismatch`` or
``data-stream-reset``; a reset optimizer: the loss, sometimes). A partial line that
names no allowance (or does not add up) cannot come from a successful load of this
library; it is reported the same way, saying so. Earlier resumes in the log that were
partial give the same note.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ckptctl.core.watch.context import CheckContext, CheckResult
from ckptctl.core.watch.logevents import ResumeMarker
from ckptctl.core.watch.model import PARTIAL_RESTORE

PREFIX = "ckptctl: restored:"

_LINE_RE = re.compile(r"ckptctl: restored: (\d{1,12})/(\d{1,12}) keys((?:\s+[a-z_-]+=\S+)*)\s*$")
_FIELD_RE = re.compile(r"(?<![a-z_-])([a-z_-]{1,64})=(\S+)")  # (?<!): linear on long words
_INT_RE = re.compile(r"\d{1,18}")


_GROUP_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_GROUPS = 8


def allowed_groups(keys: Iterable[str]) -> tuple[str, ...]:
    """The top-level entries of dotted keys, sorted, each as the line can carry it (a name it
    cannot becomes ``?``), at most ``MAX_GROUPS`` and ``...`` for the rest."""
    groups = sorted({k.split(".", 1)[0] if _GROUP_RE.fullmatch(k.split(".", 1)[0]) else "?" for k in keys})
    return (*groups[:MAX_GROUPS], "...") if len(groups) > MAX_GROUPS else tuple(groups)


def format_restored(
    restored: int,
    total: int,
    step: int,
    *,
    allowed_missing: int = 0,
    allowed_unexpected: int = 0,
    groups: Sequence[str] = (),
) -> str:
    """The line ``watch`` reads (for the training library to log, exactly this); ``groups``:
    ``allowed_groups`` of the allowed keys."""
    text = f"{PREFIX} {int(restored)}/{int(total)} keys step={int(step)}"
    if allowed_missing or allowed_unexpected:
        text += f" allowed-missing={int(allowed_missing)} allowed-unexpected={int(allowed_unexpected)}"
        if groups:
            text += " allowed=" + ",".join(groups)
    return text


@dataclass(frozen=True, kw_only=True, slots=True)
class Restored:
    """One load-coverage line."""

    restored: int
    total: int
    step: int | None
    allowed_missing: int | None
    allowed_unexpected: int | None
    groups: tuple[str, ...]
    """The top-level entries the allowed keys belong to (``allowed=``), when the line names them."""
    line_no: int
    source: str
    """``"log"`` or ``"baseline"``."""

    @property
    def complete(self) -> bool:
        return self.restored >= self.total

    @property
    def allowance_named(self) -> bool:
        """The line names allowances that account for every key not restored."""
        if self.allowed_missing is None or self.allowed_unexpected is None:
            return False
        return self.restored + self.allowed_missing + self.allowed_unexpected == self.total

    def describe(self) -> str:
        return f"restored {self.restored}/{self.total} keys"

    def to_json(self) -> dict[str, Any]:
        return {
            "restored": self.restored,
            "total": self.total,
            "step": self.step,
            "allowed_missing": self.allowed_missing,
            "allowed_unexpected": self.allowed_unexpected,
            "allowed_groups": list(self.groups),
            "complete": self.complete,
            "line": self.line_no,
            "source": self.source,
        }


def parse_restored(text: str, line_no: int, source: str = "log") -> Restored | None:
    """The coverage a line gives, or None (any other line, or a malformed one)."""
    if PREFIX not in text:
        return None
    m = _LINE_RE.search(text)
    if m is None:
        return None
    fields = dict(_FIELD_RE.findall(m.group(3)))

    def integer(key: str) -> int | None:
        value = fields.get(key)
        return int(value) if value is not None and _INT_RE.fullmatch(value) else None

    restored, total = int(m.group(1)), int(m.group(2))
    if restored > total:
        return None
    named = fields.get("allowed", "")
    groups = tuple(g for g in named.split(",") if g in ("...", "?") or _GROUP_RE.fullmatch(g))[: MAX_GROUPS + 1]
    return Restored(
        restored=restored,
        total=total,
        step=integer("step"),
        allowed_missing=integer("allowed-missing"),
        allowed_unexpected=integer("allowed-unexpected"),
        groups=groups,
        line_no=line_no,
        source=source,
    )


def coverage_lines(ctx: CheckContext) -> list[Restored]:
    """Every coverage line read, in reading order (the reader hands them over as restore lines)."""
    out: list[Restored] = []
    for source, events in ctx.sources:
        for e in events:
            if isinstance(e, ResumeMarker) and e.kind == "restore":
                found = parse_restored(e.text, e.line_no, source)
                if found is not None:
                    out.append(found)
    return out


def _where(c: Restored) -> str:
    return f"line {c.line_no}" + (" of the baseline" if c.source == "baseline" else "")


def _partial(c: Restored, earlier: bool) -> str:
    who = "an earlier resume" if earlier else "the resumed run"
    step = f" from the checkpoint of step {c.step}" if c.step is not None else ""
    if c.allowance_named:
        where = f" in {', '.join(c.groups)}" if c.groups else ""
        return (
            f"{who} {c.describe()}{step} ({_where(c)}): {c.allowed_missing} allowed missing (left as freshly "
            f"built), {c.allowed_unexpected} allowed unexpected (saved, not restored){where}; a partial restore "
            "by the trainer's allowance: what it left out starts over (an optimizer's moments, a data loader)"
        )
    return (
        f"{who} {c.describe()}{step} ({_where(c)}) and the line names no allowance that accounts for "
        "the rest: not a line a successful load of ckptctl.training writes (it raises instead)"
    )


def check_restore_coverage(ctx: CheckContext) -> CheckResult:
    """The coverage check (see the module docstring)."""
    res = CheckResult()
    lines = coverage_lines(ctx)
    if not lines:
        return res
    log_pre = [p.line_no for s in ctx.pre_segments if s.source == "log" for p in s.points]
    lo = max(log_pre) if log_pre else 0
    pts = ctx.resumed.points
    hi = pts[1].line_no if len(pts) > 1 and ctx.resumed.source == "log" else None
    current = [c for c in lines if c.source == "log" and c.line_no > lo and (hi is None or c.line_no < hi)]
    earlier = [c for c in lines if c not in current and (c.source == "baseline" or c.line_no <= lo)]
    earlier_partial = [c for c in earlier if not c.complete]
    for c in earlier_partial:
        res.notes.append((PARTIAL_RESTORE, _partial(c, earlier=True)))
    if not current:
        if earlier_partial:
            res.checks["restore_coverage"] = {"complete": None, "earlier_partial": len(earlier_partial)}
        return res
    c = current[0]
    stats = c.to_json()
    stats["allowance_named"] = c.allowance_named if not c.complete else None
    stats["earlier_partial"] = len(earlier_partial)
    res.checks["restore_coverage"] = stats
    if c.complete:
        step = f" from the checkpoint of step {c.step}" if c.step is not None else ""
        res.notes.append(
            (None, f"the resumed run {c.describe()}{step} ({_where(c)}): every saved key restored, "
             "every expected key found")
        )  # fmt: skip
    else:
        res.notes.append((PARTIAL_RESTORE, _partial(c, earlier=False)))
    if ctx.rs is not None and c.step is not None and c.step != ctx.rs:
        res.notes.append(
            (None, f"the coverage line names step {c.step} ({_where(c)}), the checkpoint step is {ctx.rs}")
        )
    return res
