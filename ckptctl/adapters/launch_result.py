"""How a supervised job ended (``LaunchResult``), the launch error, and the job's log file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ckptctl import exit_codes
from ckptctl.core.launch.plan import exit_code_for, signal_name
from ckptctl.errors import CkptctlError

__all__ = ["LaunchError", "LaunchResult", "create_log_file"]


class LaunchError(CkptctlError):
    """The job could not be started (launcher not found, log directory not writable)."""

    exit_code = exit_codes.TOOL_FAILED


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchResult:
    """How a supervised job ended."""

    argv: tuple[str, ...]
    """The command that ran."""
    pid: int
    """The child's pid (torchrun, or the launcher wrapping it)."""
    returncode: int
    """As ``Popen`` reports it: the exit code, or ``-N`` when killed by signal N."""
    signal: int | None
    """The signal that killed the child, if one did."""
    log_path: str | None
    """The log file with the job's whole output (``None`` when logging was off)."""
    started: datetime
    """UTC."""
    ended: datetime
    """UTC."""
    stopped_by_callback: bool
    """``on_line`` asked for the stop."""
    interrupted_by: int | None = None
    """A signal ckptctl received (and forwarded as SIGTERM), if any."""
    stop_reason: str | None = None
    """Why the job was stopped, when it did not end by itself."""
    killed: bool = False
    """The grace period ran out and the job was SIGKILLed."""
    orphans_killed: tuple[int, ...] = ()
    """Pids of descendants still alive after the child exited, which the supervisor ended."""
    notes: tuple[str, ...] = ()
    """Trouble that did not stop the job (console gone, log write failed)."""

    @property
    def exit_code(self) -> int:
        """ckptctl's exit code for this job (see ``core.launch.plan.exit_code_for``)."""
        return exit_code_for(self.returncode, self.interrupted_by)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.stop_reason is None

    @property
    def duration_s(self) -> float:
        return (self.ended - self.started).total_seconds()

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": list(self.argv),
            "pid": self.pid,
            "returncode": self.returncode,
            "signal": signal_name(self.signal) if self.signal is not None else None,
            "exit_code": self.exit_code,
            "log_path": self.log_path,
            "started": _iso(self.started),
            "ended": _iso(self.ended),
            "duration_s": round(self.duration_s, 3),
            "stopped_by_callback": self.stopped_by_callback,
            "interrupted_by": signal_name(self.interrupted_by) if self.interrupted_by is not None else None,
            "stop_reason": self.stop_reason,
            "killed": self.killed,
            "orphans_killed": list(self.orphans_killed),
            "notes": list(self.notes),
        }


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


# -- log file ---------------------------------------------------------------------------------------


def create_log_file(log_dir: str, now: datetime) -> str:
    """Create ``<log_dir>/launch-<UTC stamp>.log`` (``-2``, ``-3`` ... when taken); return its path."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError as e:
        raise LaunchError(
            f"cannot create the log directory {log_dir}: {e.strerror or e}",
            hint="set launch.log_dir (or --log-dir) to a writable local directory",
        ) from e
    for n in range(1, 1000):
        path = os.path.join(log_dir, f"launch-{stamp}{'' if n == 1 else f'-{n}'}.log")
        try:
            with open(path, "x", encoding="utf-8"):
                return path
        except FileExistsError:
            continue
        except OSError as e:
            raise LaunchError(
                f"cannot create the log file {path}: {e.strerror or e}",
                hint="set launch.log_dir (or --log-dir) to a writable local directory",
            ) from e
    raise LaunchError(f"too many launch logs for {stamp} in {log_dir}")
