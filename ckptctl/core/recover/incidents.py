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
     "verdicts": ["spike", "continuous"], "drained_hosts": ["gpu-node-2"], "job_id": "1234" | null}

``summarize_incidents`` turns a run's records (oldest first) into goodput/badput
per incident and in total, the mean time between failures and to recover, and a
per-host history: a host drained for an infra fault twice or more is an RMA
candidate. ``ckptctl cadence`` may read ``mtbf_s`` from here.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

SCHEMA = "ckptctl.incident/1"
#: Infra drains of one host that make it an RMA candidate.
RMA_DRAINS = 2
_PHASES = (("detection", "detected"), ("drain", "drained"), ("capacity", "capacity"), ("relaunch", "relaunched"), ("first_step", "first_step"))


def _t(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


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
        )


def _s(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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


def summarize_incidents(records: Sequence[Mapping[str, Any]], *, run_start: datetime | None = None) -> dict[str, Any]:
    """``summarize`` of stored records (JSON), read with ``Incident.from_json``."""
    return summarize([Incident.from_json(r) for r in records], run_start=run_start)


def summarize(incidents: Sequence[Incident], *, run_start: datetime | None = None) -> dict[str, Any]:
    """Goodput/badput per incident and in total, MTBF, MTTR, per-host history (records oldest first).

    An incident's goodput is the time from the previous recovery's first step (or
    ``run_start``, or unknown for the first) to its failure; its badput the time lost.
    """
    rows: list[dict[str, Any]] = []
    failures: list[datetime] = []
    prev_up: datetime | None = run_start
    good_total = bad_total = 0.0
    hosts: dict[str, dict[str, Any]] = {}
    for inc in incidents:
        failed = _t(inc.failure_time) or _t(inc.detected)
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
            }
        )
        for h in inc.drained_hosts:
            entry = hosts.setdefault(h, {"host": h, "drains": 0, "infra_drains": 0, "times": []})
            entry["drains"] += 1
            entry["infra_drains"] += inc.category == "infra"
            entry["times"].append(_iso(failed))
        prev_up = up or prev_up
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(failures)]
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
        "mtbf_s": None if not gaps else round(sum(gaps) / len(gaps), 3),
        "mttr_s": None if not lost_values else round(sum(lost_values) / len(lost_values), 3),
        "hosts": sorted(hosts.values(), key=lambda e: (-e["infra_drains"], e["host"])),
        "rma_candidates": sorted(h for h, e in hosts.items() if e["rma_candidate"]),
    }
