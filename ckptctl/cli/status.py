"""`ckptctl status ROOT` (the job recover left running, the last verdict) and
`ckptctl incidents ROOT` (the incident ledger across a run). Read-only."""

from __future__ import annotations

import typer
from rich.markup import escape

from ckptctl.cli import output as out
from ckptctl.cli.options import JsonOpt, RootArg


def status_cmd(root: RootArg, json_: JsonOpt = False) -> None:
    """The job the last recovery started (Slurm: squeue/scontrol/sacct) and the last loss-watch verdict."""
    from ckptctl.ops.status import run_status

    doc = run_status(root)
    if json_:
        out.emit_json(doc)
        return
    c = out.out()
    c.print(f"STATUS  {escape(doc['root'])}")
    job = doc["job"]
    if job is None:
        c.print("job: none recorded (no recovery has launched one)")
    else:
        now = job.get("now") or {}
        owner = job.get("owner") or {}
        c.print(
            f"job: {job.get('backend')} {job.get('job_id')}: {escape(str(now.get('state')))}"
            f" (started {job.get('started')} by {owner.get('user')}@{owner.get('host')}"
            f"{', detached' if job.get('detached') else ''})"
        )
        if now.get("error"):
            c.print(f"  {escape(str(now['error']))}")
    last = doc["last_recovery"]
    if last is None:
        c.print("last recovery: none")
    else:
        c.print(f"last recovery: {last['outcome']} ({last['ended']}), loss watch {last['watch_verdict'] or '-'}")
        c.print(f"  {escape(str(last['reason']))}")


def incidents_cmd(root: RootArg, json_: JsonOpt = False) -> None:
    """Time lost per failure, steps recomputed, goodput/badput, MTBF/MTTR, hosts drained (RMA candidates)."""
    from ckptctl.ops.status import run_incidents

    doc = run_incidents(root)
    if json_:
        out.emit_json(doc)
        return
    c = out.out()
    c.print(f"INCIDENTS  {escape(doc['root'])}: {doc['num_incidents']}")
    for i, r in enumerate(doc["incidents"], 1):
        c.print(
            f"{i}. {r['failure_time']} {r['category'] or '-'} -> {r['outcome']}: lost {r['badput_s']} s, "
            f"{r['steps_recomputed']} step(s) recomputed, verdicts {', '.join(str(v) for v in r['verdicts']) or '-'}"
        )
    c.print(
        f"total: goodput {doc['goodput_s']} s, badput {doc['badput_s']} s (goodput fraction {doc['goodput_fraction']}), "
        f"MTBF {doc['mtbf_s']} s, MTTR {doc['mttr_s']} s"
    )
    for h in doc["hosts"]:
        flag = "  RMA candidate" if h["rma_candidate"] else ""
        c.print(f"host {h['host']}: drained {h['drains']}x ({h['infra_drains']} infra){flag}")


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("incidents")(incidents_cmd)
