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


def build_incident(
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
) -> dict[str, Any]:
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
    return {
        "schema": SCHEMA,
        "outcome": outcome,
        "category": category,
        **{k: _iso(v) for k, v in times.items()},
        "phases_s": phases,
        "time_lost_s": lost,
        "crash_step": crash_step,
        "checkpoint_step": checkpoint_step,
        "steps_recomputed": recomputed,
        "verdicts": [v for v in verdicts],
        "drained_hosts": list(drained_hosts),
        "job_id": job_id,
    }


def summarize_incidents(records: Sequence[Mapping[str, Any]], *, run_start: datetime | None = None) -> dict[str, Any]:
    """Goodput/badput per incident and in total, MTBF, MTTR, per-host history (records oldest first).

    An incident's goodput is the time from the previous recovery's first step (or
    ``run_start``, or unknown for the first) to its failure; its badput the time lost.
    """
    rows: list[dict[str, Any]] = []
    failures: list[datetime] = []
    prev_up: datetime | None = run_start
    good_total = bad_total = 0.0
    hosts: dict[str, dict[str, Any]] = {}
    for rec in records:
        failed = _t(rec.get("failure_time")) or _t(rec.get("detected"))
        up = _t(rec.get("first_step"))
        lost = rec.get("time_lost_s")
        good = None if prev_up is None or failed is None else max(0.0, (failed - prev_up).total_seconds())
        if good is not None:
            good_total += good
        if isinstance(lost, (int, float)):
            bad_total += float(lost)
        if failed is not None:
            failures.append(failed)
        rows.append(
            {
                "failure_time": _iso(failed),
                "category": rec.get("category"),
                "outcome": rec.get("outcome"),
                "goodput_s": None if good is None else round(good, 3),
                "badput_s": lost,
                "steps_recomputed": rec.get("steps_recomputed"),
                "verdicts": rec.get("verdicts", []),
                "drained_hosts": rec.get("drained_hosts", []),
            }
        )
        for h in rec.get("drained_hosts") or []:
            entry = hosts.setdefault(h, {"host": h, "drains": 0, "infra_drains": 0, "times": []})
            entry["drains"] += 1
            entry["infra_drains"] += rec.get("category") == "infra"
            entry["times"].append(_iso(failed))
        prev_up = up or prev_up
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(failures)]
    lost_values = [float(r["time_lost_s"]) for r in records if isinstance(r.get("time_lost_s"), (int, float))]
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
