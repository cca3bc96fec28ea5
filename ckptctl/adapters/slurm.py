"""Slurm through its own commands: ``sbatch``, ``squeue``/``scontrol``/``sacct``, ``scancel``,
``scontrol update ... State=DRAIN``, ``sinfo``. Argv lists, never a shell; every failure
is a ``SlurmError`` with one line (the command and the last line it printed).

``job_state`` asks ``squeue`` first (pending and running jobs), then ``scontrol show
job`` (finished jobs stay there for ``MinJobAge``), then ``sacct`` (which needs
accounting storage; "accounting storage is disabled" is a normal answer on small
clusters and is not an error here). A job none of them knows is ``UNKNOWN``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ckptctl import exit_codes
from ckptctl.errors import CkptctlError

#: Job states after which the job runs no more (squeue/scontrol/sacct spelling).
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
    }
)
_TIMEOUT_S = 60.0


class SlurmError(CkptctlError):
    """A Slurm command could not be run or failed."""

    exit_code = exit_codes.TOOL_FAILED


@dataclass(frozen=True, kw_only=True, slots=True)
class JobState:
    job_id: str
    state: str
    """``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED``, ... or ``UNKNOWN``."""
    exit_code: int | None
    """The batch script's exit status once finished (``ExitCode=N:S``: N, or 128+S for a signal)."""
    nodes: str | None
    reason: str | None
    source: str
    """Which command answered: ``squeue``, ``scontrol``, ``sacct`` or ``none``."""

    @property
    def finished(self) -> bool:
        return self.state.split()[0] in FINISHED_STATES or self.state == "UNKNOWN"

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "exit_code": self.exit_code,
            "nodes": self.nodes,
            "reason": self.reason,
            "source": self.source,
        }


def _run(argv: Sequence[str], *, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=_TIMEOUT_S, env=dict(os.environ)
        )
    except FileNotFoundError as e:
        raise SlurmError(f"{argv[0]}: command not found", hint="install Slurm's client commands or use launch.backend: local") from e
    except subprocess.TimeoutExpired as e:
        raise SlurmError(f"{shlex.join(argv)} timed out after {_TIMEOUT_S:.0f} s") from e
    except OSError as e:
        raise SlurmError(f"{shlex.join(argv)}: {e.strerror or e}") from e
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmError(f"{shlex.join(argv)} exited {proc.returncode}: {tail[-1] if tail else 'no output'}")
    return proc


def submit(sbatch_argv: Sequence[str], script_path: str) -> str:
    """``sbatch --parsable ... SCRIPT`` -> the job id (``1234`` or ``1234;cluster``)."""
    out = _run([*sbatch_argv, script_path]).stdout.strip()
    job_id = out.split(";")[0].strip()
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed {out!r}, not a job id")
    return job_id


def _exit_code(text: str | None) -> int | None:
    if not text:
        return None
    m = re.match(r"^(\d+):(\d+)$", text.strip())
    if m is None:
        return None
    code, sig = int(m.group(1)), int(m.group(2))
    return 128 + sig if sig else code


def job_state(job_id: str) -> JobState:
    """Where the job is now (see the module docstring for the order of the questions)."""
    proc = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%N|%r"], check=False)
    line = proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else ""
    if line:
        state, nodes, reason = ([*line.split("|"), "", ""])[:3]
        if state not in FINISHED_STATES:
            return JobState(job_id=job_id, state=state, exit_code=None, nodes=nodes or None, reason=reason or None, source="squeue")
    proc = _run(["scontrol", "-o", "show", "job", job_id], check=False)
    if proc.returncode == 0 and "JobState=" in proc.stdout:
        fields = dict(kv.split("=", 1) for kv in proc.stdout.split() if "=" in kv)
        state = fields.get("JobState", "UNKNOWN")
        return JobState(
            job_id=job_id,
            state=state,
            exit_code=_exit_code(fields.get("ExitCode")) if state in FINISHED_STATES else None,
            nodes=fields.get("NodeList") or None,
            reason=fields.get("Reason") or None,
            source="scontrol",
        )
    proc = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode,NodeList"], check=False)
    if proc.returncode == 0 and proc.stdout.strip():
        state, code, nodes = ([*proc.stdout.strip().splitlines()[0].split("|"), "", ""])[:3]
        state = state.split()[0] if state else "UNKNOWN"
        return JobState(job_id=job_id, state=state, exit_code=_exit_code(code), nodes=nodes or None, reason=None, source="sacct")
    return JobState(job_id=job_id, state="UNKNOWN", exit_code=None, nodes=None, reason=None, source="none")


def cancel(job_id: str, *, signal: str | None = None) -> None:
    """``scancel JOB`` (SIGTERM to every step, then SIGKILL after KillWait), or one signal."""
    _run(["scancel", *([f"--signal={signal}", "--full"] if signal else []), job_id])


def drain_argv(hosts: Sequence[str], reason: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={','.join(hosts)}", "State=DRAIN", f"Reason={reason}"]


#: Node states (sinfo ``%T``) that can take work. A drained node is not one of them even though
#: ``sinfo -t idle`` lists it (Slurm keeps DRAIN as a flag on IDLE): the long state name says
#: ``drained``/``draining``, so the state is read, not filtered by ``-t``.
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
#: The question ``usable_hosts`` asks (also shown in recover's capacity record).
USABLE_HOSTS_ARGV = ("sinfo", "-h", "-N", "-o", "%N|%T")


def usable_hosts() -> list[str]:
    """Nodes that can take work now: ``sinfo -h -N -o '%N|%T'``, state in ``USABLE_STATES``
    (a trailing ``*``/``~``/``#``... flag, e.g. ``idle~`` powered down, makes a node unusable)."""
    out = _run(USABLE_HOSTS_ARGV).stdout
    hosts = []
    for line in out.splitlines():
        name, _, state = line.partition("|")
        if name.strip() and state.strip().lower() in USABLE_STATES:
            hosts.append(name.strip())
    return list(dict.fromkeys(hosts))


def drained_hosts() -> dict[str, str]:
    """Drained or draining nodes and their reasons: ``sinfo -h -N -t drain -o '%N|%E'``."""
    out = _run(["sinfo", "-h", "-N", "-t", "drain,drained,draining", "-o", "%N|%E"]).stdout
    hosts: dict[str, str] = {}
    for line in out.splitlines():
        name, _, reason = line.partition("|")
        if name.strip():
            hosts[name.strip()] = reason.strip()
    return hosts
