"""The whole incident ledger: every failure a run had, whatever recorded it (pure).

A recovery's report carries its incident (``core.recover.incidents``), but not every
failure leaves a report:

* **a recovery that died** (killed, its host lost, its report unwritable) left only
  what it did on the way: its lock file (``.ckptctl/lock``, or the ``break-lock``
  record of the next process that removed it), its ``drain`` and ``launch`` audit
  records, the job record (``job.json``). ``unrecorded_incidents`` recognises them:
  acts of one recover process (host, pid) that no ``recover`` record of that process
  closes and no report's time span covers are one incident, ``unrecorded`` (or
  ``in-progress`` while its holder still holds the lock);
* **a restart by the scheduler** (Slurm's requeue: the job starts again under the
  same id) is a failure the job survived on its own. The batch script prints a
  ``JOB_START_TAG`` line (``core.launch.job``) at each start; ``restart_incidents``
  turns each restart into one ``requeued`` incident, with the steps the restart
  recomputes (the last step its output logged before the restart minus the step of
  the checkpoint it resumed from).

``last_logged_step`` reads the newest step a log names (a loss line, a save line): the
"crash step" of a failure is what its logs say the run reached, never a window of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from ckptctl.core.launch.job import JobStart
from ckptctl.core.names import parse_checkpoint_name
from ckptctl.core.recover.incidents import Incident, make_incident
from ckptctl.core.watch.logevents import LossPoint, ResumeMarker
from ckptctl.core.watch.losslog import parse_lines

#: Incident outcomes the ledger adds to a recovery's own (``recovered``, ``stopped``, ...).
UNRECORDED = "unrecorded"
"""A recovery that ended without its report (killed, host lost): recognised from its records."""
IN_PROGRESS = "in-progress"
"""A recovery whose process still holds the run root's lock."""
REQUEUED = "requeued"
"""The scheduler restarted the job (a requeue); the job resumed on its own."""

SOURCE_AUDIT = "audit"
SOURCE_JOB_OUTPUT = "job-output"


def _t(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def step_of_path(path: str | None) -> int | None:
    """The step a checkpoint path names (``.../step_70`` -> 70), when its name is a checkpoint's."""
    if not path:
        return None
    cn = parse_checkpoint_name(path.rstrip("/").rsplit("/", 1)[-1])
    return cn.step if cn is not None else None


def last_logged_step(lines: Iterable[str]) -> int | None:
    """The newest step ``lines`` name: a loss line's step or a save line's step (``watch``'s reader)."""
    best: int | None = None
    for event in parse_lines(list(lines)):
        saved = isinstance(event, ResumeMarker) and event.kind == "save"
        step = event.step if isinstance(event, LossPoint) or saved else None
        if step is not None and (best is None or step > best):
            best = step
    return best


# -- recoveries that left no report ------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoverAct:
    """One thing a ``recover`` process left in the run root (read by ``runroot.state.recover_acts``)."""

    time: str
    """UTC ISO: the record's time (a lock: when it was taken)."""
    host: str
    pid: int
    kind: str
    """``lock`` (its lock file, or one a later process broke), ``drain`` or ``launch``."""
    job_id: str | None = None
    resume_from: str | None = None
    holder_alive: bool | None = None
    """For the lock file there now: its holder runs (True), is provably gone (False), unknown
    (None: on another host). None for every other act."""
    current_lock: bool = False
    """The lock file there now (not a broken one)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRecovery:
    """A recovery that did finish: its ``recover`` record (who wrote it) and its report's span."""

    host: str | None
    pid: int | None
    time: str | None
    """The ``recover`` record's time (the recovery's end)."""
    started: str | None = None
    ended: str | None = None
    """Its report's ``started`` and ``ended`` (None when the report is unreadable)."""


def _covered(act: RecoverAct, recorded: Sequence[RecordedRecovery]) -> bool:
    """Did a finished recovery account for ``act``: the same process wrote a ``recover`` record
    after it, or it falls inside a report's span (a supervisor may write as another pid)?"""
    t = _t(act.time)
    for r in recorded:
        end = _t(r.time)
        if r.host == act.host and r.pid == act.pid and t is not None and end is not None and t <= end:
            return True
        lo, hi = _t(r.started), _t(r.ended)
        if t is not None and lo is not None and hi is not None and lo <= t <= hi:
            return True
    return False


def unrecorded_incidents(acts: Sequence[RecoverAct], recorded: Sequence[RecordedRecovery]) -> list[Incident]:
    """One incident per recover process whose acts no finished recovery accounts for (oldest first)."""
    groups: dict[tuple[str, int], list[RecoverAct]] = {}
    for act in sorted(acts, key=lambda a: (_t(a.time) is None, a.time)):
        if not _covered(act, recorded):
            groups.setdefault((act.host, act.pid), []).append(act)
    out = []
    for (host, pid), group in groups.items():
        live = any(a.current_lock and a.holder_alive is not False for a in group)
        launches = [a for a in group if a.kind == "launch"]
        first = min((t for a in group if (t := _t(a.time)) is not None), default=None)
        if first is None:
            continue
        relaunched = _t(launches[0].time) if launches else None
        jobs = ", ".join(f"job {a.job_id}" for a in launches if a.job_id)
        did = f"launched {jobs}" if jobs else "launched nothing"
        if live:
            note = f"recover (pid {pid} on {host}) is still running: it holds the run root's lock; {did} so far"
        else:
            note = (
                f"recover (pid {pid} on {host}) ended without its report (killed? host lost?): "
                f"recognised from its {', '.join(sorted({a.kind for a in group}))} record(s); {did}"
            )
        out.append(
            make_incident(
                outcome=IN_PROGRESS if live else UNRECORDED,
                category=None,
                failure_time=None,
                detected=first,
                drained=None,
                capacity=None,
                relaunched=relaunched,
                first_step=None,
                crash_step=None,
                checkpoint_step=step_of_path(launches[0].resume_from) if launches else None,
                verdicts=(),
                drained_hosts=(),
                job_id=launches[-1].job_id if launches else None,
            )
        )
        out[-1] = _with(out[-1], source=SOURCE_AUDIT, note=note)
    return out


def _with(inc: Incident, *, source: str, note: str) -> Incident:
    return replace(inc, source=source, note=note)


# -- restarts by the scheduler -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ObservedStart:
    """A job start read from the job's output, with what the output logged before it."""

    start: JobStart
    last_step_before: int | None
    """The newest step the output logged before this start (the run the restart ended)."""


def restart_incidents(starts: Sequence[ObservedStart]) -> list[Incident]:
    """One ``requeued`` incident per restart (``restart`` >= 1) of a job, oldest first."""
    out = []
    for seen in starts:
        s = seen.start
        if s.restart < 1:
            continue
        when = _t(s.time)
        if when is None:
            continue
        resumed = step_of_path(s.checkpoint)
        inc = make_incident(
            outcome=REQUEUED,
            category=None,
            failure_time=None,
            detected=when,
            drained=None,
            capacity=None,
            relaunched=when,
            first_step=None,
            crash_step=seen.last_step_before,
            checkpoint_step=resumed,
            verdicts=(),
            drained_hosts=(),
            job_id=s.job_id,
        )
        frm = f"from {s.checkpoint}" if s.checkpoint else "from scratch"
        out.append(_with(inc, source=SOURCE_JOB_OUTPUT,
                         note=f"the scheduler restarted job {s.job_id} (restart {s.restart}); it resumed {frm}"))
    return out


def ledger(
    reported: Sequence[Incident], unrecorded: Sequence[Incident], restarts: Sequence[Incident]
) -> list[Incident]:
    """Every incident, oldest first (by failure, else detection time); ties keep the order given."""
    every = [*reported, *unrecorded, *restarts]
    return sorted(every, key=lambda i: (i.failed_at is None, i.failed_at or datetime.min))
