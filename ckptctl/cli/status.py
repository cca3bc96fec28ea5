"""`ckptctl status ROOT` (the lock, the job recover left running and whether it is verified,
the last finished recovery) and `ckptctl incidents ROOT` (the incident ledger across a run). Read-only."""

from __future__ import annotations

import typer

from ckptctl.cli import output as out
from ckptctl.cli.options import JsonOpt, RootArg
from ckptctl.cli.output import escape


def status_cmd(root: RootArg, json_: JsonOpt = False) -> None:
    """Who holds the lock, the job the last recovery started (asked of its scheduler) and whether
    the loss watch verified that job, and the last finished recovery."""
    from ckptctl.ops.status import run_status

    doc = run_status(root)
    if json_:
        out.emit_json(doc)
        return
    c = out.out()
    c.print(f"STATUS  {escape(doc['root'])}")
    held = doc["lock"]
    if held is None:
        c.print("lock: free")
    else:
        c.print(f"lock: {escape(held['describe'])}: {escape(held['state'])}")
    job = doc["job"]
    if job is None:
        c.print("job: none recorded (no recovery has launched one)")
    else:
        now = job.get("now") or {}
        owner = job.get("owner") or {}
        attempt = f", attempt {job['attempt']}" if job.get("attempt") else ""
        c.print(
            f"job: {job.get('backend')} {job.get('job_id')}: {escape(str(now.get('state')))}"
            f" (started {job.get('started')} by {owner.get('user')}@{owner.get('host')}{attempt}"
            f"{', detached' if job.get('detached') else ''})"
        )
        if now.get("error"):
            c.print(f"  {escape(str(now['error']))}")
        v = job.get("verified") or {}
        c.print(f"  verified: {'yes' if v.get('state') == 'verified' else 'no'} ({v.get('state')}): {escape(str(v.get('reason')))}")
    progress = doc["recovery_in_progress"]
    last = doc["last_recovery"]
    if progress is not None:
        c.print(f"recovery in progress: {escape(progress['describe'])}")
    if last is None:
        c.print("last recovery: none finished" + ("; one is in progress (above)" if progress is not None else ""))
    else:
        about = (
            "this job" if last["about_current_job"]
            else f"job {last['job_id']}, not the job above" if last["job_id"] and job is not None
            else f"job {last['job_id']}" if last["job_id"] else "no job launched"
        )
        c.print(
            f"last finished recovery: {last['outcome']} ({last['ended']}), about {about}: "
            f"loss watch {last['watch_verdict'] or '-'}"
        )
        c.print(f"  {escape(str(last['reason']))}")


def incidents_cmd(root: RootArg, json_: JsonOpt = False) -> None:
    """Time lost per failure, steps recomputed, goodput/badput, MTBF/MTTR, hosts drained (RMA candidates).

    Every failure: each recovery's report, recoveries that died without one (from their
    audit records and lock), and each restart of a job by its scheduler (a requeue)."""
    from ckptctl.ops.status import run_incidents

    doc = run_incidents(root)
    if json_:
        out.emit_json(doc)
        return
    c = out.out()
    c.print(f"INCIDENTS  {escape(doc['root'])}: {doc['num_incidents']}")
    for i, r in enumerate(doc["incidents"], 1):
        recomputed = "?" if r["steps_recomputed"] is None else r["steps_recomputed"]
        steps = (
            f"{recomputed} step(s) recomputed (reached {r['crash_step']}, resumed from {r['checkpoint_step']})"
            if r["crash_step"] is not None or r["checkpoint_step"] is not None
            else f"{recomputed} step(s) recomputed"
        )
        lost = "?" if r["badput_s"] is None else r["badput_s"]
        job = f", job {r['job_id']}" if r.get("job_id") else ""
        c.print(
            f"{i}. {r['failure_time']} {r['category'] or '-'} -> {r['outcome']}{job}: lost {lost} s, {steps}, "
            f"verdicts {', '.join(str(v) for v in r['verdicts']) or '-'}"
        )
        if r.get("note"):
            c.print(f"   {escape(str(r['note']))}")
    mtbf = doc["mtbf_s"]
    c.print(
        f"total: goodput {doc['goodput_s']} s, badput {doc['badput_s']} s (goodput fraction {doc['goodput_fraction']}), "
        f"MTBF {mtbf if mtbf is not None else '-'} s ({doc['mtbf_failures']} failure(s) over the observed span), "
        f"MTTR {doc['mttr_s']} s"
    )
    for h in doc["hosts"]:
        flag = "  RMA candidate" if h["rma_candidate"] else ""
        c.print(f"host {h['host']}: drained {h['drains']}x ({h['infra_drains']} infra){flag}")


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("incidents")(incidents_cmd)
