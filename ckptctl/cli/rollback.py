"""`ckptctl rollback` (quarantine / undo) and `ckptctl audit` (read the run root's audit log)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptctl import exit_codes
from ckptctl.cli import output as out
from ckptctl.cli.options import DeepOpt, DryRunOpt, JsonOpt, RootArg

if TYPE_CHECKING:
    from ckptctl.ops.rollback import RollbackResult

# ops is imported inside each command: `ckptctl --help` stays fast.

StepOpt = Annotated[
    int | None,
    typer.Option(
        "--step",
        min=0,
        help="Roll back the checkpoint at this step instead of the newest complete one; "
        "with --undo, restore the quarantined checkpoint at this step.",
    ),
]
UndoOpt = Annotated[
    bool,
    typer.Option("--undo", help="Restore the most recently quarantined checkpoint (or the one at --step)."),
]
ReasonOpt = Annotated[
    str | None,
    typer.Option("--reason", help="Why (recorded in <root>/.ckptctl/audit.jsonl), e.g. 'loss spike at 31k'."),
]


def _render(result: RollbackResult) -> None:
    plan = result.plan
    if plan is not None:
        title = "plan" if result.dry_run else result.operation
        out.info(f"{title}: {plan.action} {plan.source} -> {plan.destination} (a rename; nothing is deleted)")
        if plan.fallback:
            out.info(f"  fallback: {plan.fallback} (newest complete checkpoint older than step {plan.step})")
        out.info(f"  locate {'would' if result.dry_run else 'will'} return: {plan.next_locate or 'nothing'}")
        if plan.record.reason:
            out.info(f"  reason: {plan.record.reason}")
        out.info(f"  audit log: {result.audit_log}")
    for w in result.warnings:
        out.warn(w)
    if result.dry_run and plan is not None:
        out.info("dry run: nothing changed")
    elif result.done and plan is not None:
        if plan.action == "quarantine":
            out.info(f"done; undo with `ckptctl rollback --undo --step {plan.step} {result.root}`")
        else:
            out.info("done")


def rollback_cmd(
    root: RootArg,
    step: StepOpt = None,
    undo: UndoOpt = False,
    dry_run: DryRunOpt = False,
    reason: ReasonOpt = None,
    json_: JsonOpt = False,
    deep: DeepOpt = False,
) -> None:
    """Mark the newest complete checkpoint under ROOT as bad, reversibly, and print what
    `locate` returns now (the previous complete checkpoint).

    The checkpoint is renamed to NAME.quarantined-<UTC stamp> (never deleted) and the
    rename is recorded in ROOT/.ckptctl/audit.jsonl. Refuses (exit 3) when no earlier
    complete checkpoint exists; exit 4 when another ckptctl holds the run-root lock.
    """
    from ckptctl.ops import rollback as rollback_ops

    if undo and deep:
        raise typer.BadParameter("--deep verifies the fallback of a rollback; --undo has none", param_hint="--deep")
    with out.byte_progress("deep verify" if deep else "verifying") as bp:
        if undo:
            result = rollback_ops.undo(root, step=step, reason=reason, dry_run=dry_run, progress=bp.advance)
        else:
            result = rollback_ops.rollback(
                root, step=step, reason=reason, deep=deep, dry_run=dry_run, progress=bp.advance
            )
    if json_:
        out.emit_json(result.to_json())
    else:
        _render(result)
    if result.refusal is not None:
        out.error(result.refusal.message, result.refusal.hint)
        raise typer.Exit(exit_codes.PROBLEM)
    if not json_ and result.locate:
        out.print_line(result.locate)
    if result.locate is None:
        out.warn("locate now finds no complete checkpoint")
    raise typer.Exit(exit_codes.OK)


def _audit_line(rec: dict[str, Any]) -> str:
    parts = [str(rec.get("time", "?")), str(rec.get("action", "?"))]
    if rec.get("from") or rec.get("to"):
        parts.append(f"{rec.get('from')} -> {rec.get('to')}")
    parts.append(f"by {rec.get('user', '?')}@{rec.get('host', '?')} pid {rec.get('pid', '?')}")
    if rec.get("reason"):
        parts.append(f"reason: {rec['reason']}")
    if rec.get("outcome") not in (None, "done"):
        parts.append(f"[{rec['outcome']}: {rec.get('error', '')}]")
    return "  ".join(parts)


def audit_cmd(root: RootArg, json_: JsonOpt = False) -> None:
    """Show ROOT's audit log (every rollback, undo and broken stale lock), oldest first."""
    from ckptctl.ops import rollback as rollback_ops

    log = rollback_ops.read_audit(root)
    if json_:
        out.emit_json(log.to_json())
    else:
        if not log.exists:
            out.info(f"no audit log at {log.path}: ckptctl has changed nothing under this run root")
        for rec in log.records:
            out.print_line(_audit_line(rec))
    if log.num_unreadable:
        out.warn(f"{log.num_unreadable} line(s) of {log.path} are not JSON records and were skipped")
    raise typer.Exit(exit_codes.OK)


def register(app: typer.Typer) -> None:
    """Add the command(s) of this module to the app."""
    app.command("rollback")(rollback_cmd)
    app.command("audit")(audit_cmd)
