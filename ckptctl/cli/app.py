"""Composition root: build the Typer app, run it, map errors to exit codes.

Nothing here (or in any command module at import time) imports torch:
``ckptctl --help`` must stay fast on a login node. A run builds only the command it
runs (``COMMANDS`` says which module holds it): importing every command module and
turning every command's signature into options costs ~60-100 ms of each start, which
``verify`` of a small checkpoint would otherwise pay several times over. ``--help``, no
command, or a word that is no command get the whole app, hence the same listing and the
same errors as before. ``app`` (the whole app) is built on first use.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

import typer

from ckptctl import __version__, exit_codes
from ckptctl.cli import output as out
from ckptctl.errors import CkptctlError

#: Every command, in the order ``ckptctl --help`` lists them, and the ``ckptctl.cli`` module
#: whose ``register(app)`` adds it (tests/test_cli_startup.py checks the table against them).
COMMANDS: dict[str, str] = {
    "list": "checkpoints",
    "locate": "checkpoints",
    "verify": "checkpoints",
    "classify": "classify",
    "watch": "watch",
    "rollback": "rollback",
    "audit": "rollback",
    "launch": "launch",
    "recover": "recover",
    "runbook": "recover",
    "status": "status",
    "incidents": "status",
    "report": "report",
    "cadence": "cadence",
}


def _version_callback(value: bool) -> None:
    if value:
        out.print_line(f"ckptctl {__version__}")
        raise typer.Exit(exit_codes.OK)


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Show the version."
    ),
) -> None:
    """ckptctl: the RB-7 checkpoint recovery runbook as commands."""


def build_app(command: str | None = None) -> typer.Typer:
    """The app with every command, or with only the commands of ``command``'s module."""
    built = typer.Typer(
        name="ckptctl",
        help="Recover distributed PyTorch training after a crash: classify the failure, "
        "find and prove the last complete checkpoint, roll back, relaunch torchrun, watch the loss.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    built.callback()(_root)
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"ckptctl.cli.{name}").register(built)
    return built


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs (its first word that is not an option), if it names one."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


_APP: list[typer.Typer] = []


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # the whole app, built once (tests drive it with typer's CliRunner)
        if not _APP:
            _APP.append(build_app())
        return _APP[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        args = sys.argv[1:] if argv is None else argv
        rc = build_app(command_of(args))(args=args, prog_name="ckptctl", standalone_mode=False)
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
