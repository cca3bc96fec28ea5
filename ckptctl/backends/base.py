"""The launch-backend protocol (``JobBackend``) and the values its methods return.

A backend is one way to run the training job that ``recover`` relaunches: ``local``
(torchrun on this host) or ``slurm`` (a batch script through ``sbatch``). Everything
``recover``, ``launch --dry-run`` and ``status`` need from it is a method here:

=====================  ===================================================================
``preview``            what a dry run shows: the command, or the rendered batch script
``submit``             start the job detached from ckptctl (its output to a file)
``follow``             read a submitted job's output as it comes, feed the watch, stop the
                       job on a bad verdict or a ``StopRequest`` (an interrupt, a hang);
                       return when the watch decided or it ended
``run``                one attempt of ``recover``: submit + follow (``local`` without
                       ``--detach``: torchrun supervised through a pipe)
``supervises_to_end``  whether ``run`` follows the job to its end (local foreground) or
                       returns once the watch has decided (``--detach``, Slurm)
``state``              where a job is now: ``JobStatus`` (pending / running / ended /
                       unknown, the exit code, the backend's own words); never raises
``cancel``             ask a job to stop (SIGTERM: the trainer's emergency checkpoint), or
                       kill it (``force``); returns once asked, poll ``state`` for the end
``stop_command``       the command a person runs to stop a job (named in refusals)
``hosts_query``        the command that lists usable hosts, when the backend has one
``usable_hosts``       the hosts that can take work now (capacity check)
=====================  ===================================================================

Values: ``JobRef``/``JobStatus`` (pure, ``core.launch.job``), ``Submission`` (a job just
started), ``JobRun`` (how an attempt went), ``JobPreview`` (a dry run's view).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.job import JobRef, JobStatus
from ckptctl.core.launch.plan import LaunchPlan

LineFn = Callable[[str], bool]
"""Called with each job output line; True asks the backend to stop the job (a bad resume)."""
OutputFn = Callable[[str], None]
"""Called with each job output line, for the console."""
SubmitFn = Callable[[str, "str | None"], None]
"""Called once the job exists: ``(job_id, script_path)`` (audit it, record the active job)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StopRequest:
    """Why the caller wants a followed job stopped (``StopCheck``): the operator interrupted
    ckptctl (``interrupted_by``), or the job hangs (``cause='hang'``). ``force``: no grace."""

    reason: str
    interrupted_by: int | None = None
    cause: str | None = None
    force: bool = False


StopCheck = Callable[[bool], "StopRequest | None"]
"""Asked every poll while a job is followed, with whether it runs (False while Slurm keeps it
PENDING); a ``StopRequest`` makes the backend stop the job (and a later one with ``force``
kill it at once). The backend still waits for the job's end and reports it in ``JobRun``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobPreview:
    """What a backend would start, for ``recover --dry-run`` and ``launch --dry-run``."""

    summary: str
    """``recover --dry-run``'s launch line (``would run: ...`` / ``would submit with ...``)."""
    section: str | None = None
    """The key of the rendered job in dry-run JSON documents (``slurm``), if it renders one."""
    doc: Mapping[str, Any] | None = None
    """That section's value."""
    script: str | None = None
    """The script the backend submits (shown by ``launch --dry-run`` and ``recover --dry-run``)."""
    submit_argv: tuple[str, ...] = ()
    """The command that submits ``script`` (without the script's path)."""
    script_note: str | None = None
    """``launch --dry-run``'s line before the script."""

    def to_json_section(self) -> dict[str, Any]:
        """``{section: doc}`` to merge into a dry-run document, or ``{}``."""
        return {self.section: dict(self.doc or {})} if self.section else {}


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRun:
    """How one attempt's job went, whatever ran it."""

    backend: str
    job_id: str | None
    """The backend's id for the job: Slurm's job id, or the local torchrun's pid."""
    argv: tuple[str, ...]
    log_path: str | None
    exit_code: int | None
    """ckptctl's exit code for the job; ``None`` while it still runs."""
    still_running: bool
    stopped_by_watch: bool
    interrupted_by: int | None
    stop_reason: str | None
    duration_s: float
    script_path: str | None = None
    state: str | None = None
    """The backend's last word on the job (``RUNNING``, ``COMPLETED``, ``exited 1``...)."""
    cause: str | None = None
    """Why ckptctl stopped it when a ``StopRequest`` named one (``hang``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "job_id": self.job_id,
            "script": self.script_path,
            "state": self.state,
            "still_running": self.still_running,
        }


@dataclass(kw_only=True, slots=True)
class Submission:
    """A job a backend has just started (``submit``), to ``follow``."""

    ref: JobRef
    log_path: str
    """The file the job's output goes to (Slurm: ``--output`` with the job id filled in)."""
    started_monotonic: float
    script_path: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    """The local launcher, when this process started it (only its parent can reap it)."""


class JobBackend(Protocol):
    """One way to run the training job; see the module docstring for each method."""

    name: str
    """The ``launch.backend`` value that selects it (its registry key)."""

    def preview(self, config: CkptctlConfig, plan: LaunchPlan) -> JobPreview: ...

    def submit(
        self, config: CkptctlConfig, plan: LaunchPlan, *, extra_env: Mapping[str, str] | None = None
    ) -> Submission: ...

    def follow(
        self,
        config: CkptctlConfig,
        plan: LaunchPlan,
        sub: Submission,
        *,
        decided: Callable[[], bool],
        on_output: OutputFn | None = None,
        on_line: LineFn | None = None,
        stop_check: StopCheck | None = None,
    ) -> JobRun: ...

    def run(
        self,
        config: CkptctlConfig,
        plan: LaunchPlan,
        *,
        detach: bool,
        decided: Callable[[], bool],
        on_output: OutputFn | None = None,
        on_line: LineFn | None = None,
        on_submit: SubmitFn | None = None,
        extra_env: Mapping[str, str] | None = None,
        stop_check: StopCheck | None = None,
    ) -> JobRun: ...

    def supervises_to_end(self, *, detach: bool) -> bool: ...

    def state(self, job: JobRef) -> JobStatus: ...

    def cancel(self, job: JobRef, *, force: bool = False) -> None: ...

    def stop_command(self, job: JobRef) -> tuple[str, ...]: ...

    def hosts_query(self) -> tuple[str, ...] | None: ...

    def usable_hosts(self) -> list[str]: ...


# -- following a job's output file (shared by the backends that write one) ------------------------


def feed_lines(lines: list[str], on_output: OutputFn | None, on_line: LineFn | None) -> bool:
    """Show each line and give it to the watch; True once the watch asked for a stop.

    A console that has gone away (``OSError``) drops the line; the job's log has it.
    """
    stop = False
    for line in lines:
        if on_output is not None:
            with contextlib.suppress(OSError):
                on_output(line)
        if on_line is not None and not stop and on_line(line):
            stop = True
    return stop
