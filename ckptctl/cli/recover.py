"""`ckptctl recover`: classify -> drain -> locate -> verify -> resume -> watch -> fall back."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ckptctl.cli import output as out
from ckptctl.cli.options import ConfigOpt, DeepOpt, DryRunOpt, JsonOpt, SignaturesOpt

if TYPE_CHECKING:
    from ckptctl.ops.recover_report import RecoveryReport


def _render(report: RecoveryReport) -> None:
    c = out.out()
    style = {"recovered": "green", "dry-run": "cyan", "resumed-unverified": "yellow"}.get(report.outcome, "red")
    c.print(f"RECOVERY REPORT  {escape(report.root)}")
    c.print(f"outcome: [{style}]{report.outcome}[/] - {escape(report.reason)}")
    if report.plan is not None and (report.dry_run or report.outcome == "plan-only"):
        c.print("plan:")
        for line in report.plan.lines():
            c.print(f"  {escape(line)}")
    elif report.plan is not None:
        c.print(f"config: {escape(report.plan.config_file or '(none: defaults)')}")
    if report.classify:
        cl = report.classify.to_json()
        c.print(f"classify: {cl['category']} ({cl['confidence']} confidence): {escape(cl['action'])}")
        rc = cl.get("root_cause")
        if rc:
            c.print(f"  root cause: {escape(str(rc.get('file')))}:{rc.get('line')}: {escape(str(rc.get('text'))[:160])}")
        for s in cl.get("symptoms", [])[:3]:
            c.print(f"  symptom:    {escape(str(s.get('file')))}:{s.get('line')}: {escape(str(s.get('text'))[:160])}")
    if report.triage:
        c.print(f"decision: {escape(report.triage.reason)}")
    for d in report.drain:
        if not d.executed:
            state = "NOT executed (--execute-drain runs it)"
        else:
            state = "executed" if d.ok else f"FAILED: {d.failure}"
        c.print(f"drain: {escape(shlex.join(d.command.argv))}  [{escape(state)}]")
    if report.capacity:
        c.print(f"capacity: {escape(report.capacity.reason)}")
    for s in report.skipped_checkpoints:
        c.print(f"skipped: {escape(s.path)} ({s.status}): {escape('; '.join(s.problems[:2]))}")
    if report.checkpoint:
        ck = report.checkpoint
        c.print(f"checkpoint: {escape(ck.path)} (step {ck.step}, world size {ck.world_size})")
    if report.launch_plan and report.dry_run:
        c.print("command: " + escape(shlex.join(report.launch_plan.plan.argv)))
        preview = report.launch_plan.preview
        if preview is not None and preview.script is not None:
            c.print("batch script (" + escape(shlex.join(preview.submit_argv)) + "):")
            for line in preview.script.splitlines():
                c.print("  " + escape(line))
    for a in report.attempts:
        j = a.to_json()
        c.print(
            f"attempt {j['number']}: from step {j['checkpoint_step']}, exit {j['exit_code']}, "
            f"loss watch {j['watch_verdict'] or '-'}, log {escape(str(j['log']))}"
        )
        c.print("  command: " + escape(shlex.join(j["argv"])))
        job = j.get("job") or {}
        if job.get("job_id"):
            facts = [escape(str(job["state"]))] if job.get("state") else []
            facts += ["still running"] if job.get("still_running") else []
            shown = f" ({', '.join(facts)})" if facts else ""
            c.print(f"  job: {job.get('backend')} {job.get('job_id')}{shown}")
        if isinstance(j.get("watch"), dict):
            out.print_loss_chart(j["watch"], indent="  ")
    for r in report.rollbacks:
        if r.refusal is not None or r.plan is None:
            c.print(f"rollback refused: {escape(r.refusal.message if r.refusal else 'no plan')}")
            continue
        c.print(f"rollback: quarantined {escape(str(r.plan.path(r.plan.source)))} -> {escape(r.plan.destination)}")
    c.print("timeline:")
    for t in report.timeline:
        c.print(f"  {t.time}  {t.stage:<9} {escape(t.message)}")
    for w in report.warnings:
        c.print(f"[yellow]warning:[/] {escape(w)}")
    if report.report_path:
        c.print(f"report: {escape(report.report_path)}")


def recover_cmd(
    root: Annotated[
        str | None, typer.Argument(help="Checkpoint run root (path or fsspec URL); default: run_root in the config.")
    ] = None,
    logs: Annotated[
        list[str] | None,
        typer.Option("--logs", "-l", help="A log to classify (file, dir, glob, URL, '-'). Repeatable."),
    ] = None,
    config_path: ConfigOpt = None,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Pre-failure training log for the loss watch (default: the --logs).")
    ] = None,
    signatures: SignaturesOpt = None,
    no_logs: Annotated[
        bool, typer.Option("--no-logs", help="Resume without classifying (say so explicitly: the cause stays unknown).")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Return after the watch verdict and leave the job running (local backend).")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Resume even after a job fault.")] = False,
    execute_drain: Annotated[
        bool, typer.Option("--execute-drain", help="Run the drain command (scontrol / kubectl) instead of only printing it.")
    ] = False,
    on_unknown: Annotated[
        str, typer.Option("--on-unknown", help="When the cause is unknown: resume or stop.")
    ] = "resume",
    max_attempts: Annotated[
        int | None, typer.Option("--max-attempts", min=1, help="Relaunches before giving up (default: config).")
    ] = None,
    deep: DeepOpt = False,
    dry_run: DryRunOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Walk the RB-7 runbook: classify, drain, locate + verify, relaunch torchrun, watch the loss, fall back."""
    from ckptctl.errors import UsageError
    from ckptctl.ops.launch import load_config
    from ckptctl.ops.recover import recover

    if on_unknown not in ("resume", "stop"):
        raise UsageError(f"--on-unknown must be 'resume' or 'stop', got {on_unknown!r}")
    if logs and no_logs:
        raise UsageError("--logs and --no-logs contradict each other")
    config = load_config(config_path)
    run_root = root or config.run_root
    root_source = "argument" if root else ("config" if config.run_root else None)

    def on_event(stage: str, message: str) -> None:
        out.info(f"[{stage}] {message}")

    def on_output(line: str) -> None:
        sys.stderr.write(line if line.endswith("\n") else line + "\n")
        sys.stderr.flush()

    report = recover(
        run_root,
        config=config,
        logs=logs or [],
        no_logs=no_logs,
        root_source=root_source,
        detach=detach,
        signature_files=signatures or [],
        baseline_log=baseline,
        force=force,
        execute_drain=execute_drain,
        on_unknown="stop" if on_unknown == "stop" else "resume",
        deep=deep,
        dry_run=dry_run,
        max_attempts=max_attempts,
        on_event=on_event,
        on_output=on_output,
    )
    if json_:
        out.emit_json(report.to_json())
    else:
        _render(report)
    if report.outcome == "plan-only":
        out.error(report.reason, "give the run root and --logs FILE (or --no-logs); --dry-run shows the whole walk")
    raise typer.Exit(report.exit_code)


def runbook_cmd() -> None:
    """Print RB-7, the checkpoint recovery runbook, written for ckptctl."""
    from importlib import resources

    text = resources.files("ckptctl").joinpath("runbooks/RB-7-checkpoint-recovery.md").read_text("utf-8")
    out.print_line(text.rstrip("\n"))


def register(app: typer.Typer) -> None:
    app.command("recover")(recover_cmd)
    app.command("runbook")(runbook_cmd)
