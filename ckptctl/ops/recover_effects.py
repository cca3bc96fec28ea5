"""What differs between a dry run and a real ``recover``: drain and launch.

``recover`` walks the same plan with either ``DryEffects`` (show the drain command,
render the launch or batch script, run nothing) or ``RealEffects`` (run the drain
and audit it, start the job through its backend (``backends.registry``), record who
owns it in the audit log and the run root's active job (``runroot.state``, ``job.json``).
The walk has no ``if dry_run`` branches.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ckptctl.adapters.audit import current_actor
from ckptctl.adapters.runlock import INHERITED_TOKEN_ENV, HeldLock
from ckptctl.backends import registry
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.plan import LaunchPlan
from ckptctl.core.recover import decisions
from ckptctl.ops import recover_steps as steps
from ckptctl.ops.recover_report import DrainRecord, LaunchRecord, iso
from ckptctl.ops.recover_steps import Narrator
from ckptctl.runroot import audit
from ckptctl.runroot.root import RunRoot
from ckptctl.runroot.state import ActiveJob, write_active_job

if TYPE_CHECKING:
    from ckptctl.backends.base import JobRun


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Effects:
    dry = False
    held: HeldLock | None = None

    def drain(self, rec: Narrator, cmd: decisions.DrainCommand, execute: bool) -> str | None:
        raise NotImplementedError

    def launch(self, rec: Narrator, config: CkptctlConfig, plan: LaunchPlan, **kw: Any) -> JobRun | None:
        raise NotImplementedError


class DryEffects(Effects):
    dry = True

    def drain(self, rec: Narrator, cmd: decisions.DrainCommand, execute: bool) -> str | None:
        rec.report.drain.append(DrainRecord(command=cmd, executed=False))
        rec.log("drain", f"drain step (not executed, dry run): {shlex.join(cmd.argv)}")
        return None

    def launch(self, rec: Narrator, config: CkptctlConfig, plan: LaunchPlan, **kw: Any) -> JobRun | None:
        preview = registry.get(config.launch.backend).preview(config, plan)
        if preview.section is not None:
            rec.report.launch_plan = LaunchRecord(plan=plan, preview=preview)
        rec.log("launch", preview.summary)
        rec.report.outcome = "dry-run"
        rec.report.reason = "dry run: the plan above would be carried out"
        return None


class RealEffects(Effects):
    """Acts on the run root ``root`` while holding its lock (``held``)."""

    def __init__(self, root: RunRoot, held: HeldLock | None, clock: Callable[[], datetime] = _utc_now) -> None:
        self.root, self.held, self.clock = root, held, clock

    def drain(self, rec: Narrator, cmd: decisions.DrainCommand, execute: bool) -> str | None:
        shown = shlex.join(cmd.argv)
        if not execute:
            rec.report.drain.append(DrainRecord(command=cmd, executed=False))
            rec.log("drain", f"drain step (not executed, pass --execute-drain to run it): {shown}")
            return None
        outcome = steps.run_drain(cmd)
        rec.report.drain.append(outcome)
        audit.write(self.root, audit.Drain(who=current_actor(self.clock), argv=cmd.argv, ok=bool(outcome.ok)))
        if outcome.failure is not None:
            return f"drain failed: {shown}: {outcome.failure}"
        rec.log("drain", f"drained: {shown}")
        return None

    def launch(self, rec: Narrator, config: CkptctlConfig, plan: LaunchPlan, **kw: Any) -> JobRun | None:
        backend = registry.get(config.launch.backend)

        def on_submit(job_id: str, script: str | None) -> None:
            record = audit.Launch(
                who=current_actor(self.clock),
                backend=config.launch.backend,
                job_id=job_id,
                script=script,
                detached=kw["detach"],
                started=iso(self.clock()),
                resume_from=plan.resume_from,
            )
            audit.write(self.root, record)
            write_active_job(self.root, ActiveJob.from_launch(record, attempt=kw.get("attempt")))
            rec.log("launch", f"{config.launch.backend} job {job_id} started" + (f" ({script})" if script else ""))

        return backend.run(
            config,
            plan,
            detach=kw["detach"],
            decided=kw["decided"],
            on_output=kw["on_output"],
            on_line=kw["on_line"],
            on_submit=on_submit,
            # the job's own retention may act while recover holds the lock on its behalf
            extra_env={INHERITED_TOKEN_ENV: self.held.info.token} if self.held is not None else None,
        )
