"""`ckptctl list`, `ckptctl locate`, `ckptctl verify`: find and prove the last complete checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ckptctl import exit_codes
from ckptctl.cli import output as out
from ckptctl.cli.options import (
    CheckFiniteOpt,
    DeepOpt,
    IncludeModelOnlyOpt,
    JsonOpt,
    RequireOpt,
    RootArg,
    WorldSizeOpt,
)

if TYPE_CHECKING:
    from ckptctl.runroot.reports import CheckOptions, CheckpointReport

# The read-only use cases (runroot.locate) are imported inside each command: `ckptctl --help`
# must stay fast.

AllowGlobalOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-global",
        help="With --deep: also accept this pickle global (module.name) in records. Repeatable.",
    ),
]

_STYLE = {"complete": "green", "incomplete": "yellow", "corrupt": "red", "unsupported": "magenta"}


def _size(num_bytes: int) -> str:
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{num_bytes} B"


def _status(s: str) -> str:
    return f"[{_STYLE.get(s, 'white')}]{s}[/]"


def _render_report(r: CheckpointReport) -> None:
    console = out.out()
    ws = f"{r.world_size} ({r.world_size_source})" if r.world_size else "unknown"
    console.print(f"{_status(r.status)}  {escape(r.path)}")
    console.print(
        f"  step {r.step if r.step is not None else '-'}, kind {r.kind}, world size {ws}, "
        f"{r.num_files} files, {_size(r.size_bytes)}"
        + (", manifest" + (" committed" if r.committed else " (uncommitted)") if r.has_manifest else "")
    )
    if r.contents:
        console.print(f"  holds {escape(', '.join(r.contents))}" + (" (model-only export)" if r.model_only else ""))
    if r.deep:
        console.print(
            f"  deep: {_size(r.bytes_read)} read, {r.records_checked} records, "
            f"{r.members_crc_checked} CRC-32s checked"
        )
    for p in r.problem_details:
        console.print(f"  - [{_STYLE.get(p.severity, 'white')}]{p.severity}[/]: {escape(p.message)}")
    for n in r.notes:
        console.print(f"  [dim]note: {escape(n)}[/dim]")


def _options(
    deep: bool,
    world_size: int | None,
    check_finite: bool,
    allow: list[str] | None,
    require: str | None = None,
    include_model_only: bool = False,
) -> CheckOptions:
    from ckptctl.runroot.reports import CheckOptions

    return CheckOptions(
        deep=deep or check_finite,
        world_size=world_size,
        check_finite=check_finite,
        allowed_globals=frozenset(allow or ()),
        require=frozenset(p.strip() for p in (require or "").split(",") if p.strip()),
        include_model_only=include_model_only,
    )


def list_cmd(
    root: RootArg,
    json_: JsonOpt = False,
    deep: DeepOpt = False,
    world_size: WorldSizeOpt = None,
) -> None:
    """List every checkpoint under ROOT, newest first, with its verified status."""
    from ckptctl.runroot.locate import list_checkpoints
    from ckptctl.runroot.reports import iso_time

    with out.byte_progress("verifying") as bp:
        result = list_checkpoints(root, options=_options(deep, world_size, False, None), progress=bp.advance)
    if json_:
        out.emit_json(result.to_json())
    else:
        from rich.table import Table

        if not result.checkpoints:
            out.warn(f"no checkpoint directories under {result.root}")
        table = Table(show_edge=False, box=None, pad_edge=False)
        for col in ("STEP", "NAME", "STATUS", "WORLD", "SIZE", "MODIFIED", "REASON"):
            table.add_column(col, no_wrap=col != "REASON")
        for c in result.checkpoints:
            mtime = iso_time(c.mtime_s) or "-"
            table.add_row(
                str(c.step) if c.step is not None else "-",
                escape(c.name),
                _status(c.status),
                str(c.world_size or "-"),
                _size(c.size_bytes),
                mtime,
                escape(c.problems[0] + (f" (+{len(c.problems) - 1} more)" if len(c.problems) > 1 else ""))
                if c.problems
                else ("model-only export (no optimizer state)" if c.model_only else ""),
            )
        out.out().print(table)
        for p in result.pointers:
            out.info(f"pointer file {p.file} names {p.names!r} (a hint; verification decides)")
    bad = [c for c in result.checkpoints if not c.is_complete]
    raise typer.Exit(exit_codes.PROBLEM if bad or not result.checkpoints else exit_codes.OK)


def locate_cmd(
    root: RootArg,
    json_: JsonOpt = False,
    deep: DeepOpt = False,
    before: Annotated[
        int | None,
        typer.Option("--before", min=0, help="Newest complete checkpoint OLDER than this step (the rollback target)."),
    ] = None,
    world_size: WorldSizeOpt = None,
    require: RequireOpt = None,
    include_model_only: IncludeModelOnlyOpt = False,
) -> None:
    """Print the path of the newest COMPLETE checkpoint under ROOT (nothing else on stdout)."""
    from ckptctl.runroot.locate import find_latest_complete
    from ckptctl.runroot.reports import pointer_agrees

    with out.byte_progress("verifying") as bp:
        result = find_latest_complete(
            root,
            options=_options(deep, world_size, False, None, require, include_model_only),
            before_step=before,
            progress=bp.advance,
        )
    for s in result.skipped:
        out.warn(f"skipped {s.name} ({s.status}): {'; '.join(s.problems[:3]) or 'not complete'}")
    for name in result.vanished:
        out.warn(f"{name} disappeared while it was being checked (retention or a save at work?)")
    if json_:
        out.emit_json(result.to_json())
    elif result.checkpoint is not None:
        out.print_line(result.checkpoint.path)
    for p in result.pointers:
        if result.checkpoint is not None and not pointer_agrees(p, result.checkpoint):
            out.warn(f"{p.file} names {p.names!r}, but the newest complete checkpoint is {result.checkpoint.name}")
    if result.checkpoint is None:
        where = f" older than step {before}" if before is not None else ""
        out.error(
            f"no complete checkpoint{where} under {result.root} ({len(result.skipped)} candidate(s) failed)",
            "run `ckptctl list ROOT` to see every checkpoint and why it is not complete",
        )
        raise typer.Exit(exit_codes.PROBLEM)
    raise typer.Exit(exit_codes.OK)


def verify_cmd(
    target: Annotated[str, typer.Argument(help="A checkpoint directory or file, or a run root (path or fsspec URL).")],
    json_: JsonOpt = False,
    deep: DeepOpt = False,
    world_size: WorldSizeOpt = None,
    check_finite: CheckFiniteOpt = False,
    allow_global: AllowGlobalOpt = None,
    require: RequireOpt = None,
) -> None:
    """Prove a checkpoint complete (or every checkpoint under a run root); report every problem."""
    from ckptctl.runroot.locate import verify_target

    with out.byte_progress("deep verify" if deep else "verifying") as bp:
        result = verify_target(
            target, options=_options(deep, world_size, check_finite, allow_global, require), progress=bp.advance
        )
    if json_:
        out.emit_json(result.to_json())
    else:
        for r in result.checkpoints:
            _render_report(r)
        n_ok = sum(1 for c in result.checkpoints if c.is_complete)
        out.info(f"{n_ok} of {len(result.checkpoints)} checkpoint(s) complete")
    raise typer.Exit(exit_codes.OK if result.ok else exit_codes.PROBLEM)


def register(app: typer.Typer) -> None:
    app.command("list")(list_cmd)
    app.command("locate")(locate_cmd)
    app.command("verify")(verify_cmd)
