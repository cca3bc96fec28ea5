"""Composition root: build the Typer app, run it, map errors to exit codes.

Nothing here (or in any command module at import time) imports torch:
``ckptctl --help`` must stay fast on a login node.
"""

from __future__ import annotations

import os
import sys

import typer

from ckptctl import __version__, exit_codes
from ckptctl.cli import (
    cadence,
    checkpoints,
    classify,
    launch,
    recover,
    report,
    rollback,
    status,
    watch,
)
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


for _module in (checkpoints, classify, watch, rollback, launch, recover, status, report, cadence):
    _module.register(app)


def _debug() -> bool:
    return os.environ.get("CKPTCTL_DEBUG", "") not in ("", "0")


#: The parser's usage-error type (a bad flag, a missing argument, an unknown command), found
#: through Typer's public ``BadParameter`` rather than by importing the Click Typer vendors.
_UsageError: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


def _usage_error(e: Exception) -> None:
    """One ``error:`` line and a hint, exit 2 (instead of the parser's multi-line block)."""
    if type(e).__name__ == "NoArgsIsHelpError":  # `ckptctl` alone: the help is the answer
        sys.stderr.write(str(getattr(e, "format_message", lambda: "")()) + "\n")
        sys.exit(exit_codes.USAGE)
    ctx = getattr(e, "ctx", None)
    command = getattr(ctx, "command_path", None) or "ckptctl"
    message = e.format_message() if hasattr(e, "format_message") else str(e)
    out.error(message.strip().removesuffix("."), f"run '{command} --help'")
    sys.exit(exit_codes.USAGE)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one handler for every domain error."""
    try:
        rc = app(args=argv, prog_name="ckptctl", standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else exit_codes.OK)
    except _UsageError as e:
        _usage_error(e)
    except typer.Abort:
        out.error("interrupted")
        sys.exit(130)
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
