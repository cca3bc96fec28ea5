"""``ckptctl recover``: the whole RB-7 runbook in one command, as a plan that is executed.

``recover`` first builds a ``RecoveryPlan`` (``ckptctl.core.recover.plan``): the
steps with their inputs, the config file read, the backend. A plan with gaps (no
run root; neither ``--logs`` nor ``--no-logs``) is returned unexecuted
(``plan-only``, exit 2); run roots that disagree are a usage error. Then the steps
run in order: classify, triage, drain (only with ``execute_drain``), capacity,
and the attempt loop (locate + verify, launch through the backend, watch, fall
back). Every decision is a pure function in ``ckptctl.core.recover.decisions``; this module
carries them out holding the run root's lock, and returns a ``RecoveryReport``
(also written to ``<root>/.ckptctl/``). Nothing here prints.

The run root is opened once (``runroot.RunRoot``) and that value is passed to every
step (locate, rollback, the audit log, the report). The lock is ``runroot.lock.hold``
(a stale lock it breaks is audited there); its token goes to the job in
``CKPTCTL_RUN_LOCK_TOKEN`` so the job's own retention may act under it. Every audit
record is a typed ``runroot.audit`` record: ``drain``, ``launch``, ``recover``, and the
``quarantine`` records of a fallback (through ``ops.rollback`` -> ``runroot.mutate``).

``dry_run`` executes the same plan through ``DryEffects``: no lock, no drain, one
capacity look, no launch, no rename, no report file.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from datetime import datetime, timezone
from typing import Any

from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.plan import signal_name
from ckptctl.core.recover import decisions
from ckptctl.core.recover.plan import RecoveryPlan, build_recovery_plan, run_root_conflicts
from ckptctl.errors import CkptctlError, UsageError
from ckptctl.ops import recover_steps as steps
from ckptctl.ops.recover_effects import DryEffects, Effects, RealEffects
from ckptctl.ops.recover_report import (
    AttemptRecord,
    CheckpointRecord,
    LaunchRecord,
    RecoveryReport,
    SkippedRecord,
    TimelineEntry,
    incident_record,
    iso,
    write_report,
)
from ckptctl.runroot import lock
from ckptctl.runroot.root import RunRoot, as_run_root

__all__ = [
    "plan_recovery",
    "recover",
]

EventFn = Callable[[str, str], None]
"""(stage, message): narration of each decision as it is taken."""
OutputFn = Callable[[str], None]


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _quiet(_stage: str, _message: str) -> None:
    return None


class _Recovery:
    def __init__(self, report: RecoveryReport, on_event: EventFn, now: Callable[[], datetime]) -> None:
        self.report = report
        self.on_event = on_event
        self.now = now
        self.marks: dict[str, datetime] = {}

    def log(self, stage: str, message: str, **data: Any) -> None:
        self.report.timeline.append(TimelineEntry(iso(self.now()), stage, message, data))
        self.on_event(stage, message)

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, self.now())

    def stop(self, reason: str) -> RecoveryReport:
        self.report.outcome = "stopped"
        self.report.reason = reason
        self.log("stop", reason)
        return self.report


def plan_recovery(
    root: str | None,
    *,
    config: CkptctlConfig,
    root_source: str | None,
    logs: Sequence[str],
    no_logs: bool,
    detach: bool = False,
    execute_drain: bool = False,
    deep: bool = False,
    max_attempts: int | None = None,
    baseline_log: str | None = None,
    cwd: str | None = None,
) -> RecoveryPlan:
    """The plan (pure apart from the working directory); ``UsageError`` when run roots disagree."""
    conflict = run_root_conflicts(
        cli_root=root if root_source == "argument" else None,
        config_root=config.run_root,
        script_args=config.launch.script_args,
        cwd=cwd or os.getcwd(),
    )
    if conflict:
        raise UsageError(conflict, hint="make ROOT, run_root and the script's checkpoint option name one run root")
    rc = config.recover
    return build_recovery_plan(
        root=root,
        root_source=root_source,
        config_file=config.source,
        logs=logs,
        no_logs=no_logs,
        backend=config.launch.backend,
        detach=detach,
        drain_kind=rc.drain.kind,
        execute_drain=execute_drain,
        min_nodes_policy=rc.min_nodes_policy,
        hosts_command=rc.hosts_command,
        deep=deep,
        max_attempts=max_attempts or rc.max_attempts,
        watch_steps=rc.watch_steps,
        watch_settings=rc.watch,
        baseline=baseline_log,
    )


def recover(
    root: str | RunRoot | None,
    *,
    config: CkptctlConfig,
    logs: Sequence[str] = (),
    no_logs: bool = False,
    root_source: str | None = "argument",
    signature_files: Sequence[str] = (),
    baseline_log: str | None = None,
    force: bool = False,
    execute_drain: bool = False,
    on_unknown: decisions.OnUnknown = "resume",
    deep: bool = False,
    dry_run: bool = False,
    detach: bool = False,
    max_attempts: int | None = None,
    on_event: EventFn = _quiet,
    on_output: OutputFn | None = None,
    now: Callable[[], datetime] = _utc_now,
) -> RecoveryReport:
    """Walk RB-7 for the run root ``root``; see the module docstring.

    Raises ``LockHeldError`` (exit 4) when another recovery or rollback holds the
    lock; ``NotFoundError`` when the root does not exist; ``UsageError`` when run roots disagree.
    """
    plan = plan_recovery(
        root.url if isinstance(root, RunRoot) else root,
        config=config,
        root_source=root_source,
        logs=logs,
        no_logs=no_logs,
        detach=detach,
        execute_drain=execute_drain,
        deep=deep,
        max_attempts=max_attempts,
        baseline_log=baseline_log,
    )
    if not plan.is_complete or root is None:
        shown = root.url if isinstance(root, RunRoot) else (root or "")
        report = RecoveryReport(root=shown, dry_run=dry_run, started=iso(now()), plan=plan)
        report.outcome = "plan-only"
        report.reason = "not started: " + "; ".join(plan.missing)
        report.ended = report.started
        return report
    rr = as_run_root(root)  # opened once; every step below gets this value
    report = RecoveryReport(root=rr.url, dry_run=dry_run, started=iso(now()), plan=plan)
    rec = _Recovery(report, on_event, now)
    rec.mark("detected")
    rec.log("plan", f"config {plan.config_file or '(none: defaults)'}; backend {plan.backend}; root {report.root}")
    if dry_run:
        # Read-only look at the lock: the plan is only worth showing if a real run could act on it.
        holder = lock.holder(rr)
        if holder is not None:
            report.warnings.append(f"the run root is locked ({holder.describe()}): a real run would be refused now")
    lock_ctx = nullcontext(None) if dry_run else lock.hold(rr, "recover", clock=now)
    with lock_ctx as held:
        if held is not None and held.broke_stale:
            # runroot.lock has written the break-lock audit record
            report.warnings.append("a stale lock left by a dead process was broken")
        effects: Effects = DryEffects() if dry_run else RealEffects(rr, held, now)
        try:
            _walk(
                rec,
                rr,
                effects,
                config=config,
                plan=plan,
                logs=logs,
                signature_files=signature_files,
                baseline_log=baseline_log,
                force=force,
                on_unknown=on_unknown,
                deep=deep,
                max_attempts=max_attempts or config.recover.max_attempts,
                on_output=on_output,
            )
        except BaseException as e:
            report.outcome = "stopped"
            report.reason = f"recover failed: {_describe_error(e)}"
            rec.log("stop", report.reason)
            raise
        finally:
            ended = now()
            report.ended = iso(ended)
            report.incident = incident_record(report, rec.marks, logs)
            report.cadence = steps.cadence_section(rr)
            if not dry_run:
                write_report(rr, report, ended)
    return report


def _describe_error(e: BaseException) -> str:
    if isinstance(e, CkptctlError):
        return e.message
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    return f"{type(e).__name__}: {e}"


# -- the walk ------------------------------------------------------------------------------------------


def _walk(
    rec: _Recovery,
    root: RunRoot,
    effects: Effects,
    *,
    config: CkptctlConfig,
    plan: RecoveryPlan,
    logs: Sequence[str],
    signature_files: Sequence[str],
    baseline_log: str | None,
    force: bool,
    on_unknown: decisions.OnUnknown,
    deep: bool,
    max_attempts: int,
    on_output: OutputFn | None,
) -> RecoveryReport:
    from ckptctl.ops.classify import classify_logs
    from ckptctl.ops.launch import prepare_launch
    from ckptctl.runroot.locate import find_latest_complete

    report = rec.report
    url = root.url

    # 1. classify
    if logs:
        result = classify_logs(list(logs), extra_signature_files=[*config.classify.signatures, *signature_files])
        report.classify = result
        rc_ = result.to_json().get("root_cause") or {}
        where = f" ({rc_.get('file')}:{rc_.get('line')})" if rc_ else ""
        rec.log("classify", f"{result.category} fault, {result.confidence} confidence: {result.action}{where}",
                category=result.category, hosts=list(result.hosts))
        category, hosts = result.category, list(result.hosts)
    else:
        category, hosts = "unknown", []
        rec.log("classify", "--no-logs: the cause is unknown (pass --logs to classify it)")
    # 2. triage
    triage = decisions.decide_triage(category, hosts, force=force, on_unknown=on_unknown)
    report.triage = triage
    rec.log("triage", triage.reason)
    if not triage.proceed:
        return rec.stop(triage.reason)
    # 3. drain
    drain_step = plan.step("drain")
    execute = bool(drain_step and drain_step.inputs.get("execute"))
    for cmd in decisions.plan_drain(triage.drain_hosts, kind=config.recover.drain.kind, reason=config.recover.drain.reason):
        refused = effects.drain(rec, cmd, execute)
        if refused:
            return rec.stop(refused)
    if triage.drain_hosts:
        rec.mark("drained")
        if config.recover.drain.kind == "none":
            rec.log("drain", f"drain kind is 'none': take {', '.join(triage.drain_hosts)} out of the pool by hand")
    # 4. capacity
    excluded = tuple(dict.fromkeys([*config.launch.exclude_hosts, *triage.drain_hosts]))
    decision, refusal = steps.await_capacity(config, excluded, rec, dry_run=effects.dry)
    if refusal is not None or decision is None:
        return rec.stop(refusal or "capacity check failed")
    rec.mark("capacity")

    # 5..8. locate + verify, launch, watch; fall back on a bad resume
    baseline_paths = [baseline_log] if baseline_log else [p for p in logs if p != "-"]
    baseline_lines = [line for p in baseline_paths for line in steps.read_lines(p)]
    history: list[decisions.Attempt] = []
    while True:
        root.storage.invalidate_cache(root.path)  # a job may have written checkpoints since the last listing
        found = find_latest_complete(root, deep=deep)
        for s in found.skipped:
            report.skipped_checkpoints.append(SkippedRecord(path=s.path, status=s.status, problems=tuple(s.problems)))
            rec.log("verify", f"skipped {s.name} ({s.status}): {'; '.join(s.problems[:2])}")
        if found.checkpoint is None:
            return rec.stop(f"no complete checkpoint under {url} to resume from")
        ckpt = found.checkpoint
        report.checkpoint = CheckpointRecord(
            path=ckpt.path, step=ckpt.step, world_size=ckpt.world_size, deep=ckpt.deep, status=ckpt.status
        )
        rec.log("verify", f"newest complete checkpoint: {ckpt.path} (step {ckpt.step}, world size {ckpt.world_size})")
        lplan = prepare_launch(config, resume_from=ckpt.path, nnodes=decision.nnodes, exclude_hosts=excluded)
        report.launch_plan = LaunchRecord(plan=lplan)

        attempt_no = len(history) + 1
        watcher, watch_state = steps.make_watcher(config, ckpt.step, baseline_lines, ckpt.tokens_seen)
        if not effects.dry:
            rec.log("launch", f"attempt {attempt_no}/{max_attempts}: " + shlex.join(lplan.argv))
            rec.mark("relaunched")

        def on_line(line: str, _w: Any = watcher, _s: dict[str, Any] = watch_state) -> bool:
            return steps.feed_watch(_w, _s, line)

        run = effects.launch(
            rec, config, lplan,
            detach=plan.detach,
            attempt=attempt_no,
            decided=lambda _s=watch_state: _s.get("verdict") is not None,
            on_output=on_output,
            on_line=on_line if watcher is not None else None,
        )
        if run is None:  # dry run: the plan is shown, nothing ran
            return report
        if "first_step_at" in watch_state:
            rec.marks.setdefault("first_step", watch_state["first_step_at"])
        verdict = watch_state.get("verdict")
        if verdict is None and watcher is not None:
            # a job that ended left a complete log: its last record counts and a short run may decide
            final = watcher.result(final=not run.still_running)
            verdict = final.verdict
            watch_state["result"] = final.to_json()
        attempt = decisions.Attempt(
            number=attempt_no,
            checkpoint_step=ckpt.step,
            checkpoint_path=ckpt.path,
            exit_code=run.exit_code,
            watch_verdict=verdict,
            stopped_by_watch=run.stopped_by_watch,
            still_running=run.still_running,
            interrupted_by=None if run.interrupted_by is None else signal_name(run.interrupted_by),
        )
        history.append(attempt)
        record = AttemptRecord(attempt, list(lplan.argv), run.log_path, watch_state.get("result"),
                               round(run.duration_s, 3), run.stop_reason, job=run)
        report.attempts.append(record)
        state = "still running" if run.still_running else f"job exit {run.exit_code}"
        rec.log("watch", f"attempt {attempt_no}: {state}, loss watch: {verdict or 'no verdict'}",
                exit_code=run.exit_code, verdict=verdict)
        nxt = decisions.decide_after_attempt(history, max_attempts=max_attempts)
        rec.log("decide", nxt.reason)
        if nxt.kind == "done":
            report.outcome = decisions.outcome_when_done(attempt)
            report.reason = nxt.reason if report.outcome == "recovered" else decisions.unverified_reason(attempt)
            return report
        if nxt.kind == "stop":
            report.interrupted_by = run.interrupted_by
            return rec.stop(nxt.reason)
        if nxt.kind in ("rollback-and-resume", "rollback-and-stop"):
            refused = steps.quarantine_bad_resume(rec, record, root, ckpt.step, str(verdict), held=effects.held, deep=deep)
            if refused is not None:
                return rec.stop(refused)
            if nxt.kind == "rollback-and-stop":
                return rec.stop(nxt.reason)
        else:
            # A failed or preempted run: its losses continue the pre-failure record, so the
            # next watch compares against them too. Appended, never swapped in.
            baseline_lines = baseline_lines + steps.read_lines(run.log_path)
