"""A job a backend started, and where it is now, as plain values (pure).

``JobRef`` names a job (its backend, the backend's id for it, the host it was started
from); ``JobStatus`` is a backend's answer to "where is it now?" reduced to the phases
every backend shares (``pending`` / ``running`` / ``ended`` / ``unknown``), plus the
backend's own words (``detail``: the ``now`` section of ``ckptctl status --json``).
Decisions (is the job alive, may a second recovery start) read the phase, never a
backend's name or its state vocabulary.
"""

from __future__ import annotations

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
