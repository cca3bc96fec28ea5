"""A job a backend started, and where it is now, as plain values (pure).

``JobRef`` names a job (its backend, the backend's id for it, the host it was started
from); ``JobStatus`` is a backend's answer to "where is it now?" reduced to the phases
every backend shares (``pending`` / ``running`` / ``ended`` / ``unknown``), plus the
backend's own words (``detail``: the ``now`` section of ``ckptctl status --json``).
Decisions (is the job alive, may a second recovery start) read the phase, never a
backend's name or its state vocabulary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

JobPhase = Literal["pending", "running", "ended", "unknown"]
#: Phases in which the job holds (or waits for) resources and may still write checkpoints.
ALIVE_PHASES: frozenset[str] = frozenset({"pending", "running"})


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRef:
    """One job as a backend knows it."""

    backend: str
    """The registry name of the backend that started it."""
    job_id: str
    """The backend's id: the local launcher's pid, Slurm's job id."""
    host: str | None = None
    """The host ckptctl started it from (a pid means something only there)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobStatus:
    """Where a job is now."""

    job_id: str | None
    phase: JobPhase
    exit_code: int | None = None
    """The job's exit status once ended, when the backend knows it."""
    detail: Mapping[str, Any] = field(default_factory=dict)
    """The backend's own answer (``state`` in its vocabulary, ``error``, ...), as shown."""

    @property
    def alive(self) -> bool:
        """Pending or running: it may still write checkpoints to the run root."""
        return self.phase in ALIVE_PHASES

    @property
    def known(self) -> bool:
        return self.phase != "unknown"

    def to_json(self) -> dict[str, Any]:
        """The backend's words, then ``phase`` (the shared vocabulary)."""
        return {**self.detail, "phase": self.phase}


# -- the line a job prints each time it starts (a scheduler may restart it) -------------------

#: The first words of the line a batch script ckptctl renders prints at every start of the job
#: (``core.launch.slurm_batch``), before the training starts::
#:
#:     ckptctl: job start job_id=4412937 restart=1 time=2026-11-21T12:19:05Z resuming from checkpoint=/runs/a/step_70
#:
#: ``restart`` is the scheduler's restart count (Slurm's ``SLURM_RESTART_COUNT``: 0 at the
#: first start, 1 after the first requeue...); ``from scratch`` instead of the checkpoint when
#: the job starts without one. The watch reads it as a restore marker (``resuming from checkpoint``), the ledger
#: (``ckptctl incidents``) as one restart each, ``status`` as "restarted since it was verified".
JOB_START_TAG = "ckptctl: job start"
FROM_SCRATCH = "from scratch"
_JOB_START_RE = re.compile(
    re.escape(JOB_START_TAG)
    + r" job_id=(?P<job>\S+) restart=(?P<n>\d{1,9}) time=(?P<time>\S+)"
    r"(?: resuming from checkpoint=(?P<ckpt>.+?)| " + FROM_SCRATCH + r")?\s*$"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class JobStart:
    """One start of a job, from its ``JOB_START_TAG`` line."""

    job_id: str
    restart: int
    """0: the first start; N: the Nth restart by the scheduler (requeue)."""
    time: str
    """UTC, ISO 8601, as the job's host printed it."""
    checkpoint: str | None
    """The checkpoint this start resumed from (None: from scratch)."""
    line_no: int = 0
    """1-based line number in the job's output."""


def parse_job_start(text: str, line_no: int = 0) -> JobStart | None:
    """The ``JobStart`` a line announces, or None when it is not a job start line."""
    if JOB_START_TAG not in text:
        return None
    m = _JOB_START_RE.search(text)
    if m is None:
        return None
    ckpt = m.group("ckpt")
    return JobStart(
        job_id=m.group("job"),
        restart=int(m.group("n")),
        time=m.group("time"),
        checkpoint=ckpt,
        line_no=line_no,
    )
