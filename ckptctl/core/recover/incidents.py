"""The incident ledger: what each failure cost, and what a run's failures add up to (pure).

Every recovery report carries one ``incident`` record (``build_incident``), schema
``ckptctl.incident/1`` (docs/launch.md, "Incident ledger")::

    {"schema": "ckptctl.incident/1", "outcome": "recovered", "category": "infra",
     "failure_time": "...Z" | null,   # estimate: the newest --logs file's last write
     "detected": "...Z",              # recover started
     "drained": "...Z" | null, "capacity": "...Z" | null, "relaunched": "...Z" | null,
     "first_step": "...Z" | null,     # the resumed job's first logged step
     "phases_s": {"detection": s, "drain": s, "capacity": s, "relaunch": s, "first_step": s},
     "time_lost_s": s | null,         # failure (or detection) -> first step
     "crash_step": N | null, "checkpoint_step": N | null, "steps_recomputed": N | null,
     "verdicts": ["spike", "continuous"], "drained_hosts": ["gpu-node-2"], "job_id": "1234" | null,
     "source": "report", "note": null}

``crash_step`` is the last step the failed run logged or reached: the newest step in
the failure's logs (``--logs``, ``--baseline``) and among the checkpoint directories
it left (a save in progress included); never the loss watch's baseline window.
``source`` says where a record comes from: ``report`` (a recovery's report), ``audit``
(a recovery that ended without one: ``core.recover.ledger.unrecorded_incidents``) or
``job-output`` (a restart of the job by its scheduler: ``ledger.restart_incidents``).

``summarize_incidents`` turns a run's records (oldest first) into goodput/badput
per incident and in total, the mean time between failures (``observed_mtbf``, the
one definition ``ckptctl cadence`` uses too) and to recover, and a per-host
history: a host drained for an infra fault twice or more is an RMA candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

SCHEMA = "ckptctl.incident/1"
#: Infra drains of one host that make it an RMA candidate.
RMA_DRAINS = 2
_PHASES = (("detection", "detected"), ("drain", "drained"), ("capacity", "capacity"), ("relaunch", "relaunched"), ("first_step", "first_step"))


def _t(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    # a record edited by hand may hold a naive time: read as UTC, so that every difference is defined
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, kw_only=True, slots=True)
class Incident:
    """One ledger record (schema ``ckptctl.incident/1``, the module docstring), typed."""

    outcome: str | None
    category: str | None
    failure_time: str | None
    detected: str | None
    drained: str | None = None
    capacity: str | None = None
    relaunched: str | None = None
    first_step: str | None = None
    phases_s: Mapping[str, float | None] = field(default_factory=dict)
    time_lost_s: float | None = None
    crash_step: int | None = None
    checkpoint_step: int | None = None
    steps_recomputed: int | None = None
    verdicts: tuple[str | None, ...] = ()
    drained_hosts: tuple[str, ...] = ()
    job_id: str | None = None
    schema: str = SCHEMA
    source: str = "report"
    """``report``, ``audit`` (a recovery that left no report) or ``job-output`` (a scheduler restart)."""
    note: str | None = None
    """One sentence on how the record was recognised (``audit``, ``job-output``)."""

    @property
    def failed_at(self) -> datetime | None:
        """When the failure happened: ``failure_time``, else when it was detected."""
        return _t(self.failure_time) or _t(self.detected)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "outcome": self.outcome,
            "category": self.category,
            "failure_time": self.failure_time,
            "detected": self.detected,
            "drained": self.drained,
            "capacity": self.capacity,
            "relaunched": self.relaunched,
            "first_step": self.first_step,
            "phases_s": dict(self.phases_s),
            "time_lost_s": self.time_lost_s,
            "crash_step": self.crash_step,
            "checkpoint_step": self.checkpoint_step,
            "steps_recomputed": self.steps_recomputed,
            "verdicts": list(self.verdicts),
            "drained_hosts": list(self.drained_hosts),
            "job_id": self.job_id,
            "source": self.source,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Incident:
        """A stored record, read leniently (a field of the wrong type is unknown, never an error)."""
        phases = doc.get("phases_s")
        return cls(
            schema=_s(doc.get("schema")) or SCHEMA,
            outcome=_s(doc.get("outcome")),
            category=_s(doc.get("category")),
            failure_time=_s(doc.get("failure_time")),
            detected=_s(doc.get("detected")),
            drained=_s(doc.get("drained")),
            capacity=_s(doc.get("capacity")),
            relaunched=_s(doc.get("relaunched")),
            first_step=_s(doc.get("first_step")),
            phases_s={str(k): _num(v) for k, v in phases.items()} if isinstance(phases, Mapping) else {},
            time_lost_s=_num(doc.get("time_lost_s")),
            crash_step=_int(doc.get("crash_step")),
            checkpoint_step=_int(doc.get("checkpoint_step")),
            steps_recomputed=_int(doc.get("steps_recomputed")),
            verdicts=tuple(v if isinstance(v, str) else None for v in _list(doc.get("verdicts"))),
            drained_hosts=tuple(h for h in _list(doc.get("drained_hosts")) if isinstance(h, str)),
            job_id=None if doc.get("job_id") is None else str(doc.get("job_id")),
            source=_s(doc.get("source")) or "report",
            note=_s(doc.get("note")),
        )


def _s(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _num(value: object) -> float | None:
    """A finite, non-negative number (reports can be edited: 1e400, -5, 10**400 are unknown)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _int(value: object) -> int | None:
    """A step count: an int in [0, 2**63)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def make_incident(
    *,
    outcome: str,
    category: str | None,
    failure_time: datetime | None,
    detected: datetime,
    drained: datetime | None,
    capacity: datetime | None,
    relaunched: datetime | None,
    first_step: datetime | None,
    crash_step: int | None,
    checkpoint_step: int | None,
    verdicts: Sequence[str | None],
    drained_hosts: Sequence[str],
    job_id: str | None,
) -> Incident:
    """One ledger record; phase durations chain from the failure (or the detection)."""
    times = {"failure_time": failure_time if failure_time and failure_time <= detected else None, "detected": detected,
             "drained": drained, "capacity": capacity, "relaunched": relaunched, "first_step": first_step}
    phases: dict[str, float | None] = {}
    prev = times["failure_time"]
    for phase, key in _PHASES:
        t = times[key]
        phases[phase] = None if t is None or prev is None else round((t - prev).total_seconds(), 3)
        if t is not None:
            prev = t
    start = times["failure_time"] or detected
    lost = None if first_step is None else round((first_step - start).total_seconds(), 3)
    recomputed = None
    if crash_step is not None and checkpoint_step is not None:
        recomputed = max(0, crash_step - checkpoint_step)
    return Incident(
        outcome=outcome,
        category=category,
        failure_time=_iso(times["failure_time"]),
        detected=_iso(detected),
        drained=_iso(drained),
        capacity=_iso(capacity),
        relaunched=_iso(relaunched),
        first_step=_iso(first_step),
        phases_s=phases,
        time_lost_s=lost,
        crash_step=crash_step,
        checkpoint_step=checkpoint_step,
        steps_recomputed=recomputed,
        verdicts=tuple(verdicts),
        drained_hosts=tuple(drained_hosts),
        job_id=job_id,
    )


def build_incident(**kw: Any) -> dict[str, Any]:
    """``make_incident(...)`` as the JSON record a report stores."""
    return make_incident(**kw).to_json()


def observed_mtbf(
    failure_times_s: Sequence[float], *, first_s: float | None = None, last_s: float | None = None
) -> tuple[float | None, int]:
    """The mean time between failures, as ``ckptctl cadence`` and ``ckptctl incidents`` both say it.

    MTBF = the run's observed span / the failures in it. The span runs from the run's
    first evidence (``first_s``: the oldest checkpoint's time, or when the run started,
    else the first failure) to its last (``last_s``: the newest checkpoint's time, else
    the last failure; whichever of the two is later). A failure at the very start of the
    span opens it and is not counted (nothing before it was observed): with failure times
    only, this is the mean gap between failures. Returns ``(mtbf_s or None, failures
    counted)``; None when no failure falls in a span longer than zero.
    """
    times = sorted(t for t in failure_times_s if math.isfinite(t))
    if not times:
        return None, 0
    start = min(times[0], first_s) if first_s is not None else times[0]
    end = max(times[-1], last_s) if last_s is not None else times[-1]
    counted = sum(1 for t in times if t > start)
    if counted == 0 or end <= start:
        return None, counted
    return round((end - start) / counted, 3), counted


def summarize_incidents(
    records: Sequence[Mapping[str, Any]],
    *,
    run_start: datetime | None = None,
    checkpoint_span_s: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """``summarize`` of stored records (JSON), read with ``Incident.from_json``."""
    return summarize(
        [Incident.from_json(r) for r in records if isinstance(r, Mapping)],
        run_start=run_start,
        checkpoint_span_s=checkpoint_span_s,
    )


def summarize(
    incidents: Sequence[Incident],
    *,
    run_start: datetime | None = None,
    checkpoint_span_s: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Goodput/badput per incident and in total, MTBF, MTTR, per-host history (records oldest first).

    An incident's goodput is the time from the previous recovery's first step (or
    ``run_start``, or unknown for the first) to its failure; its badput the time lost.
    MTBF: ``observed_mtbf`` of the failure times, over the span from ``run_start`` or
    the oldest checkpoint (``checkpoint_span_s``: oldest and newest checkpoint times,
    Unix seconds) to the newest checkpoint or the last failure.
    """
    rows: list[dict[str, Any]] = []
    failures: list[datetime] = []
    prev_up: datetime | None = run_start
    good_total = bad_total = 0.0
    hosts: dict[str, dict[str, Any]] = {}
    for inc in incidents:
        failed = inc.failed_at
        up = _t(inc.first_step)
        lost = inc.time_lost_s
        good = None if prev_up is None or failed is None else max(0.0, (failed - prev_up).total_seconds())
        if good is not None:
            good_total += good
        if lost is not None:
            bad_total += float(lost)
        if failed is not None:
            failures.append(failed)
        rows.append(
            {
                "failure_time": _iso(failed),
                "category": inc.category,
                "outcome": inc.outcome,
                "goodput_s": None if good is None else round(good, 3),
                "badput_s": lost,
                "steps_recomputed": inc.steps_recomputed,
                "verdicts": list(inc.verdicts),
                "drained_hosts": list(inc.drained_hosts),
                "crash_step": inc.crash_step,
                "checkpoint_step": inc.checkpoint_step,
                "job_id": inc.job_id,
                "source": inc.source,
                "note": inc.note,
                "record": inc.to_json(),
            }
        )
        for h in inc.drained_hosts:
            entry = hosts.setdefault(h, {"host": h, "drains": 0, "infra_drains": 0, "times": []})
            entry["drains"] += 1
            entry["infra_drains"] += inc.category == "infra"
            entry["times"].append(_iso(failed))
        prev_up = up or prev_up
    firsts = [t for t in (run_start.timestamp() if run_start else None,
                          checkpoint_span_s[0] if checkpoint_span_s else None) if t is not None]
    mtbf, counted = observed_mtbf(
        [f.timestamp() for f in failures],
        first_s=min(firsts) if firsts else None,
        last_s=checkpoint_span_s[1] if checkpoint_span_s else None,
    )
    lost_values = [float(i.time_lost_s) for i in incidents if i.time_lost_s is not None]
    total = good_total + bad_total
    for entry in hosts.values():
        entry["rma_candidate"] = entry["infra_drains"] >= RMA_DRAINS
    return {
        "num_incidents": len(rows),
        "incidents": rows,
        "goodput_s": round(good_total, 3),
        "badput_s": round(bad_total, 3),
        "goodput_fraction": None if total <= 0 else round(good_total / total, 4),
        "steps_recomputed": sum(r["steps_recomputed"] or 0 for r in rows),
        "mtbf_s": mtbf,
        "mtbf_failures": counted,
        "mttr_s": None if not lost_values else round(sum(lost_values) / len(lost_values), 3),
        "hosts": sorted(hosts.values(), key=lambda e: (-e["infra_drains"], e["host"])),
        "rma_candidates": sorted(h for h, e in hosts.items() if e["rma_candidate"]),
    }
