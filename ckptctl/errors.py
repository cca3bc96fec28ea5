"""Domain errors. Each carries a one-line message, an exit code and a next-step hint.

The CLI's single handler (``ckptctl.cli.app.main``) maps these to one line on
stderr and the exit code; anything else is a bug and surfaces (with the
traceback when ``CKPTCTL_DEBUG=1``).
"""

from __future__ import annotations

from ckptctl import exit_codes


class CkptctlError(Exception):
    """Base class: a failure the user can cause or fix."""

    exit_code: int = exit_codes.TOOL_FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(CkptctlError):
    """Bad flags or arguments that the parser could not catch."""

    exit_code = exit_codes.USAGE


class StorageError(CkptctlError):
    """A path or URL could not be read: missing, not a directory, denied, unreachable."""

    exit_code = exit_codes.TOOL_FAILED


class NotFoundError(StorageError):
    """The given run root or checkpoint does not exist."""


class StorageUnreachableError(StorageError):
    """The storage endpoint did not answer (connection refused, DNS, timeout)."""


class InputError(CkptctlError):
    """An input file (log, config, signatures) is unusable."""

    exit_code = exit_codes.TOOL_FAILED


class ConfigError(CkptctlError):
    """A config or signature file is invalid; the message names the field."""

    exit_code = exit_codes.USAGE


class ProblemFound(CkptctlError):
    """The operation ran and its answer is negative (no complete checkpoint, refused rollback)."""

    exit_code = exit_codes.PROBLEM


class LockHeldError(CkptctlError):
    """Another ckptctl process holds the run root's lock."""

    exit_code = exit_codes.LOCKED
