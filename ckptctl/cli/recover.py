"""`ckptctl recover`: classify -> drain -> locate -> verify -> resume -> watch -> fall back."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from ckptctl.cli import output as out
from ckptctl.cli.options import ConfigOpt, DeepOpt, DryRunOpt, JsonOpt, SignaturesOpt
from ckptctl.cli.output import escape


def _render(doc: dict[str, Any], plan_lines: list[str]) -> None:
    """The human summary of a recovery report (its ``--json`` document)."""
    c = out.out()
    outcome, dry = str(doc.get("outcome")), bool(doc.get("dry_run"))
    style = {"recovered": "green", "dry-run": "cyan", "resumed-unverified": "yellow"}.get(outcome, "red")
    c.print(f"RECOVERY REPORT  {escape(str(doc.get('root')))}")
    c.print(f"outcome: [{style}]{outcome}[/] - {escape(str(doc.get('reason')))}")
    if plan_lines and (dry or outcome == "plan-only"):
        c.print("plan:")
        for line in plan_lines:
            c.print(f"  {escape(line)}")
    elif doc.get("plan") is not None:
        c.print(f"config: {escape(doc.get('config_file') or '(none: defaults)')}")
    cl = doc.get("classify")
    if cl:
        c.print(f"classify: {cl['category']} ({cl['confidence']} confidence): {escape(cl['action'])}")
        rc = cl.get("root_cause")
        if rc:
            c.print(f"  root cause: {escape(str(rc.get('file')))}:{rc.get('line')}: {escape(str(rc.get('text'))[:160])}")
        for s in cl.get("symptoms", [])[:3]:
            c.print(f"  symptom:    {escape(str(s.get('file')))}:{s.get('line')}: {escape(str(s.get('text'))[:160])}")
    if doc.get("triage"):
        c.print(f"decision: {escape(doc['triage']['reason'])}")
    for d in doc.get("drain", []):
        if not d.get("executed"):
            state = "NOT executed (--execute-drain runs it)"
        elif d.get("ok"):
            state = "executed"
        else:
            state = "FAILED: " + str(d.get("error") or d.get("output") or f"exit {d.get('returncode')}")
        c.print(f"drain: {escape(shlex.join(d['argv']))}  [{escape(state)}]")
    cap = doc.get("capacity")
    if cap:
        c.print(f"capacity: {escape(str(cap.get('reason') or 'capacity check failed: ' + str(cap.get('error'))))}")
    for s in doc.get("skipped_checkpoints", []):
        c.print(f"skipped: {escape(s['path'])} ({s['status']}): {escape('; '.join(s['problems'][:2]))}")
    ck = doc.get("checkpoint")
    if ck:
        c.print(f"checkpoint: {escape(ck['path'])} (step {ck['step']}, world size {ck['world_size']})")
    lp = doc.get("launch_plan")
    if lp and dry:
        c.print("command: " + escape(shlex.join(lp["argv"])))
        script = (lp.get("slurm") or {}).get("script") if isinstance(lp.get("slurm"), dict) else None
        if script:
            argv = (lp.get("slurm") or {}).get("sbatch_argv") or ["sbatch"]
            c.print("batch script (" + escape(shlex.join(argv)) + "):")
            for line in str(script).splitlines():
                c.print("  " + escape(line))
    for j in doc.get("attempts", []):
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
        hang = j.get("hang")
        if isinstance(hang, dict):
            c.print(f"  hang: {escape(str(hang.get('reason')))}")
            sus = hang.get("suspects") or {}
            if sus.get("why"):
                c.print(f"  suspects: {escape(str(sus['why']))}")
            dumps = [d for d in hang.get("stack_dumps", []) if d.get("stack")]
            if dumps:
                c.print(f"  stack dumps: {', '.join(escape(str(d['path'])) for d in dumps)}")
        if isinstance(j.get("watch"), dict):
            out.print_loss_chart(j["watch"], indent="  ")
    for r in doc.get("rollbacks", []):
        plan = r.get("plan")
        if r.get("refused") or plan is None:
            c.print(f"rollback refused: {escape(str((r.get('refused') or {}).get('message') or 'no plan'))}")
            continue
        c.print(f"rollback: quarantined {escape(str(plan['source']['path']))} -> {escape(str(plan['destination']['name']))}")
    c.print("timeline:")
    for t in doc.get("timeline", []):
        c.print(f"  {t['time']}  {t['stage']:<9} {escape(t['message'])}")
    for w in doc.get("warnings", []):
        c.print(f"[yellow]warning:[/] {escape(w)}")
    if doc.get("report_path"):
        c.print(f"report: {escape(doc['report_path'])}")


def _raw_line(line: str) -> None:
    """A job output line on stderr, as the job wrote it (the job's log holds the same)."""
    sys.stderr.write(line if line.endswith("\n") else line + "\n")
    sys.stderr.flush()


class _Console:
    """The foreground's narration on stderr; a terminal that has gone away (EIO, EPIPE) is
    dropped for good, never fatal: everything is in the supervisor's event log too."""

    def __init__(self) -> None:
        self.gone = False

    def write(self, fn: Callable[[], None]) -> None:
        if self.gone:
            return
        try:
            fn()
        except (OSError, SystemExit):
            # SystemExit: rich's console answers a broken pipe (EPIPE) with SystemExit(1); the
            # recovery's outcome, not the reader's absence, decides recover's exit code
            self.gone = True
            # stdout/stderr now lead nowhere: point them at /dev/null so nothing later (rich's
            # buffers, the interpreter's last flush) fails on them and changes the exit code
            devnull = os.open(os.devnull, os.O_WRONLY)
            for fd in (1, 2):
                with contextlib.suppress(OSError):
                    os.dup2(devnull, fd)
            os.close(devnull)

    def event(self, ev: dict[str, Any]) -> None:
        kind = ev.get("kind")
        if kind == "event":
            self.write(lambda: out.info(f"[{ev.get('stage')}] {ev.get('message')}"))
        elif kind == "output":
            line = str(ev.get("line", ""))
            self.write(lambda: _raw_line(line))
        elif kind == "start":
            self.write(lambda: out.info(
                f"[supervisor] pid {ev.get('pid')} runs this recovery in a session of its own: closing this "
                f"terminal does not stop it; Ctrl-C stops the job and the recovery; events: {ev.get('events')}"
            ))


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
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Stop the run root's live job (and a recover still watching it) first, audited; "
            "without it recover refuses (exit 4) while that job runs.",
        ),
    ] = False,
    progress_timeout: Annotated[
        float | None,
        typer.Option(
            "--progress-timeout",
            min=0,
            metavar="SECONDS",
            help="No new training step for this long is a hang (default: recover.progress_timeout_s, "
            "else adaptive); 0: off.",
        ),
    ] = None,
    deep: DeepOpt = False,
    dry_run: DryRunOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Walk the RB-7 runbook: classify, drain, locate + verify, relaunch torchrun, watch the loss, fall back.

    A real run is carried out by a supervisor process of its own (not tied to this terminal):
    this command shows what it does and exits with its outcome. Ctrl-C / SIGTERM stop the job
    and the recovery (exit 130 / 143); closing the terminal does not.
    """
    from ckptctl.errors import UsageError
    from ckptctl.ops import recover_supervisor
    from ckptctl.ops.launch import load_config
    from ckptctl.ops.recover import plan_recovery, recover

    if on_unknown not in ("resume", "stop"):
        raise UsageError(f"--on-unknown must be 'resume' or 'stop', got {on_unknown!r}")
    if logs and no_logs:
        raise UsageError("--logs and --no-logs contradict each other")
    config = load_config(config_path)
    run_root = root or config.run_root
    root_source = "argument" if root else ("config" if config.run_root else None)
    kwargs: dict[str, Any] = {
        "config": config,
        "no_logs": no_logs,
        "root_source": root_source,
        "detach": detach,
        "signature_files": signatures or [],
        "baseline_log": baseline,
        "force": force,
        "execute_drain": execute_drain,
        "on_unknown": "stop" if on_unknown == "stop" else "resume",
        "deep": deep,
        "max_attempts": max_attempts,
        "replace": replace,
        "progress_timeout_s": progress_timeout,
    }
    console = _Console()
    plan = plan_recovery(
        run_root, config=config, root_source=root_source, logs=logs or [], no_logs=no_logs, detach=detach,
        execute_drain=execute_drain, deep=deep, max_attempts=max_attempts, baseline_log=baseline,
        progress_timeout_s=progress_timeout,
    )
    if dry_run or not plan.is_complete or run_root is None:
        # read-only (a dry run, or a plan with gaps): walked here, in this process
        report = recover(
            run_root, logs=logs or [], dry_run=dry_run,
            on_event=lambda stage, message: console.write(lambda: out.info(f"[{stage}] {message}")),
            **kwargs,
        )
        doc, plan_lines, code = report.to_json(), (report.plan.lines() if report.plan else []), report.exit_code
    else:
        sup = recover_supervisor.start(run_root, logs=list(logs or []), **kwargs)
        end = recover_supervisor.follow(sup, on_event=console.event)
        if end.get("kind") != "end":
            console.write(lambda: out.error(str(end.get("message")), end.get("hint")))
            raise typer.Exit(int(end.get("exit_code") or 1))
        doc, plan_lines, code = end["report"], list(end.get("plan_lines") or []), int(end["exit_code"])
    if json_:
        console.write(lambda: out.emit_json(doc))
    else:
        console.write(lambda: _render(doc, plan_lines))
    if doc.get("outcome") == "plan-only":
        console.write(lambda: out.error(
            str(doc.get("reason")), "give the run root and --logs FILE (or --no-logs); --dry-run shows the whole walk"
        ))
    raise typer.Exit(code)


def runbook_cmd() -> None:
    """Print RB-7, the checkpoint recovery runbook, written for ckptctl."""
    from importlib import resources

    text = resources.files("ckptctl").joinpath("runbooks/RB-7-checkpoint-recovery.md").read_text("utf-8")
    out.print_line(text.rstrip("\n"))


def register(app: typer.Typer) -> None:
    app.command("recover")(recover_cmd)
    app.command("runbook")(runbook_cmd)
