"""``ckptctl recover``: the whole RB-7 runbook in one command.

Classify the failure, drain the culprit hosts (only with ``execute_drain``),
check capacity, locate and verify the newest complete checkpoint (falling back
past broken ones), relaunch torchrun elastic with ``--resume-from``, watch the
first losses, and on a bad resume quarantine that checkpoint and resume from the
previous one. Every decision is a pure function in ``ckptctl.core.recover``;
this module carries them out, holding the run root's lock throughout, and
returns a ``RecoveryReport`` (also written to ``<root>/.ckptctl/``). Nothing here
prints; ``on_event`` narrates progress and ``on_output`` receives the job's lines.

``dry_run`` walks the same plan with no side effect at all: no lock, no drain,
no launch, no rename, no report file.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptctl import __version__
from ckptctl.adapters import audit
from ckptctl.adapters.runlock import INHERITED_TOKEN_ENV, HeldLock, read_lock, run_lock
from ckptctl.adapters.storage import Storage
from ckptctl.core import recover as core
from ckptctl.core.config import CkptctlConfig
from ckptctl.core.launch_plan import signal_name
from ckptctl.errors import CkptctlError, StorageError

if TYPE_CHECKING:
    from ckptctl.ops.rollback import RollbackResult

EventFn = Callable[[str, str], None]
"""(stage, message): narration of each decision as it is taken."""
OutputFn = Callable[[str], None]


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def _quiet(_stage: str, _message: str) -> None:
    return None


@dataclass(slots=True)
class TimelineEntry:
    time: str
    stage: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "stage": self.stage, "message": self.message, **({"data": self.data} if self.data else {})}


@dataclass(slots=True)
class AttemptRecord:
    attempt: core.Attempt
    argv: list[str]
    log_path: str | None
    watch: dict[str, Any] | None
    duration_s: float | None
    stop_reason: str | None

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
        }


@dataclass(slots=True)
class RecoveryReport:
    """What recover decided and did, in order. ``to_json()`` is the ``--json`` document."""

    root: str
    dry_run: bool
    started: str
    outcome: str = "stopped"
    """recovered | stopped | dry-run"""
    reason: str = ""
    ended: str | None = None
    classify: dict[str, Any] | None = None
    triage: core.TriageDecision | None = None
    drain: list[dict[str, Any]] = field(default_factory=list)
    capacity: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    """The checkpoint of the last (or planned) resume."""
    skipped_checkpoints: list[dict[str, Any]] = field(default_factory=list)
    launch_plan: dict[str, Any] | None = None
    attempts: list[AttemptRecord] = field(default_factory=list)
    rollbacks: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[TimelineEntry] = field(default_factory=list)
    report_path: str | None = None
    warnings: list[str] = field(default_factory=list)
    interrupted_by: int | None = None
    """The signal that interrupted ckptctl during a relaunch (it stopped the job and the recovery)."""

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
            "checkpoint": self.checkpoint,
            "skipped_checkpoints": self.skipped_checkpoints,
            "launch_plan": self.launch_plan,
            "attempts": [a.to_json() for a in self.attempts],
            "rollbacks": self.rollbacks,
            "timeline": [t.to_json() for t in self.timeline],
            "report_path": self.report_path,
            "warnings": self.warnings,
            "interrupted_by": None if self.interrupted_by is None else signal_name(self.interrupted_by),
            "ckptctl_version": __version__,
        }


class _Recovery:
    def __init__(
        self,
        report: RecoveryReport,
        on_event: EventFn,
        now: Callable[[], datetime],
    ) -> None:
        self.report = report
        self.on_event = on_event
        self.now = now

    def log(self, stage: str, message: str, **data: Any) -> None:
        self.report.timeline.append(TimelineEntry(_iso(self.now()), stage, message, data))
        self.on_event(stage, message)

    def stop(self, reason: str) -> RecoveryReport:
        self.report.outcome = "stopped"
        self.report.reason = reason
        self.log("stop", reason)
        return self.report


def _run_drain(cmd: core.DrainCommand, timeout_s: float = 120.0) -> dict[str, Any]:
    try:
        proc = subprocess.run(list(cmd.argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return {**cmd.to_json(), "executed": True, "ok": False, "error": f"{cmd.argv[0]}: command not found"}
    except subprocess.TimeoutExpired:
        return {**cmd.to_json(), "executed": True, "ok": False, "error": f"timed out after {timeout_s:.0f} s"}
    return {
        **cmd.to_json(),
        "executed": True,
        "ok": proc.returncode == 0,
        "returncode": proc.returncode,
        "output": (proc.stdout + proc.stderr).strip()[-2000:],
    }


def query_hosts(argv: Sequence[str], timeout_s: float = 60.0) -> list[str]:
    """Run ``recover.hosts_command``; the hosts it prints (lines, spaces or commas), in order.

    Raises ``RuntimeError`` with a one-line reason when the command cannot be run or fails.
    """
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as e:
        raise RuntimeError(f"{argv[0]}: command not found") from e
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{shlex.join(argv)} timed out after {timeout_s:.0f} s") from e
    except OSError as e:
        raise RuntimeError(f"{shlex.join(argv)}: {e.strerror or e}") from e
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        why = tail[-1] if tail else "no output"
        raise RuntimeError(f"{shlex.join(argv)} exited {proc.returncode}: {why}")
    return list(dict.fromkeys(h for h in re.split(r"[\s,]+", proc.stdout) if h))


def _await_capacity(
    config: CkptctlConfig,
    excluded: Sequence[str],
    rec: _Recovery,
    *,
    dry_run: bool,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Any, str | None]:
    """RB-7's capacity check: (the decision, None) to go on, or (decision, why) to stop.

    With ``min_nodes_policy: wait`` and a ``hosts_command``, asks again every
    ``capacity_poll_s`` until enough hosts are healthy or ``capacity_timeout_s`` passes.
    A dry run asks once and never waits.
    """
    from ckptctl.ops.launch import plan_capacity

    lc, rc = config.launch, config.recover
    command = rc.hosts_command
    start = clock()
    checks = 0
    while True:
        checks += 1
        if command:
            try:
                hosts: list[str] | None = query_hosts(command)
            except RuntimeError as e:
                rec.report.capacity = {"hosts_command": list(command), "checks": checks, "error": str(e)}
                return None, f"capacity check failed: {e}"
        else:
            hosts = list(lc.hosts) if lc.hosts else None
        decision = plan_capacity(lc.min_nodes, lc.max_nodes, hosts, excluded, rc.min_nodes_policy)
        waited = clock() - start
        rec.report.capacity = {
            **decision.to_json(),
            "hosts_command": list(command) if command else None,
            "checks": checks,
            "waited_s": round(waited, 3),
        }
        rec.log("capacity", decision.reason)
        if decision.should_launch:
            return decision, None
        if not command:
            return decision, (
                f"not enough healthy hosts: {decision.reason}; nothing to wait on "
                "(launch.hosts is fixed: set recover.hosts_command to wait for capacity)"
            )
        if dry_run:
            return decision, (
                f"not enough healthy hosts: {decision.reason}; a real run would ask "
                f"{shlex.join(command)} every {rc.capacity_poll_s:g} s for up to {rc.capacity_timeout_s:g} s"
            )
        if waited + rc.capacity_poll_s > rc.capacity_timeout_s:
            return decision, (
                f"not enough healthy hosts after waiting {waited:.0f} s ({checks} checks, "
                f"capacity_timeout_s {rc.capacity_timeout_s:g}): {decision.reason}"
            )
        rec.log(
            "capacity",
            f"waiting {rc.capacity_poll_s:g} s for capacity (check {checks}, {waited:.0f} s of "
            f"{rc.capacity_timeout_s:g} s)",
        )
        sleep(rc.capacity_poll_s)


def _read_lines(path: str | None) -> list[str]:
    if not path:
        return []
    try:
        return Path(path).read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return []


def recover(
    root: str,
    *,
    config: CkptctlConfig,
    logs: Sequence[str] = (),
    signature_files: Sequence[str] = (),
    baseline_log: str | None = None,
    force: bool = False,
    execute_drain: bool = False,
    on_unknown: core.OnUnknown = "resume",
    deep: bool = False,
    dry_run: bool = False,
    max_attempts: int | None = None,
    on_event: EventFn = _quiet,
    on_output: OutputFn | None = None,
    now: Callable[[], datetime] = _utc_now,
) -> RecoveryReport:
    """Walk RB-7 for the run root ``root``; see the module docstring.

    ``logs``: what the on-call engineer has (kernel, NCCL, torchrun, Slurm/k8s,
    the training log); ``baseline_log``: the pre-failure training log for the
    loss watch (default: the ``logs`` themselves; non-loss lines are ignored).
    Raises ``LockHeldError`` (exit 4) when another recovery or rollback holds the
    lock; ``NotFoundError`` when the root does not exist.
    """
    storage, path = Storage.open_directory(root)
    report = RecoveryReport(root=storage.url(path), dry_run=dry_run, started=_iso(now()))
    rec = _Recovery(report, on_event, now)
    if dry_run:
        # Read-only look at the lock: the plan is only worth showing if a real run could act on it.
        holder = read_lock(storage, path)
        if holder is not None:
            report.warnings.append(
                f"the run root is locked ({holder.describe()}): a real run would be refused now"
            )
    lock_ctx = nullcontext(None) if dry_run else run_lock(storage, path, operation="recover")
    with lock_ctx as held:
        if held is not None and held.broke_stale:
            report.warnings.append("a stale lock left by a dead process was broken")
        try:
            _walk(
                rec,
                storage,
                path,
                config=config,
                logs=logs,
                signature_files=signature_files,
                baseline_log=baseline_log,
                force=force,
                execute_drain=execute_drain,
                on_unknown=on_unknown,
                deep=deep,
                dry_run=dry_run,
                max_attempts=max_attempts or config.recover.max_attempts,
                held=held,
                on_output=on_output,
            )
        except BaseException as e:
            # The report written below must say why the walk ended (it is "stopped").
            report.outcome = "stopped"
            report.reason = f"recover failed: {_describe_error(e)}"
            rec.log("stop", report.reason)
            raise
        finally:
            report.ended = _iso(now())
            if not dry_run:
                _write_report(storage, path, report, now())
    return report


def _describe_error(e: BaseException) -> str:
    if isinstance(e, CkptctlError):
        return e.message
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    return f"{type(e).__name__}: {e}"


def _report_target(storage: Storage, path: str, when: datetime) -> str:
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


def _write_report(storage: Storage, path: str, report: RecoveryReport, when: datetime) -> None:
    try:
        target = _report_target(storage, path, when)
        report.report_path = storage.url(target)
        storage.write_bytes(target, (json.dumps(report.to_json(), indent=2) + "\n").encode())
        audit.append_record(
            storage,
            path,
            {
                "time": report.ended,
                **_actor(),
                "action": "recover",
                "outcome": report.outcome,
                "reason": report.reason,
                "report": report.report_path,
                "ckptctl_version": __version__,
            },
        )
    except StorageError as e:
        report.warnings.append(f"could not write the recovery report: {e.message}")
        report.report_path = None


def _actor() -> dict[str, Any]:
    a = audit.current_actor()
    return {"user": a.user, "host": a.host, "pid": a.pid}


def _walk(
    rec: _Recovery,
    storage: Storage,
    path: str,
    *,
    config: CkptctlConfig,
    logs: Sequence[str],
    signature_files: Sequence[str],
    baseline_log: str | None,
    force: bool,
    execute_drain: bool,
    on_unknown: core.OnUnknown,
    deep: bool,
    dry_run: bool,
    max_attempts: int,
    held: HeldLock | None,
    on_output: OutputFn | None,
) -> RecoveryReport:
    from ckptctl.ops.checkpoints import find_latest_complete
    from ckptctl.ops.classify import classify_logs
    from ckptctl.ops.launch import prepare_launch

    report = rec.report
    url = storage.url(path)

    # -- 1. Classify ------------------------------------------------------------------------
    if logs:
        result = classify_logs(
            list(logs), extra_signature_files=[*config.classify.signatures, *signature_files]
        )
        doc = result.to_json()
        report.classify = doc
        root_cause = doc.get("root_cause") or {}
        where = f" ({root_cause.get('file')}:{root_cause.get('line')})" if root_cause else ""
        rec.log(
            "classify",
            f"{result.category} fault, {result.confidence} confidence: {result.action}{where}",
            category=result.category,
            hosts=list(result.hosts),
        )
        category, hosts = result.category, list(result.hosts)
    else:
        category, hosts = "unknown", []
        report.classify = None
        rec.log("classify", "no logs given: the cause is unknown (pass --logs to classify it)")
    triage = core.decide_triage(category, hosts, force=force, on_unknown=on_unknown)
    report.triage = triage
    rec.log("triage", triage.reason)
    if not triage.proceed:
        return rec.stop(triage.reason)

    # -- 2. Drain ---------------------------------------------------------------------------
    drain_cfg = config.recover.drain
    commands = core.plan_drain(triage.drain_hosts, kind=drain_cfg.kind, reason=drain_cfg.reason)
    for cmd in commands:
        shown = shlex.join(cmd.argv)
        if execute_drain and not dry_run:
            outcome = _run_drain(cmd)
            report.drain.append(outcome)
            audit.append_record(
                storage,
                path,
                {
                    "time": _iso(rec.now()),
                    **_actor(),
                    "action": "drain",
                    "argv": list(cmd.argv),
                    "ok": outcome["ok"],
                    "ckptctl_version": __version__,
                },
            )
            if not outcome["ok"]:
                return rec.stop(f"drain failed: {shown}: {outcome.get('error') or outcome.get('output')}")
            rec.log("drain", f"drained: {shown}")
        else:
            report.drain.append({**cmd.to_json(), "executed": False})
            why = "dry run" if dry_run else "pass --execute-drain to run it"
            rec.log("drain", f"drain step (not executed, {why}): {shown}")
    if triage.drain_hosts and not commands:
        rec.log("drain", f"drain kind is 'none': take {', '.join(triage.drain_hosts)} out of the pool by hand")

    # -- 3. Capacity --------------------------------------------------------------------------
    lc = config.launch
    excluded = tuple(dict.fromkeys([*lc.exclude_hosts, *triage.drain_hosts]))
    decision, refusal = _await_capacity(config, excluded, rec, dry_run=dry_run)
    if refusal is not None:
        return rec.stop(refusal)

    # -- 4..7. Locate, verify, resume, watch; fall back on a bad resume -------------------------
    baseline_paths = [baseline_log] if baseline_log else [p for p in logs if p != "-"]
    baseline_lines = [line for p in baseline_paths for line in _read_lines(p)]
    history: list[core.Attempt] = []
    while True:
        found = find_latest_complete(url, deep=deep)
        for s in found.skipped:
            report.skipped_checkpoints.append({"path": s.path, "status": s.status, "problems": s.problems})
            rec.log("verify", f"skipped {s.name} ({s.status}): {'; '.join(s.problems[:2])}")
        if found.checkpoint is None:
            return rec.stop(f"no complete checkpoint under {url} to resume from")
        ckpt = found.checkpoint
        report.checkpoint = {
            "path": ckpt.path,
            "step": ckpt.step,
            "world_size": ckpt.world_size,
            "deep": ckpt.deep,
            "status": ckpt.status,
        }
        rec.log("verify", f"newest complete checkpoint: {ckpt.path} (step {ckpt.step}, world size {ckpt.world_size})")
        plan = prepare_launch(config, resume_from=ckpt.path, nnodes=decision.nnodes, exclude_hosts=excluded)
        report.launch_plan = plan.to_json()
        if dry_run:
            report.outcome = "dry-run"
            report.reason = "dry run: the plan above would be carried out"
            rec.log("launch", "would run: " + shlex.join(plan.argv))
            return report

        attempt_no = len(history) + 1
        watcher, watch_state = _make_watcher(config, ckpt.step, baseline_lines)
        rec.log("launch", f"attempt {attempt_no}/{max_attempts}: " + shlex.join(plan.argv))

        def on_line(line: str, _w: Any = watcher, _s: dict[str, Any] = watch_state) -> bool:
            return _feed_watch(_w, _s, line)

        from ckptctl.ops.launch import run_launch

        run = run_launch(
            plan,
            on_output=on_output,
            on_line=on_line if watcher is not None else None,
            # the job's own retention may act while recover holds the lock on its behalf
            extra_env={INHERITED_TOKEN_ENV: held.info.token} if held is not None else None,
        )
        verdict = watch_state.get("verdict")
        if verdict is None and watcher is not None:
            final = watcher.result()
            verdict = final.verdict
            watch_state["result"] = final.to_json()
        attempt = core.Attempt(
            number=attempt_no,
            checkpoint_step=ckpt.step,
            checkpoint_path=ckpt.path,
            exit_code=run.exit_code,
            watch_verdict=verdict,
            stopped_by_watch=run.stopped_by_callback,
            interrupted_by=None if run.interrupted_by is None else signal_name(run.interrupted_by),
        )
        history.append(attempt)
        report.attempts.append(
            AttemptRecord(
                attempt,
                list(plan.argv),
                run.log_path,
                watch_state.get("result"),
                round(run.duration_s, 3),
                run.stop_reason,
            )
        )
        rec.log(
            "watch",
            f"attempt {attempt_no}: job exit {run.exit_code}, loss watch: {verdict or 'no verdict'}",
            exit_code=run.exit_code,
            verdict=verdict,
        )
        nxt = core.decide_after_attempt(history, max_attempts=max_attempts)
        rec.log("decide", nxt.reason)
        if nxt.kind == "done":
            report.outcome = "recovered"
            report.reason = nxt.reason
            return report
        if nxt.kind == "stop":
            report.interrupted_by = run.interrupted_by
            return rec.stop(nxt.reason)
        if nxt.kind == "rollback-and-resume":
            refused = _quarantine_bad_resume(rec, url, ckpt.step, str(verdict), held=held, deep=deep)
            if refused is not None:
                return rec.stop(refused)
        else:
            # A failed or preempted run: the losses it logged continue the pre-failure
            # record, so the next watch compares against them too. Appended, never
            # swapped in: a run that died right after the start logged no loss at all,
            # and replacing the baseline with its log would disarm the next watch
            # (and throw away an explicit --baseline).
            baseline_lines = baseline_lines + _read_lines(run.log_path)


def _quarantine_bad_resume(
    rec: _Recovery, url: str, step: int | None, verdict: str, *, held: HeldLock | None, deep: bool
) -> str | None:
    """Fallback after a bad resume from ``step``: quarantine that checkpoint and every
    checkpoint the bad run saved. Returns the reason to stop when a rollback is refused.

    The checkpoint at ``step`` was the newest complete one when the attempt started,
    so a complete checkpoint at a later step now was written by that attempt: saved
    before the watch had seen enough to stop it (``save_every`` below
    ``watch_steps``), or after a job that ran to the end on the wrong state. It
    carries the same bad state; resuming from it would repeat the bad resume and
    spend an attempt on it. Quarantined newest first, so each rename leaves a
    complete checkpoint older than its target (rollback's safety rule).
    """
    from ckptctl.ops.checkpoints import find_latest_complete
    from ckptctl.ops.rollback import rollback

    why = f"ckptctl recover: loss watch said {verdict} after resuming from step {step}"
    if step is not None:
        seen: set[str] = set()
        while True:
            newest = find_latest_complete(url, deep=deep).checkpoint
            if newest is None or newest.step is None or newest.step <= step or newest.path in seen:
                break
            seen.add(newest.path)
            rb = rollback(url, step=newest.step, reason=f"{why}; saved by that run", deep=deep, held_lock=held)
            if not _record_rollback(rec, rb, "saved by the bad run"):
                return f"cannot fall back: {rb.refusal.message if rb.refusal else 'refused'}"
    rb = rollback(url, step=step, reason=why, deep=deep, held_lock=held)
    if not _record_rollback(rec, rb, "resumed from"):
        return f"cannot fall back: {rb.refusal.message if rb.refusal else 'refused'}"
    return None


def _record_rollback(rec: _Recovery, rb: RollbackResult, what: str) -> bool:
    """Add a rollback to the report; False when it was refused."""
    rec.report.rollbacks.append(rb.to_json())
    if rb.refused or rb.plan is None:
        return False
    rec.log("rollback", f"quarantined {rb.plan.source} ({what}); locate now returns {rb.locate}")
    return True


def _make_watcher(config: CkptctlConfig, resume_step: int | None, baseline_lines: list[str]) -> tuple[Any, dict[str, Any]]:
    """A LossWatcher for one attempt, or None when there is no pre-failure loss to compare."""
    from ckptctl.errors import CkptctlError
    from ckptctl.ops.watch import LossWatcher, make_config

    state: dict[str, Any] = {"lock": threading.Lock()}
    fields = dict(config.recover.watch)
    fields.setdefault("num_steps", config.recover.watch_steps)
    try:
        cfg = make_config(**fields)
        watcher = LossWatcher(resume_step=resume_step, config=cfg, baseline_lines=baseline_lines or None)
    except CkptctlError as e:
        state["result"] = {"error": e.message}
        return None, state
    except TypeError as e:
        state["result"] = {"error": f"recover.watch: {e}"}
        return None, state
    return watcher, state


def _feed_watch(watcher: Any, state: dict[str, Any], line: str) -> bool:
    """Feed one job line; True asks the launcher to stop the job (a bad resume)."""
    if state.get("verdict") is not None:
        return False
    with state["lock"]:
        res = watcher.feed(line)
        if res is None or not res.decided:
            return False
        state["verdict"] = res.verdict
        state["result"] = res.to_json()
        return res.verdict in core.BAD_RESUME_VERDICTS
