"""The incident ledger of a run root, whole; read-only. ``incidents``, ``cadence`` and ``status`` read it.

Sources (``core.recover.ledger`` decides, this module gathers):

* each finished recovery: its report's ``incident`` (``runroot.state.reported_incidents``;
  a ``recover`` record whose report is unreadable still counts);
* each recovery that died or still runs: what its process left (``runroot.state.recover_acts``:
  its lock, ``drain``/``launch`` records) that no finished recovery accounts for;
* each restart of a job by its scheduler: the ``JOB_START_TAG`` lines of the job outputs
  the recoveries recorded (``adapters.joblog.scan_starts``), restart 1 and later.

The run's span (oldest and newest checkpoint time) comes with it: the observed MTBF
(``core.recover.incidents.observed_mtbf``) is measured over it, by ``incidents`` and
``cadence`` alike, so the two commands give one number.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ckptctl.adapters.joblog import scan_starts
from ckptctl.adapters.storage import Storage
from ckptctl.core.launch.job import JobStart
from ckptctl.core.names import parse_checkpoint_name
from ckptctl.core.recover import ledger
from ckptctl.core.recover.cadence import CheckpointTiming
from ckptctl.core.recover.incidents import Incident
from ckptctl.core.verify.manifest import MANIFEST_NAME, ManifestError, parse_manifest
from ckptctl.runroot.root import RunRoot
from ckptctl.runroot.state import StoredReport, read_job, recover_acts, reported_incidents, reports

MAX_MANIFEST_BYTES = 16 << 20


@dataclass(slots=True)
class RunLedger:
    incidents: list[Incident]
    """Every failure, oldest first."""
    span_s: tuple[float, float] | None
    """The oldest and newest checkpoint's time (Unix seconds), None without checkpoints."""
    starts: dict[str, list[JobStart]] = field(default_factory=dict)
    """Each job's starts read from its output (by job id), in order."""

    @property
    def failure_times_s(self) -> list[float]:
        return [t.timestamp() for i in self.incidents if (t := i.failed_at) is not None]


def read_ledger(rr: RunRoot, *, stored: list[StoredReport] | None = None) -> RunLedger:
    """The whole ledger of ``rr`` (see the module docstring)."""
    reported, recorded = reported_incidents(rr)
    unrecorded = ledger.unrecorded_incidents(recover_acts(rr), recorded)
    seen = job_starts(rr, stored if stored is not None else reports(rr))
    restarts = ledger.restart_incidents([s for starts in seen.values() for s in starts])
    return RunLedger(
        incidents=ledger.ledger(reported, unrecorded, restarts),
        span_s=checkpoint_span(rr),
        starts={job: [s.start for s in starts] for job, starts in seen.items()},
    )


def job_starts(
    rr: RunRoot, stored: list[StoredReport], *, job_id: str | None = None
) -> dict[str, list[ledger.ObservedStart]]:
    """The starts of every job a recovery recorded an output file for (on this host), by job id;
    ``job_id``: only that job's output files are read."""
    paths: list[str] = [a.log for r in stored for a in r.attempts if a.log and job_id in (None, a.job_id)]
    job = read_job(rr)
    if job is not None and job.log and job_id in (None, job.job_id):
        paths.append(job.log)
    out: dict[str, list[ledger.ObservedStart]] = {}
    done: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        if real in done:
            continue
        done.add(real)
        for seen in scan_starts(path):
            out.setdefault(seen.start.job_id, []).append(
                ledger.ObservedStart(start=seen.start, last_step_before=ledger.last_logged_step(seen.before))
            )
    return out


# -- checkpoint times ---------------------------------------------------------------------------


def checkpoint_names(rr: RunRoot) -> list[tuple[int, str]]:
    """(step, path) of every checkpoint directory that could be complete, oldest step first."""
    found = [
        (cn.step, e.path)
        for e in rr.storage.list_dir(rr.path)
        if e.is_dir
        for cn in [parse_checkpoint_name(e.name)]
        if cn is not None and cn.is_candidate
    ]
    return sorted(found)


def checkpoint_span(rr: RunRoot) -> tuple[float, float] | None:
    """When the oldest and the newest checkpoint were written (their ``timing``)."""
    if rr.storage.info(rr.path) is None:
        return None
    names = checkpoint_names(rr)
    if not names:
        return None
    first = timing(rr.storage, names[0][1], names[0][0])
    last = timing(rr.storage, names[-1][1], names[-1][0]) if len(names) > 1 else first
    if first is None or last is None:
        return None
    return (min(first.time_s, last.time_s), max(first.time_s, last.time_s))


def timing(storage: Storage, ckpt: str, step: int) -> CheckpointTiming | None:
    """When a checkpoint was written and what its save cost: ckptctl's manifest, else file times."""
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
