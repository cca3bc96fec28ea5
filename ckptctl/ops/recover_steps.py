"""The steps of ``recover`` that talk to the outside: drain, capacity, the loss watch, fallback.

``ckptctl.ops.recover`` walks the plan and calls these; each records what it did
in the report through the ``Narrator`` it is given.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ckptctl.adapters.runlock import HeldLock
from ckptctl.backends import registry
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.plan import CapacityDecision
from ckptctl.core.recover import decisions
from ckptctl.errors import CkptctlError
from ckptctl.ops.recover_report import AttemptRecord, CapacityRecord, DrainRecord, RecoveryReport
from ckptctl.runroot.root import RunRoot

if TYPE_CHECKING:
    from ckptctl.ops.rollback import RollbackResult


class Narrator(Protocol):
    """What a step needs from the recovery: the report and a timeline."""

    report: RecoveryReport

    def log(self, stage: str, message: str, **data: Any) -> None: ...


def run_drain(cmd: decisions.DrainCommand, timeout_s: float = 120.0) -> DrainRecord:
    """Run one drain command to the end (bounded by ``timeout_s``); how it went."""
    try:
        proc = subprocess.run(list(cmd.argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return DrainRecord(command=cmd, executed=True, ok=False, error=f"{cmd.argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return DrainRecord(command=cmd, executed=True, ok=False, error=f"timed out after {timeout_s:.0f} s")
    return DrainRecord(
        command=cmd,
        executed=True,
        ok=proc.returncode == 0,
        returncode=proc.returncode,
        output=(proc.stdout + proc.stderr).strip()[-2000:],
    )


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


def await_capacity(
    config: CkptctlConfig,
    excluded: Sequence[str],
    rec: Narrator,
    *,
    dry_run: bool,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[CapacityDecision | None, str | None]:
    """RB-7's capacity check: (the decision, None) to go on, or (decision, why) to stop.

    With ``min_nodes_policy: wait`` and a ``hosts_command``, asks again every
    ``capacity_poll_s`` until enough hosts are healthy or ``capacity_timeout_s`` passes.
    A dry run asks once and never waits.
    """
    from ckptctl.core.launch.plan import plan_capacity

    lc, rc = config.launch, config.recover
    command = rc.hosts_command
    backend = registry.get(lc.backend)
    # Without a hosts_command, a backend with a scheduler asks it (slurm: sinfo).
    scheduler_query = None if command else backend.hosts_query()
    asked: tuple[str, ...] = tuple(command) if command else (scheduler_query or ())
    start = clock()
    checks = 0
    while True:
        checks += 1
        if command:
            try:
                hosts: list[str] | None = query_hosts(command)
            except RuntimeError as e:
                rec.report.capacity = CapacityRecord(decision=None, hosts_command=asked, checks=checks, error=str(e))
                return None, f"capacity check failed: {e}"
        elif scheduler_query:
            try:
                hosts = backend.usable_hosts()
            except CkptctlError as e:
                rec.report.capacity = CapacityRecord(decision=None, hosts_command=asked, checks=checks, error=e.message)
                return None, f"capacity check failed: {e.message}"
        else:
            hosts = list(lc.hosts) if lc.hosts else None
        decision = plan_capacity(lc.min_nodes, lc.max_nodes, hosts, excluded, rc.min_nodes_policy)
        waited = clock() - start
        rec.report.capacity = CapacityRecord(
            decision=decision, hosts_command=asked or None, checks=checks, waited_s=round(waited, 3)
        )
        rec.log("capacity", decision.reason)
        if decision.should_launch:
            return decision, None
        if not asked:
            return decision, (
                f"not enough healthy hosts: {decision.reason}; nothing to wait on "
                "(launch.hosts is fixed: set recover.hosts_command to wait for capacity)"
            )
        if dry_run:
            return decision, (
                f"not enough healthy hosts: {decision.reason}; a real run would ask "
                f"{shlex.join(asked)} every {rc.capacity_poll_s:g} s for up to {rc.capacity_timeout_s:g} s"
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



def make_watcher(
    config: CkptctlConfig, resume_step: int | None, baseline_lines: list[str], checkpoint_tokens: int | None = None
) -> tuple[Any, dict[str, Any]]:
    """A LossWatcher for one attempt, or None when there is no pre-failure loss to compare.

    ``checkpoint_tokens``: the tokens seen recorded in the checkpoint's manifest; the watch
    checks that the resumed run's counter continues from it (RB-7: tokens seen consistent).
    """
    from ckptctl.ops.watch import LossWatcher, make_config

    state: dict[str, Any] = {"lock": threading.Lock()}
    fields = dict(config.recover.watch)
    fields.setdefault("num_steps", config.recover.watch_steps)
    try:
        cfg = make_config(**fields)
        watcher = LossWatcher(
            resume_step=resume_step, config=cfg, baseline_lines=baseline_lines or None,
            checkpoint_tokens=checkpoint_tokens,
        )
    except CkptctlError as e:
        state["result"] = {"error": e.message}
        return None, state
    except TypeError as e:
        state["result"] = {"error": f"recover.watch: {e}"}
        return None, state
    return watcher, state


def feed_watch(watcher: Any, state: dict[str, Any], line: str) -> bool:
    """Feed one job line; True asks the launcher to stop the job (a bad resume)."""
    if state.get("verdict") is not None:
        return False
    with state["lock"]:
        res = watcher.feed(line)
        if state.get("first_step_at") is None and watcher.num_points > 0:
            state["first_step_at"] = datetime.now(timezone.utc)
        if res is None or not res.decided:
            return False
        state["verdict"] = res.verdict
        state["result"] = res.to_json()
        return decisions.classify_verdict(res.verdict) == "bad"


def read_lines(path: str | None) -> list[str]:
    """A local log's lines (none when it cannot be read: the watch then says so)."""
    if not path:
        return []
    try:
        return Path(path).read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return []


# -- fallback ---------------------------------------------------------------------------------


def quarantine_bad_resume(
    rec: Narrator, record: AttemptRecord, root: RunRoot, step: int | None, verdict: str, *, held: HeldLock | None, deep: bool
) -> str | None:
    """Fallback after a bad resume from ``step``: quarantine every complete checkpoint the bad
    attempt wrote (regular saves and the emergency checkpoint of its stop), newest first,
    then the checkpoint it resumed from. Returns the reason to stop when a rollback is refused.

    The checkpoint at ``step`` was the newest complete one when the attempt started and
    the attempt has ended (the backends wait for it), so every complete checkpoint at a
    later step now was written by it and carries the same bad state.
    """
    from ckptctl.ops.rollback import rollback
    from ckptctl.runroot.locate import find_latest_complete

    why = f"ckptctl recover: loss watch said {verdict} after resuming from step {step}"
    if step is not None:
        seen: set[str] = set()
        while True:
            newest = find_latest_complete(root, deep=deep).checkpoint
            if newest is None or newest.step is None or newest.step <= step or newest.path in seen:
                break
            seen.add(newest.path)
            rb = rollback(root, step=newest.step, reason=f"{why}; saved by that run", deep=deep, held_lock=held)
            if not record_rollback(rec, record, rb, "saved by the bad run"):
                return f"cannot fall back: {rb.refusal.message if rb.refusal else 'refused'}"
    rb = rollback(root, step=step, reason=why, deep=deep, held_lock=held)
    if not record_rollback(rec, record, rb, "resumed from"):
        return f"cannot fall back: {rb.refusal.message if rb.refusal else 'refused'}"
    return None


def record_rollback(rec: Narrator, record: AttemptRecord, rb: RollbackResult, what: str) -> bool:
    rec.report.rollbacks.append(rb)
    if rb.refused or rb.plan is None:
        return False
    record.quarantined.append(rb.plan.source)
    rec.report.locate_after = rb.locate
    rec.log("rollback", f"quarantined {rb.plan.source} ({what}); locate now returns {rb.locate}")
    return True


def cadence_section(root: RunRoot) -> dict[str, Any]:
    """RB-7's last check for the report: is the checkpoint interval still below the MTBF?

    Read-only (``ckptctl cadence``); a root it cannot measure gives the reason, never
    a failed recovery.
    """
    from ckptctl.ops.cadence import cadence

    try:
        return cadence(root).to_json()
    except CkptctlError as e:
        return {"error": e.message}
