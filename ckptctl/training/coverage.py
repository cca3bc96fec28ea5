"""Load coverage: every key the checkpoint holds is restored, every key the live state expects is found.

A load compares the flattened keys of the checkpoint (DCP's metadata) with the
flattened keys of the state the caller passed (model, optimizer including each
parameter's moments such as ``exp_avg``/``exp_avg_sq``, data loader, scheduler,
plain values, RNG, progress). Keys are DCP's dotted names
(``optimizer.state.fc.weight.exp_avg``, ``model.head.bias``, ``dataloader.epoch``).

- ``missing``: expected by the live state, not in the checkpoint (the value would
  stay as freshly built: a silently reset optimizer moment, a data loader that starts over);
- ``unexpected``: in the checkpoint, restored into nothing (a dropped head, a dropped
  sampler state).

Either is a ``LoadCoverageError`` unless an allowance names it: ``allow_missing``
and ``allow_unexpected`` are glob patterns (``fnmatch``) on the dotted names; a
pattern without a wildcard also names everything below it (``"model.head"`` covers
``model.head.weight``). A missing key that is allowed keeps its live value.
Per-rank entries and RNG states of other ranks are neither: each rank restores its own.

Every successful load logs one line (WARNING, so a default logging setup shows it)::

    ckptctl: restored: 412/412 keys step=100
    ckptctl: restored: 410/414 keys step=100 allowed-missing=2 allowed-unexpected=2 allowed=model,optimizer

``restored`` counts keys read from the checkpoint into the live state; the total is
every key either side holds (this rank's view); ``allowed``: the top-level entries of
the state the allowed keys belong to.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from torch.distributed.checkpoint.metadata import Metadata

from ckptctl.core.watch.restored import PREFIX, allowed_groups, format_restored
from ckptctl.training.errors import LoadCoverageError

LINE_PREFIX = PREFIX
_SHOWN = 8


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyCoverage:
    """How the checkpoint's keys and the live state's keys compare on one rank."""

    restored: tuple[str, ...]
    missing: tuple[str, ...]
    """Expected, not saved, not allowed."""
    unexpected: tuple[str, ...]
    """Saved, not expected, not allowed."""
    allowed_missing: tuple[str, ...]
    allowed_unexpected: tuple[str, ...]

    @property
    def total(self) -> int:
        return (
            len(self.restored)
            + len(self.missing)
            + len(self.unexpected)
            + len(self.allowed_missing)
            + len(self.allowed_unexpected)
        )

    def line(self, step: int) -> str:
        """The line ``ckptctl watch`` reads (its format: ``ckptctl.core.watch.restored``)."""
        return format_restored(
            len(self.restored),
            self.total,
            step,
            allowed_missing=len(self.allowed_missing),
            allowed_unexpected=len(self.allowed_unexpected),
            groups=allowed_groups((*self.allowed_missing, *self.allowed_unexpected)),
        )


def matches(key: str, patterns: Iterable[str]) -> bool:
    for p in patterns:
        if fnmatch.fnmatchcase(key, p):
            return True
        if not any(c in p for c in "*?[") and (key == p or key.startswith(p + ".")):
            return True
    return False


def compare(
    expected: Iterable[str],
    saved: Iterable[str],
    *,
    allow_missing: Sequence[str] = (),
    allow_unexpected: Sequence[str] = (),
    not_mine: re.Pattern[str] | None = None,
) -> KeyCoverage:
    """Compare key sets; ``not_mine`` matches saved keys that belong to other ranks."""
    exp = set(expected)
    sav = {k for k in saved if not (not_mine is not None and not_mine.match(k) and k not in exp)}
    miss = sorted(exp - sav)
    extra = sorted(sav - exp)
    return KeyCoverage(
        restored=tuple(sorted(exp & sav)),
        missing=tuple(k for k in miss if not matches(k, allow_missing)),
        unexpected=tuple(k for k in extra if not matches(k, allow_unexpected)),
        allowed_missing=tuple(k for k in miss if matches(k, allow_missing)),
        allowed_unexpected=tuple(k for k in extra if matches(k, allow_unexpected)),
    )


def _show(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:_SHOWN])
    return shown + (f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else "")


def raise_if_uncovered(cov: KeyCoverage, path: str) -> None:
    if not cov.missing and not cov.unexpected:
        return
    parts = []
    if cov.missing:
        parts.append(f"{len(cov.missing)} expected but not in the checkpoint: {_show(cov.missing)}")
    if cov.unexpected:
        parts.append(f"{len(cov.unexpected)} saved but not restored: {_show(cov.unexpected)}")
    raise LoadCoverageError(
        f"{path}: load coverage {len(cov.restored)}/{cov.total} keys; {'; '.join(parts)}",
        missing=cov.missing,
        unexpected=cov.unexpected,
        hint="build the same state as the run that saved it, or name the intended difference "
        "with allow_missing=/allow_unexpected= (docs/training.md, 'Load coverage')",
    )


def flat_keys(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """DCP's flattening of a state dict: ``(flat, mappings)`` keyed by dotted name."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    flat, mappings = flatten_state_dict(template)
    return dict(flat), dict(mappings)


def saved_keys(metadata: Metadata) -> set[str]:
    return set(metadata.state_dict_metadata)


def without(template: dict[str, Any], drop: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A copy of ``template`` (containers copied, leaves shared) without the keys in ``drop``."""
    from torch.distributed.checkpoint._traverse import set_element

    flat, mappings = flat_keys(template)
    gone = set(drop)
    out: dict[str, Any] = {}
    for fqn, value in flat.items():
        if fqn not in gone:
            set_element(out, mappings[fqn], value)
    return out, mappings


def write_back(template: dict[str, Any], loaded: dict[str, Any], mappings: dict[str, Any]) -> None:
    """Copy every leaf of ``loaded`` (a ``without`` copy after DCP filled it) into ``template``."""
    from torch.distributed.checkpoint._traverse import set_element

    flat, _ = flat_keys(loaded)
    for fqn, value in flat.items():
        set_element(template, mappings[fqn], value)
