"""``--pattern REGEX``: the user's own regular expression for a log no reader knows.

Pure, stdlib only. Named groups ``loss`` (required), ``step``, ``rank``, ``epoch``; a line the
pattern matches is a record with those parts (``losslog.LossLogParser`` reads it).
"""

from __future__ import annotations

import re

from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.logplan import Record
from ckptctl.core.watch.logtokens import parse_float

__all__ = ["PatternError", "compile_pattern", "pattern_record"]


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


def pattern_record(compiled: re.Pattern[str], text: str) -> Record | None:
    """The record of a line the pattern matches (its groups), else None."""
    m = compiled.search(text)
    if m is None:
        return None
    groups = m.groupdict()
    loss = parse_float(groups.get("loss") or "")
    if loss is None:
        return None
    step = lt.parse_int(groups["step"]) if groups.get("step") else None
    if groups.get("step") and step is None:
        return None
    rank = lt.parse_int(groups["rank"]) if groups.get("rank") else None
    epoch = parse_float(groups["epoch"]) if groups.get("epoch") else None
    return Record(step=step, loss=loss, loss_rank=0, epoch=epoch, rank=rank)
