"""The report of ``ckptctl recover`` (``--json`` document, ``schema: ckptctl.recover/1``); it is
kept at ``<root>/.ckptctl/recovery-<UTC>.json`` (``runroot.state``), pointed at by the audit log.
Every section is a typed record whose ``to_json()`` gives the keys; keys are added,
never renamed."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ckptctl import __version__
from ckptctl.adapters.audit import current_actor
from ckptctl.core.launch.plan import CapacityDecision, LaunchPlan, signal_name
from ckptctl.core.recover import decisions, incidents
from ckptctl.core.recover.plan import RecoveryPlan
from ckptctl.errors import StorageError
from ckptctl.runroot import audit
from ckptctl.runroot.root import RunRoot
from ckptctl.runroot.state import (
    report_target,
    report_view_target,
    write_report_doc,
    write_report_view,
)

if TYPE_CHECKING:
    from ckptctl.backends.base import JobPreview, JobRun
    from ckptctl.ops.classify_result import ClassifyResult
    from ckptctl.ops.rollback import RollbackResult


def iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainRecord:
    """One drain command: shown only (``executed`` false), or run and how it went."""

    command: decisions.DrainCommand
    executed: bool
    ok: bool | None = None
    """Run: did it exit 0 (None when not run)."""
    returncode: int | None = None
    output: str | None = None
    """Run to the end: its stdout+stderr, last 2000 characters."""
    error: str | None = None
    """Could not be run to the end (not found, timed out)."""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {**self.command.to_json(), "executed": self.executed}
        if not self.executed:
            return doc
        doc["ok"] = bool(self.ok)
        if self.error is not None:
            doc["error"] = self.error
        else:
            doc["returncode"] = self.returncode
            doc["output"] = self.output
        return doc

    @property
    def failure(self) -> str | None:
        """Why a run drain failed (None when it succeeded or was not run)."""
        if not self.executed or self.ok:
            return None
        return self.error or self.output or f"exit {self.returncode}"


@dataclass(frozen=True, kw_only=True, slots=True)
class CapacityRecord:
    """The last capacity check: its decision, or why the hosts could not be asked."""

    decision: CapacityDecision | None
    """None when the check itself failed (``error``)."""
    hosts_command: tuple[str, ...] | None
    """What was asked (``recover.hosts_command`` or slurm's ``sinfo``); None: fixed ``launch.hosts``."""
    checks: int
    waited_s: float | None = None
    error: str | None = None

    @property
    def reason(self) -> str:
        if self.decision is not None:
            return self.decision.reason
        return f"capacity check failed: {self.error}"

    def to_json(self) -> dict[str, Any]:
        asked = list(self.hosts_command) if self.hosts_command is not None else None
        if self.decision is None:
            return {"hosts_command": asked, "checks": self.checks, "error": self.error}
        return {**self.decision.to_json(), "hosts_command": asked, "checks": self.checks, "waited_s": self.waited_s}


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchRecord:
    """The launch recover made (or would make): the torchrun plan and, when the backend renders
    one (slurm's batch script), what it would submit, under the backend's own key."""

    plan: LaunchPlan
    preview: JobPreview | None = None
    """Shown by a dry run whose backend renders a job (``launch.backend: slurm``)."""

    def to_json(self) -> dict[str, Any]:
        doc = self.plan.to_json()
        if self.preview is not None:
            doc.update(self.preview.to_json_section())
        return doc


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
    attempt: decisions.Attempt
    argv: list[str]
    log_path: str | None
    watch: dict[str, Any] | None
    """The loss watch's own JSON result, whole (whatever keys the watch adds)."""
    duration_s: float | None
    stop_reason: str | None
    job: JobRun | None = None
    """How the backend ran the job (JSON: ``{backend, job_id, script, state, still_running}``)."""
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
            "job": self.job.to_json() if self.job else None,
            "quarantined": self.quarantined,
        }


@dataclass(slots=True)
class RecoveryReport:
    """What recover decided and did, in order. ``to_json()`` is the ``--json`` document."""

    root: str
    dry_run: bool
    started: str
    outcome: str = "stopped"
    """recovered | resumed-unverified | stopped | dry-run | plan-only (``decisions.recover.OUTCOME_EXIT``)"""
    reason: str = ""
    ended: str | None = None
    classify: ClassifyResult | None = None
    triage: decisions.TriageDecision | None = None
    drain: list[DrainRecord] = field(default_factory=list)
    capacity: CapacityRecord | None = None
    checkpoint: CheckpointRecord | None = None
    """The checkpoint of the last (or planned) resume."""
    skipped_checkpoints: list[SkippedRecord] = field(default_factory=list)
    launch_plan: LaunchRecord | None = None
    attempts: list[AttemptRecord] = field(default_factory=list)
    rollbacks: list[RollbackResult] = field(default_factory=list)
    timeline: list[TimelineEntry] = field(default_factory=list)
    report_path: str | None = None
    report_html: str | None = None
    """The HTML view written beside the JSON report (``ckptctl report`` of the run root then)."""
    warnings: list[str] = field(default_factory=list)
    interrupted_by: int | None = None
    """The signal that interrupted ckptctl during a relaunch (it stopped the job and the recovery)."""
    plan: RecoveryPlan | None = None
    """The steps this recovery takes, with their inputs (``--dry-run`` shows the same value)."""
    locate_after: str | None = None
    """What ``locate`` returns after this recovery's quarantines (None: nothing was quarantined)."""
    incident: dict[str, Any] | None = None
    """The incident ledger entry (``decisions.incidents``): times, steps recomputed, verdicts, hosts."""
    cadence: dict[str, Any] | None = None
    """``ckptctl cadence`` of the run root at the end: save cost, interval, MTBF, Young/Daly optimum."""

    def last_job(self) -> dict[str, Any] | None:
        """The last attempt's job (JSON), if any."""
        job = self.attempts[-1].job if self.attempts else None
        return job.to_json() if job else None

    @property
    def exit_code(self) -> int:
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by  # 130 / 143, as `ckptctl launch` and a shell report it
        return decisions.OUTCOME_EXIT.get(self.outcome, 3)

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
            "classify": self.classify.to_json() if self.classify else None,
            "triage": self.triage.to_json() if self.triage else None,
            "drain": [d.to_json() for d in self.drain],
            "capacity": self.capacity.to_json() if self.capacity else None,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "skipped_checkpoints": [k.to_json() for k in self.skipped_checkpoints],
            "launch_plan": self.launch_plan.to_json() if self.launch_plan else None,
            "attempts": [a.to_json() for a in self.attempts],
            "rollbacks": [r.to_json() for r in self.rollbacks],
            "timeline": [t.to_json() for t in self.timeline],
            "report_path": self.report_path,
            "report_html": self.report_html,
            "warnings": self.warnings,
            "interrupted_by": None if self.interrupted_by is None else signal_name(self.interrupted_by),
            "ckptctl_version": __version__,
            "plan": self.plan.to_json() if self.plan else None,
            "config_file": self.plan.config_file if self.plan else None,
            "job": self.last_job(),
            "incident": self.incident,
            "locate_after": self.locate_after,
            "cadence": self.cadence,
        }


def write_report(root: RunRoot, report: RecoveryReport, when: datetime) -> None:
    """Write the report, then the audit log's ``recover`` record naming it (time: ``when``, the end),
    then its HTML view beside it (``ckptctl report`` of the run root, this recovery included)."""
    from ckptctl.ops import (
        report as run_report,  # imported only to write the HTML view (jinja2/matplotlib load lazily there)
    )

    storage = root.storage
    html_target = None
    try:
        target = report_target(root, when)
        report.report_path = storage.url(target)
        if run_report.html_available():
            html_target = report_view_target(target)
            report.report_html = storage.url(html_target)
        else:
            report.warnings.append("no HTML report written: it needs the 'report' extra (pip install 'ckptctl[report]')")
        write_report_doc(root, target, report.to_json())
        audit.write(
            root,
            audit.Recovery(
                who=current_actor(lambda: when),
                outcome=report.outcome,
                reason=report.reason,
                report=report.report_path,
                job=report.last_job(),
            ),
        )
    except StorageError as e:
        report.warnings.append(f"could not write the recovery report: {e.message}")
        report.report_path = report.report_html = None
        return
    if html_target is None:
        return
    try:
        html = run_report.render_html(run_report.build_report(root, now=when))
        write_report_view(root, html_target, html)
    except Exception as e:  # the JSON report and the audit record are written; the view must not undo them
        report.warnings.append(f"could not write the HTML report: {type(e).__name__}: {e}")
        report.report_html = None


def drained_hosts(records: Sequence[DrainRecord]) -> list[str]:
    """Hosts a drain command was run for, successfully."""
    return [h for d in records if d.executed and d.ok for h in d.command.hosts]


def incident_record(report: RecoveryReport, marks: Mapping[str, datetime], logs: Sequence[str]) -> dict[str, Any]:
    """The report's ``incident`` (``decisions.incidents``); ``marks``: when each stage was reached.

    The failure time is the newest ``--logs`` file's modification time (none for stdin).
    """
    mtimes = []
    for p in logs:
        try:
            mtimes.append(os.stat(p).st_mtime)
        except OSError:
            continue
    failure = datetime.fromtimestamp(max(mtimes), timezone.utc) if mtimes else None
    crash_step = None
    for a in report.attempts[:1]:
        base = (a.watch or {}).get("baseline") or {}
        crash_step = base.get("last_step") if isinstance(base.get("last_step"), int) else None
    first = report.attempts[0].attempt if report.attempts else None
    return incidents.build_incident(
        outcome=report.outcome,
        category=report.classify.category if report.classify else None,
        failure_time=failure,
        detected=marks["detected"],
        drained=marks.get("drained"),
        capacity=marks.get("capacity"),
        relaunched=marks.get("relaunched"),
        first_step=marks.get("first_step"),
        crash_step=crash_step,
        checkpoint_step=first.checkpoint_step if first else None,
        verdicts=[a.attempt.watch_verdict for a in report.attempts],
        drained_hosts=drained_hosts(report.drain),
        job_id=(report.last_job() or {}).get("job_id"),
    )
