"""The data position: recorded with each checkpoint, and the first batch of a resume logged against it.

A data source in the state that has ``data_position()`` (``ResumableBatchSampler``
has) answers where the next batch comes from: a mapping with ``epoch`` and
``index`` (batches consumed in the epoch), or ``digest`` (hex; for a loader that
has no such numbers). ``Checkpointer.save`` logs, on rank 0::

    ckptctl: data position recorded step=<S> epoch=<E> index=<I>

and ``Checkpointer.note_first_batch(source)``, called just before a resumed run
draws its first batch, logs once::

    ckptctl: data position first-batch step=<S> epoch=<E> index=<I>

(the line format is ``ckptctl.core.watch.datapos``'s, which ``ckptctl watch`` reads:
``data-position-mismatch`` when the first batch is not where the checkpoint stood).
Both at WARNING, so a default logging setup shows them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ckptctl.core.watch.datapos import FIRST_BATCH, RECORDED, format_data_position

logger = logging.getLogger("ckptctl.training")


def position_of(source: Any) -> dict[str, Any] | None:
    """``source.data_position()`` checked, or a mapping given directly; None if it has none."""
    pos = source.data_position() if hasattr(source, "data_position") else source
    if not isinstance(pos, Mapping):
        return None
    out: dict[str, Any] = {}
    if pos.get("epoch") is not None and pos.get("index") is not None:
        out["epoch"], out["index"] = int(pos["epoch"]), int(pos["index"])
    if pos.get("digest") is not None:
        out["digest"] = str(pos["digest"])
    if pos.get("rank") is not None:
        out["rank"] = int(pos["rank"])
    return out if ("epoch" in out or "digest" in out) else None


def sources_in(state: Mapping[str, Any]) -> list[Any]:
    return [v for v in state.values() if hasattr(v, "data_position")]


def line(kind: str, step: int, pos: Mapping[str, Any]) -> str:
    return format_data_position(
        kind,
        step,
        epoch=pos.get("epoch"),
        index=pos.get("index"),
        digest=pos.get("digest"),
        rank=pos.get("rank"),
    )


def log_recorded(state: Mapping[str, Any], step: int, *, rank: int) -> None:
    """The recorded line for each data source in ``state`` (rank 0, or each rank for per-rank ones)."""
    for source in sources_in(state):
        pos = position_of(source)
        if pos is not None and (rank == 0 or "rank" in pos):
            logger.warning("%s", line(RECORDED, step, pos))


def first_batch_line(step: int, source: Any) -> str | None:
    pos = position_of(source)
    return line(FIRST_BATCH, step, pos) if pos is not None else None
