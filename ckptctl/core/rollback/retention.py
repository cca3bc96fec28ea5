"""Retention (``keep_last=K``) as a pure policy: a list of candidates in, keep/delete flags out.

The training library lists the run root, says what it knows about each
directory (step, complete or not, temporary or not, being written or not), asks
this policy what to keep, and only then deletes (``ckptctl.training.retention``).
Keeping the decision here, free of I/O, is what lets a table of cases prove the
two promises retention makes:

* the newest complete checkpoint is never deleted, and neither is a directory
  that is being written;
* incomplete directories never count toward K: a crash that leaves five
  half-written ``step_N.tmp-*`` directories does not push complete ones out.

Rules, in order (the first that applies decides):

1. A directory being written (``is_in_flight``) is kept.
2. A complete checkpoint is kept if it is among the ``keep_last`` newest complete
   ones (by step, then name); older complete checkpoints are deleted.
3. A temporary directory (a save that never committed) is deleted only when
   ``remove_stale_temp`` is on and a complete checkpoint at the same or a later
   step exists: that save was superseded and nothing can finish it. A temporary
   directory newer than every complete checkpoint is kept (it may be the only
   trace of the latest work, and deleting it gains little).
4. Anything else (a final-named directory that is incomplete or corrupt, which
   on object stores is also what a save in progress looks like) is kept: it is
   evidence, and ``ckptctl verify`` will say what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class RetentionCandidate:
    """One checkpoint directory under a run root, as retention sees it."""

    name: str
    """Directory name, e.g. ``step_120`` or ``step_125.tmp-3fa9c2d1``."""
    step: int
    """Optimizer steps completed, from the name."""
    is_complete: bool
    """Committed and verified complete (never true for a temporary name)."""
    is_temp: bool
    """A temporary (uncommitted) name such as ``step_N.tmp-<token>``."""
    is_in_flight: bool = False
    """Being written right now by this process (an async save, or the save just started)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RetentionPolicy:
    """How many complete checkpoints to keep, and whether to clear stale temporaries."""

    keep_last: int
    """Number of newest complete checkpoints to keep (at least 1)."""
    remove_stale_temp: bool = True
    """Delete temporary directories superseded by a complete checkpoint at the same or a later step."""

    def __post_init__(self) -> None:
        if (
            isinstance(self.keep_last, bool)
            or not isinstance(self.keep_last, int)
            or self.keep_last < 1
        ):
            raise ValueError(
                f"keep_last must be an integer >= 1 (the newest complete checkpoint is always kept), "
                f"got {self.keep_last!r}"
            )


def plan_retention(candidates: Sequence[RetentionCandidate], policy: RetentionPolicy) -> list[bool]:
    """For each candidate, in the given order: True to keep it, False to delete it."""
    complete = sorted(
        (c for c in candidates if c.is_complete and not c.is_temp),
        key=lambda c: (-c.step, c.name),
    )
    kept_complete = {id(c) for c in complete[: policy.keep_last]}
    newest_complete_step = complete[0].step if complete else None

    decisions: list[bool] = []
    for c in candidates:
        if c.is_in_flight:
            keep = True
        elif c.is_complete and not c.is_temp:
            keep = id(c) in kept_complete
        elif c.is_temp:
            superseded = newest_complete_step is not None and c.step <= newest_complete_step
            keep = not (policy.remove_stale_temp and superseded)
        else:
            keep = True
        decisions.append(keep)
    return decisions
