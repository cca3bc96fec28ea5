"""Use case: is the checkpoint cadence right for the failure rate? Returns a ``CadenceResult``; never prints.

Reads the run root (read-only): each complete-looking checkpoint directory's
ckptctl manifest (``created_unix_s``, ``save_duration_s``) or, without one, its
files' modification times; and the audit log's recovery records
(``runroot.state.recovery_entries``: the audit log's ``recover`` records) as the observed failures.
The numbers come from ``ckptctl.core.recover.cadence.plan_cadence``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptctl.adapters.storage import Storage
from ckptctl.core.names import parse_checkpoint_name
from ckptctl.core.recover.cadence import (
    CadenceReport,
    CheckpointTiming,
    DurationError,
    parse_duration,
    plan_cadence,
)
from ckptctl.core.verify.manifest import MANIFEST_NAME, ManifestError, parse_manifest
from ckptctl.errors import InputError, UsageError
from ckptctl.runroot.root import RunRoot
from ckptctl.runroot.state import recovery_entries

SCHEMA = "ckptctl.cadence/1"
#: Newest checkpoints read (each costs a listing or a manifest read).
MAX_CHECKPOINTS = 50
MAX_MANIFEST_BYTES = 16 << 20


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
    """Measure the run root's cadence; ``mtbf`` as ``90m``/``3h``/``2d`` overrides the audit log.

    ``root``: a URL (resolved here, shown as given), or the ``RunRoot`` a caller already
    opened (``recover``'s report section).
    """
    try:
        mtbf_s = parse_duration(mtbf) if mtbf is not None else None
    except DurationError as e:
        raise UsageError(f"--mtbf: {e}") from e
    rr = root if isinstance(root, RunRoot) else RunRoot.for_url(root)
    shown = root if isinstance(root, str) else root.url
    storage, path = rr.storage, rr.path
    if storage.info(path) is None:
        raise InputError(f"{shown}: no such run root")
    names = [
        (cn, e)
        for e in storage.list_dir(path)
        if e.is_dir
        for cn in [parse_checkpoint_name(e.name)]
        if cn is not None and cn.is_candidate
    ]
    names.sort(key=lambda x: x[0].step)
    timings = [
        t
        for cn, e in names[-MAX_CHECKPOINTS:]
        if (t := _timing(storage, e.path, cn.step)) is not None
    ]
    failures = [when.timestamp() for e in recovery_entries(rr) if (when := e.when) is not None]
    report = plan_cadence(timings, failure_times_s=failures, mtbf_s=mtbf_s)
    return CadenceResult(root=shown, report=report, checkpoints=tuple(timings))


def _timing(storage: Storage, ckpt: str, step: int) -> CheckpointTiming | None:
    entries = [e for e in storage.list_dir(ckpt) if not e.is_dir]
    manifest = next((e for e in entries if e.name == MANIFEST_NAME), None)
    if manifest is not None and manifest.size_bytes <= MAX_MANIFEST_BYTES:
        try:
            m = parse_manifest(storage.read_bytes(manifest.path))
        except ManifestError:
            m = None
        if m is not None and m.created_unix_s is not None:
            end = m.created_unix_s + (m.save_duration_s or 0.0)
            return CheckpointTiming(
                step=step,
                time_s=end,
                save_duration_s=m.save_duration_s,
                save_duration_source="manifest",
            )
    times = [e.mtime_s for e in entries if e.mtime_s is not None]
    if not times:
        return None
    span = max(times) - min(times) if len(times) >= 2 else None
    return CheckpointTiming(
        step=step, time_s=max(times), save_duration_s=span, save_duration_source="file-times"
    )
