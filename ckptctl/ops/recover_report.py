"""The report of ``ckptctl recover`` (``--json`` document, ``schema: ckptctl.recover/1``) and
where it is kept: ``<root>/.ckptctl/recovery-<UTC>.json``, pointed at by the audit log.
Keys are added, never renamed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ckptctl import __version__
from ckptctl.adapters import audit
from ckptctl.adapters.storage import Storage
from ckptctl.core import recover as core
from ckptctl.core.launch_plan import signal_name
from ckptctl.core.recover_plan import RecoveryPlan
from ckptctl.errors import StorageError


def iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def actor() -> dict[str, Any]:
    a = audit.current_actor()
    return {"user": a.user, "host": a.host, "pid": a.pid}


@dataclass(slots=True)
class TimelineEntry:
    time: str
    stage: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "stage": self.stage, "message": self.message, **({"data": self.data} if self.data else {})}


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointRecord:
    """A checkpoint recover resumed from (or would), as verified."""

    path: str
    step: int | None
    world_size: int | None
    deep: bool
    status: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "step": self.step, "world_size": self.world_size, "deep": self.deep, "status": self.status}


@dataclass(frozen=True, kw_only=True, slots=True)
class SkippedRecord:
    """A newer checkpoint locate walked past, and why."""

    path: str
    status: str
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "problems": list(self.problems)}


@dataclass(slots=True)
class AttemptRecord:
    attempt: core.Attempt
    argv: list[str]
    log_path: str | None
    watch: dict[str, Any] | None
    """The loss watch's own JSON result, whole (whatever keys the watch adds)."""
    duration_s: float | None
    stop_reason: str | None
    job: dict[str, Any] | None = None
    """The backend's record of the job: ``{backend, job_id, script, state, still_running}``."""
    quarantined: list[str] = field(default_factory=list)
    """Checkpoints this attempt's bad resume led recover to quarantine (its own saves included)."""

    def to_json(self) -> dict[str, Any]:
        a = self.attempt
        return {
            "number": a.number,
            "checkpoint": a.checkpoint_path,
            "checkpoint_step": a.checkpoint_step,
            "argv": self.argv,
            "exit_code": a.exit_code,
            "log": self.log_path,
            "watch_verdict": a.watch_verdict,
            "stopped_by_watch": a.stopped_by_watch,
            "interrupted_by": a.interrupted_by,
            "stop_reason": self.stop_reason,
            "duration_s": self.duration_s,
            "watch": self.watch,
            "still_running": a.still_running,
            "job": self.job,
            "quarantined": self.quarantined,
        }


@dataclass(slots=True)
class RecoveryReport:
    """What recover decided and did, in order. ``to_json()`` is the ``--json`` document."""

    root: str
    dry_run: bool
    started: str
    outcome: str = "stopped"
    """recovered | resumed-unverified | stopped | dry-run | plan-only (``core.recover.OUTCOME_EXIT``)"""
    reason: str = ""
    ended: str | None = None
    classify: dict[str, Any] | None = None
    triage: core.TriageDecision | None = None
    drain: list[dict[str, Any]] = field(default_factory=list)
    capacity: dict[str, Any] | None = None
    checkpoint: CheckpointRecord | None = None
    """The checkpoint of the last (or planned) resume."""
    skipped_checkpoints: list[SkippedRecord] = field(default_factory=list)
    launch_plan: dict[str, Any] | None = None
    attempts: list[AttemptRecord] = field(default_factory=list)
    rollbacks: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[TimelineEntry] = field(default_factory=list)
    report_path: str | None = None
    warnings: list[str] = field(default_factory=list)
    interrupted_by: int | None = None
    """The signal that interrupted ckptctl during a relaunch (it stopped the job and the recovery)."""
    plan: RecoveryPlan | None = None
    """The steps this recovery takes, with their inputs (``--dry-run`` shows the same value)."""
    locate_after: str | None = None
    """What ``locate`` returns after this recovery's quarantines (None: nothing was quarantined)."""
    incident: dict[str, Any] | None = None
    """The incident ledger entry (``core.incidents``): times, steps recomputed, verdicts, hosts."""

    @property
    def exit_code(self) -> int:
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by  # 130 / 143, as `ckptctl launch` and a shell report it
        return core.OUTCOME_EXIT.get(self.outcome, 3)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "ckptctl.recover/1",
            "root": self.root,
            "dry_run": self.dry_run,
            "outcome": self.outcome,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "started": self.started,
            "ended": self.ended,
            "classify": self.classify,
            "triage": self.triage.to_json() if self.triage else None,
            "drain": self.drain,
            "capacity": self.capacity,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "skipped_checkpoints": [k.to_json() for k in self.skipped_checkpoints],
            "launch_plan": self.launch_plan,
            "attempts": [a.to_json() for a in self.attempts],
            "rollbacks": self.rollbacks,
            "timeline": [t.to_json() for t in self.timeline],
            "report_path": self.report_path,
            "warnings": self.warnings,
            "interrupted_by": None if self.interrupted_by is None else signal_name(self.interrupted_by),
            "ckptctl_version": __version__,
            "plan": self.plan.to_json() if self.plan else None,
            "config_file": self.plan.config_file if self.plan else None,
            "job": self.attempts[-1].job if self.attempts else None,
            "incident": self.incident,
            "locate_after": self.locate_after,
        }


def report_target(storage: Storage, path: str, when: datetime) -> str:
    """``<root>/.ckptctl/recovery-<UTC stamp>.json``, ``-2``, ``-3`` ... when taken.

    The stamp has one-second resolution and two recoveries can end in the same
    second (a job-fault refusal takes well under one): a later report must never
    overwrite an earlier one that the audit log points at. Recoveries hold the
    run-root lock while writing, so checking before writing is enough.
    """
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    base = storage.join(audit.state_dir(storage, path), f"recovery-{stamp}")
    target, n = f"{base}.json", 1
    while storage.exists(target):
        n += 1
        target = f"{base}-{n}.json"
    return target


def write_report(storage: Storage, path: str, report: RecoveryReport, when: datetime) -> None:
    try:
        target = report_target(storage, path, when)
        report.report_path = storage.url(target)
        storage.write_bytes(target, (json.dumps(report.to_json(), indent=2) + "\n").encode())
        audit.append_record(
            storage,
            path,
            {
                "time": report.ended,
                **actor(),
                "action": "recover",
                "outcome": report.outcome,
                "reason": report.reason,
                "report": report.report_path,
                "job": report.attempts[-1].job if report.attempts else None,
                "ckptctl_version": __version__,
            },
        )
    except StorageError as e:
        report.warnings.append(f"could not write the recovery report: {e.message}")
        report.report_path = None

