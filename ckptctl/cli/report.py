"""`ckptctl report ROOT -o report.html`: the run's incidents, resumes, checkpoints and hosts in one
self-contained HTML page (or `--json`, the same data). Read-only: writes only the -o file."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from ckptctl.cli import output as out
from ckptctl.cli.options import JsonOpt, RootArg

OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE",
        help="Write the HTML report here (a local file; - for stdout). Never inside the run root unless you say so.",
    ),
]


def report_cmd(root: RootArg, output: OutputOpt = None, json_: JsonOpt = False) -> None:
    """One self-contained HTML page of the run: incidents as a timeline, the loss around each resume
    with its threshold and verdict, the checkpoints (complete, quarantined, skipped and why), drained
    hosts and RMA candidates, goodput. Needs the 'report' extra (Jinja2, matplotlib) for HTML."""
    from ckptctl.errors import StorageError, UsageError
    from ckptctl.ops import report as ops

    if output is None and not json_:
        raise UsageError("give -o FILE for the HTML report, or --json for its data")
    if output == "-" and json_:
        raise UsageError("-o - and --json would both write to stdout; give -o a file")
    doc = ops.build_report(root)
    if output is not None:
        html = ops.render_html(doc)
        if output == "-":
            sys.stdout.write(html)
            sys.stdout.flush()
        else:
            try:
                with open(output, "w", encoding="utf-8") as f:
                    f.write(html)
            except OSError as e:
                raise StorageError(f"cannot write {output}: {e.strerror or e}") from e
            if not json_:
                out.info(f"wrote {os.path.abspath(output)} ({len(html.encode()) // 1024} KiB)")
    if json_:
        out.emit_json(doc)


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
