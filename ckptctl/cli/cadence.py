"""``ckptctl cadence ROOT``: is the checkpoint interval right for the failure rate? (RB-7 verification)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ckptctl import exit_codes
from ckptctl.cli import output as out
from ckptctl.cli.options import JsonOpt

if TYPE_CHECKING:
    from ckptctl.ops.cadence import CadenceResult

RootArg = Annotated[
    str,
    typer.Argument(metavar="ROOT", help="Run root (a folder or fsspec URL).", show_default=False),
]
MtbfOpt = Annotated[
    str | None,
    typer.Option(
        "--mtbf",
        metavar="DURATION",
        help="Mean time between failures (90m, 3h, 2d). Default: observed from the audit log's recoveries.",
    ),
]


def cadence(root: RootArg, mtbf: MtbfOpt = None, json_output: JsonOpt = False) -> None:
    """Measure save cost and interval; compare with the Young/Daly optimum sqrt(2 x save cost x MTBF).

    Exit 0, or 3 when checkpoints come less often than failures (interval above MTBF).
    """
    from ckptctl.ops import cadence as cadence_ops

    result = cadence_ops.cadence(root, mtbf=mtbf)
    if json_output:
        out.emit_json(result.to_json())
    else:
        _render(result)
    raise typer.Exit(
        exit_codes.PROBLEM if result.report.status == "interval-above-mtbf" else exit_codes.OK
    )


def _render(result: CadenceResult) -> None:
    out.print_line(f"cadence: {result.report.status}  [{result.root}]")
    for line in result.report.explanation:
        out.print_line(f"  {line}")


def register(app: typer.Typer) -> None:
    """Add the command(s) of this module to the app."""
    app.command("cadence")(cadence)
