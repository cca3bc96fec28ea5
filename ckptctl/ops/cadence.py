"""Use case: is the checkpoint cadence right for the failure rate? Returns a ``CadenceResult``; never prints.

Reads the run root (read-only): each complete-looking checkpoint directory's
ckptctl manifest (``created_unix_s``, ``save_duration_s``) or, without one, its
files' modification times; and the failures of the incident ledger (``ops.ledger``: the
recoveries, those that died, the scheduler's restarts), the same ``ckptctl incidents``
counts, over the same span: one MTBF (``core.recover.incidents.observed_mtbf``).
The numbers come from ``ckptctl.core.recover.cadence.plan_cadence``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptctl.core.recover.cadence import (
    CadenceReport,
    CheckpointTiming,
    DurationError,
    parse_duration,
    plan_cadence,
)
from ckptctl.errors import InputError, UsageError
from ckptctl.ops.ledger import checkpoint_names, read_ledger, timing
from ckptctl.runroot.root import RunRoot

SCHEMA = "ckptctl.cadence/1"
#: Newest checkpoints read (each costs a listing or a manifest read).
MAX_CHECKPOINTS = 50


@dataclass(frozen=True, kw_only=True, slots=True)
class CadenceResult:
    root: str
    report: CadenceReport
    checkpoints: tuple[CheckpointTiming, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "root": self.root,
            **self.report.to_json(),
            "checkpoints": [
                {
                    "step": c.step,
                    "time_s": c.time_s,
                    "save_duration_s": c.save_duration_s,
                    "save_duration_source": c.save_duration_source,
                }
                for c in self.checkpoints
            ],
        }


def cadence(root: str | RunRoot, *, mtbf: str | None = None) -> CadenceResult:
    """Measure the run root's cadence; ``mtbf`` as ``90m``/``3h``/``2d`` overrides the ledger.

    ``root``: a URL (resolved here, shown as given), or the ``RunRoot`` a caller already
    opened (``recover``'s report section).
    """
    try:
        mtbf_s = parse_duration(mtbf) if mtbf is not None else None
    except DurationError as e:
        raise UsageError(f"--mtbf: {e}") from e
    rr = root if isinstance(root, RunRoot) else RunRoot.for_url(root)
    shown = root if isinstance(root, str) else root.url
    storage = rr.storage
    if storage.info(rr.path) is None:
        raise InputError(f"{shown}: no such run root")
    names = checkpoint_names(rr)
    timings = [t for step, path in names[-MAX_CHECKPOINTS:] if (t := timing(storage, path, step)) is not None]
    run = read_ledger(rr)
    report = plan_cadence(timings, failure_times_s=run.failure_times_s, mtbf_s=mtbf_s, span_s=run.span_s)
    return CadenceResult(root=shown, report=report, checkpoints=tuple(timings))
