"""`ckptctl launch`: build torchrun elastic from ckptctl.yaml (+ flags), run it supervised.

Exit code: the job's (128+N when a signal killed it; 130/143 when ckptctl was
interrupted and stopped the job), 2 usage/config, 1 ckptctl failed, 3 no
complete checkpoint for ``--resume-from auto``. torch is never imported here:
torchrun runs as a child process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ckptctl import exit_codes
from ckptctl.cli import output as out
from ckptctl.cli.options import ConfigOpt, DryRunOpt, JsonOpt

if TYPE_CHECKING:
    from ckptctl.adapters.launcher import Supervisor

# The config and ops modules (yaml, subprocess machinery) are imported inside the command:
# `ckptctl --help` must stay fast.

CommandArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="-- SCRIPT [ARGS]",
        help="The training script and its arguments (replace launch.script/script_args). "
        "Everything from the script on is passed to it untouched.",
        show_default=False,
    ),
]
RunRootOpt = Annotated[
    str | None, typer.Option("--run-root", metavar="URL", help="Checkpoint root (overrides run_root).")
]
NnodesOpt = Annotated[
    str | None, typer.Option("--nnodes", metavar="N|MIN:MAX", help="Node count or elastic range.")
]
NprocOpt = Annotated[
    str | None,
    typer.Option("--nproc-per-node", metavar="N|auto|gpu|cpu", help="Workers per node."),
]
RdzvBackendOpt = Annotated[str | None, typer.Option("--rdzv-backend", help="Rendezvous backend (c10d).")]
RdzvEndpointOpt = Annotated[
    str | None, typer.Option("--rdzv-endpoint", metavar="HOST:PORT", help="Rendezvous endpoint.")
]
RdzvIdOpt = Annotated[str | None, typer.Option("--rdzv-id", help="Rendezvous (job) id.")]
MaxRestartsOpt = Annotated[
    int | None, typer.Option("--max-restarts", min=0, help="Worker-group restarts before failing.")
]
LogDirOpt = Annotated[
    str | None, typer.Option("--log-dir", metavar="DIR", help="Local directory for the job log.")
]
ExcludeHostOpt = Annotated[
    list[str] | None,
    typer.Option("--exclude-host", metavar="HOST", help="Keep the job off HOST (srun launcher). Repeatable."),
]
ResumeFromOpt = Annotated[
    str | None,
    typer.Option(
        "--resume-from",
        metavar="PATH|auto",
        help="Checkpoint to resume from, passed to the script; 'auto' = newest complete one under the run root.",
    ),
]


def launch_cmd(
    command: CommandArg = None,
    config: ConfigOpt = None,
    run_root: RunRootOpt = None,
    nnodes: NnodesOpt = None,
    nproc_per_node: NprocOpt = None,
    rdzv_backend: RdzvBackendOpt = None,
    rdzv_endpoint: RdzvEndpointOpt = None,
    rdzv_id: RdzvIdOpt = None,
    max_restarts: MaxRestartsOpt = None,
    log_dir: LogDirOpt = None,
    exclude_host: ExcludeHostOpt = None,
    resume_from: ResumeFromOpt = None,
    dry_run: DryRunOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Run the training job under torchrun elastic, supervised: output to the console and to
    a log file, Ctrl-C/SIGTERM forwarded to the job as SIGTERM, the job's exit code returned."""
    from ckptctl.core.config.overrides import ConfigOverrides
    from ckptctl.ops import launch as launch_ops

    words = list(command or [])
    overrides = ConfigOverrides(
        run_root=run_root,
        nnodes=nnodes,
        nproc_per_node=nproc_per_node,
        rdzv_backend=rdzv_backend,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        max_restarts=max_restarts,
        log_dir=log_dir,
        script=words[0] if words else None,
        script_args=tuple(words[1:]) if words else None,
        exclude_hosts=tuple(exclude_host or ()),
    )
    cfg = launch_ops.load_config(config, overrides)
    plan = launch_ops.prepare_launch(cfg, resume_from=launch_ops.resolve_resume_from(cfg, resume_from))
    for w in plan.warnings:
        out.warn(w)

    if dry_run:
        # `ckptctl launch` runs torchrun here; recover would submit what the backend renders instead.
        preview = launch_ops.preview_job(cfg, plan)
        if json_:
            out.emit_json({"dry_run": True, **plan.to_json(), **preview.to_json_section()})
        else:
            out.print_line(plan.display())
            if preview.script is not None:
                out.info(preview.script_note or "`ckptctl recover` submits this script:")
                for line in preview.script.splitlines():
                    out.info("  " + line)
            for k, v in plan.env.items():
                out.info(f"env: {k}={v}")
            out.info(f"log directory: {plan.log_dir}")
            for n in plan.notes:
                out.info(f"note: {n}")
        raise typer.Exit(exit_codes.OK)

    for n in plan.notes:
        out.info(f"note: {n}")
    out.info(f"launching: {plan.display()}")
    # With --json, stdout carries one JSON document, so the job's output goes to stderr.
    console = out.info if json_ else out.print_line

    def started(supervisor: Supervisor) -> None:
        out.info(f"job pid {supervisor.pid}, log {supervisor.log_path}")

    result = launch_ops.run_launch(plan, on_output=console, on_start=started)
    for n in result.notes:
        out.warn(n)
    if json_:
        out.emit_json({"dry_run": False, **plan.to_json(), "result": result.to_json()})
    elif result.interrupted_by is not None:
        out.warn(f"{result.stop_reason}; the job was stopped (exit code {result.exit_code}); log {result.log_path}")
    elif result.returncode == 0:
        out.info(f"job finished OK in {result.duration_s:.0f}s; log {result.log_path}")
    else:
        how = f"was killed by {result.to_json()['signal']}" if result.signal else f"exited with code {result.returncode}"
        out.warn(f"the job {how}; log {result.log_path}")
    raise typer.Exit(result.exit_code)


def register(app: typer.Typer) -> None:
    """Add the command(s) of this module to the app."""
    # Everything from the first positional word on belongs to the script, like torchrun's
    # own `training_script ...`: `ckptctl launch train.py --steps 10` passes --steps to train.py.
    app.command("launch", context_settings={"allow_interspersed_args": False})(launch_cmd)
