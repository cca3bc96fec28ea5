"""`ckptctl list`, `ckptctl locate`, `ckptctl verify`: find and prove the last complete checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

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
from ckptctl.cli.output import escape

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

PartOpt = Annotated[
    str | None,
    typer.Option(
        "--part",
        metavar="K/N|env",
        help="With --deep: check only part K of N of the shard bytes (JSON per part; exit 3 on a problem in it). "
        "'env': K and N from torchrun's RANK/WORLD_SIZE or srun's SLURM_PROCID/SLURM_NTASKS.",
    ),
]
PartOutOpt = Annotated[
    str | None,
    typer.Option(
        "--part-out",
        metavar="DIR",
        help="With --part: also write the part to DIR/part-K-of-N.json; the exit code then says only "
        "whether it was written (a launcher would take exit 3 for a crash).",
    ),
]
MergeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--merge",
        metavar="PATH",
        help="With --deep: the verdict of the whole checkpoint from the part files (files or their "
        "directory) of one --part run: the same JSON as a one-node --deep. Repeatable.",
    ),
]
LaunchOpt = Annotated[
    str | None,
    typer.Option(
        "--launch",
        metavar="srun|torchrun",
        help="With --deep and --parts N: run the N parts as one Slurm job step (srun, one task per node) "
        "or as N processes under torchrun, then merge them.",
    ),
]
PartsOpt = Annotated[int | None, typer.Option("--parts", min=1, help="With --launch: how many parts (nodes for srun).")]
PartsDirOpt = Annotated[
    str | None,
    typer.Option(
        "--parts-dir",
        metavar="DIR",
        help="With --launch: where the parts write their files (every node must reach it; kept). "
        "Default: a temporary directory (srun: in the working directory), removed after the merge.",
    ),
]
LauncherArgOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--launcher-arg",
        metavar="ARG",
        help="With --launch: one more argument for srun/torchrun (e.g. --partition=debug). Repeatable.",
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
    console.print(f"{_status(r.status)}  {escape(out.shown(r.path))}")
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
            out.warn(f"no checkpoint directories under {out.shown(result.root)}")
        table = Table(show_edge=False, box=None, pad_edge=False)
        for col in ("STEP", "NAME", "STATUS", "WORLD", "SIZE", "MODIFIED", "REASON"):
            table.add_column(col, no_wrap=col != "REASON")
        for c in result.checkpoints:
            mtime = iso_time(c.mtime_s) or "-"
            table.add_row(
                str(c.step) if c.step is not None else "-",
                escape(out.shown(c.name)),
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
            out.info(f"pointer file {out.shown(p.file)} names {out.shown(p.names)!r} (a hint; verification decides)")
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
        out.warn(f"skipped {out.shown(s.name)} ({s.status}): {'; '.join(s.problems[:3]) or 'not complete'}")
    for name in result.vanished:
        out.warn(f"{out.shown(name)} disappeared while it was being checked (retention or a save at work?)")
    if json_:
        out.emit_json(result.to_json())
    elif result.checkpoint is not None:
        if out.has_controls(result.checkpoint.path):
            # `--resume-from "$(ckptctl locate ROOT)"` would get another path than the one printed
            out.error(
                f"the located path {out.shown(result.checkpoint.path)} holds control characters: not printed raw",
                "use --json (the path is JSON-escaped there) or rename the run root",
            )
            raise typer.Exit(exit_codes.TOOL_FAILED)
        out.print_line(result.checkpoint.path)
    for p in result.pointers:
        if result.checkpoint is not None and not pointer_agrees(p, result.checkpoint):
            out.warn(f"{out.shown(p.file)} names {out.shown(p.names)!r}, but the newest complete checkpoint is "
                     f"{out.shown(result.checkpoint.name)}")
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
    part: PartOpt = None,
    part_out: PartOutOpt = None,
    merge: MergeOpt = None,
    launch: LaunchOpt = None,
    parts: PartsOpt = None,
    parts_dir: PartsDirOpt = None,
    launcher_arg: LauncherArgOpt = None,
) -> None:
    """Prove a checkpoint complete (or every checkpoint under a run root); report every problem.

    Across processes or nodes: --part K/N checks one part of the shard bytes, --merge gives
    the whole verdict from the parts, --launch srun|torchrun --parts N does both.
    """
    from ckptctl.ops import verify_parts as vp
    from ckptctl.runroot.locate import verify_target

    options = _options(deep, world_size, check_finite, allow_global, require)
    mode = _split_mode(options.deep, part, part_out, merge, launch, parts, parts_dir, launcher_arg)
    with out.byte_progress("deep verify" if deep else "verifying") as bp:
        if mode == "part":
            index, count = vp.parse_part(str(part))
            result = vp.run_part(target, options, index, count, part_out=part_out, progress=bp.advance)
        elif mode == "merge":
            result = vp.merge_parts(target, options, merge or [], progress=bp.advance)
        elif mode == "launch":
            result = vp.launch_parts(
                target, options, launcher=str(launch), count=int(parts or 0), parts_dir=parts_dir,
                launcher_args=launcher_arg or [], progress=bp.advance,
            )
        else:
            result = verify_target(target, options=options, progress=bp.advance)
    if json_:
        out.emit_json(result.to_json())
    else:
        for r in result.checkpoints:
            _render_report(r)
        n_ok = sum(1 for c in result.checkpoints if c.is_complete)
        what = f" (part {result.part[0]} of {result.part[1]})" if result.part else ""
        out.info(f"{n_ok} of {len(result.checkpoints)} checkpoint(s) complete{what}")
    if mode == "part" and part_out is not None:
        raise typer.Exit(exit_codes.OK)  # the part file holds the verdict; exit 0 says it was written
    raise typer.Exit(exit_codes.OK if result.ok else exit_codes.PROBLEM)


def _split_mode(
    deep: bool,
    part: str | None,
    part_out: str | None,
    merge: list[str] | None,
    launch: str | None,
    parts: int | None,
    parts_dir: str | None,
    launcher_arg: list[str] | None,
) -> str | None:
    """Which of --part, --merge, --launch is asked for (at most one, each with --deep), or None."""
    from ckptctl.errors import UsageError
    from ckptctl.ops.verify_parts import LAUNCHERS

    given = [name for name, v in (("--part", part), ("--merge", merge), ("--launch", launch)) if v]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} cannot be combined")
    if given and not deep:
        raise UsageError(f"{given[0]} splits the deep check: add --deep")
    if part_out is not None and not part:
        raise UsageError("--part-out needs --part")
    launch_only = [n for n, v in (("--parts", parts), ("--parts-dir", parts_dir), ("--launcher-arg", launcher_arg)) if v]
    if launch_only and not launch:
        raise UsageError(f"{launch_only[0]} needs --launch")
    if launch:
        if launch not in LAUNCHERS:
            raise UsageError(f"--launch {launch!r}: expected one of {', '.join(LAUNCHERS)}")
        if parts is None:
            raise UsageError("--launch needs --parts N")
    return given[0].lstrip("-") if given else None


def register(app: typer.Typer) -> None:
    app.command("list")(list_cmd)
    app.command("locate")(locate_cmd)
    app.command("verify")(verify_cmd)
