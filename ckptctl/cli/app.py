"""Composition root: build the Typer app, run it, map errors to exit codes.

Nothing here (or in any command module at import time) imports torch:
``ckptctl --help`` must stay fast on a login node.
"""

from __future__ import annotations

import os
import sys

import typer

from ckptctl import __version__, exit_codes
from ckptctl.cli import cadence as cadence_cli
from ckptctl.cli import checkpoints, classify, launch, recover, rollback, watch
from ckptctl.cli import output as out
from ckptctl.errors import CkptctlError

app = typer.Typer(
    name="ckptctl",
    help="Recover distributed PyTorch training after a crash: classify the failure, "
    "find and prove the last complete checkpoint, roll back, relaunch torchrun, watch the loss.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        out.print_line(f"ckptctl {__version__}")
        raise typer.Exit(exit_codes.OK)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Show the version."
    ),
) -> None:
    """ckptctl: the RB-7 checkpoint recovery runbook as commands."""


for _module in (checkpoints, classify, watch, rollback, launch, recover):
    _module.register(app)
cadence_cli.register(app)


def _debug() -> bool:
    return os.environ.get("CKPTCTL_DEBUG", "") not in ("", "0")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one handler for every domain error."""
    try:
        app(args=argv, prog_name="ckptctl")
    except CkptctlError as e:
        if _debug():
            raise
        out.error(e.message, e.hint)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        out.error("interrupted")
        sys.exit(130)
    except BrokenPipeError:
        # `ckptctl list ROOT | head`: the reader left; not our failure.
        sys.stderr.close()
        sys.exit(exit_codes.OK)
