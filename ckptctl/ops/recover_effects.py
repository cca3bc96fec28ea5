"""What differs between a dry run and a real ``recover``: drain and launch.

``recover`` walks the same plan with either ``DryEffects`` (show the drain command,
render the launch or batch script, run nothing) or ``RealEffects`` (run the drain
and audit it, start the job through its backend, record who owns it in the audit
log and ``<root>/.ckptctl/job.json``). The walk has no ``if dry_run`` branches.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ckptctl import __version__
from ckptctl.adapters import audit
from ckptctl.adapters.runlock import INHERITED_TOKEN_ENV, HeldLock
from ckptctl.adapters.storage import Storage
from ckptctl.core import recover as core
from ckptctl.core.config import CkptctlConfig
from ckptctl.core.launch_plan import LaunchPlan
from ckptctl.ops import recover_steps as steps
from ckptctl.ops.recover_report import actor, iso
from ckptctl.ops.recover_steps import Narrator

if TYPE_CHECKING:
    from ckptctl.ops.jobs import JobRun

#: The job the run root's last recovery started: ``<root>/.ckptctl/job.json`` (``ckptctl status``).
JOB_FILE = "job.json"


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Effects:
    dry = False

    def drain(self, rec: Narrator, cmd: core.DrainCommand, execute: bool) -> str | None:
        raise NotImplementedError

    def launch(self, rec: Narrator, config: CkptctlConfig, plan: LaunchPlan, **kw: Any) -> JobRun | None:
        raise NotImplementedError


class DryEffects(Effects):
    dry = True

    def drain(self, rec: Narrator, cmd: core.DrainCommand, execute: bool) -> str | None:
        rec.report.drain.append({**cmd.to_json(), "executed": False})
        rec.log("drain", f"drain step (not executed, dry run): {shlex.join(cmd.argv)}")
        return None

    def launch(self, rec: Narrator, config: CkptctlConfig, plan: LaunchPlan, **kw: Any) -> JobRun | None:
        if config.launch.backend == "slurm":
            from ckptctl.ops.jobs import render_batch

            batch = render_batch(config, plan)
            rec.report.launch_plan = {**(rec.report.launch_plan or {}), "slurm": batch.to_json()}
            rec.log("launch", "would submit with " + shlex.join(batch.sbatch_argv) + ":\n" + batch.script.rstrip())
        else:
            rec.log("launch", "would run: " + shlex.join(plan.argv))
        rec.report.outcome = "dry-run"
        rec.report.reason = "dry run: the plan above would be carried out"
        return None


class RealEffects(Effects):
    def __init__(self, storage: Storage, path: str, held: HeldLock | None) -> None:
        self.storage, self.path, self.held = storage, path, held

    def audit(self, record: dict[str, Any]) -> None:
        audit.append_record(self.storage, self.path, {"time": iso(_utc_now()), **actor(), **record, "ckptctl_version": __version__})

    def drain(self, rec: Narrator, cmd: core.DrainCommand, execute: bool) -> str | None:
        shown = shlex.join(cmd.argv)
        if not execute:
            rec.report.drain.append({**cmd.to_json(), "executed": False})
            rec.log("drain", f"drain step (not executed, pass --execute-drain to run it): {shown}")
            return None
        outcome = steps.run_drain(cmd)
        rec.report.drain.append(outcome)
        self.audit({"action": "drain", "argv": list(cmd.argv), "ok": outcome["ok"]})
        if not outcome["ok"]:
            return f"drain failed: {shown}: {outcome.get('error') or outcome.get('output')}"
        rec.log("drain", f"drained: {shown}")
        return None

    def launch(self, rec: Narrator, config: CkptctlConfig, plan: LaunchPlan, **kw: Any) -> JobRun | None:
        from ckptctl.ops.jobs import run_job

        def on_submit(job_id: str, script: str | None) -> None:
            who = actor()
            record = {"backend": config.launch.backend, "job_id": job_id, "script": script, "owner": who,
                      "detached": kw["detach"], "started": iso(_utc_now()), "resume_from": plan.resume_from,
                      "log": None}
            self.audit({"action": "launch", **{k: v for k, v in record.items() if k != "owner"}})
            self.storage.write_bytes(
                self.storage.join(audit.state_dir(self.storage, self.path), JOB_FILE),
                (json.dumps(record, indent=2) + "\n").encode(),
            )
            rec.log("launch", f"{config.launch.backend} job {job_id} started" + (f" ({script})" if script else ""))

        return run_job(
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


