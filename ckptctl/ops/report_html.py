"""The HTML view of the report document (``ops.report``): Jinja2 template + matplotlib SVG.

One self-contained file: the CSS is in the page, the charts are inline SVG, there is
no script, font, image or link to anything outside it, so it opens the same from a
mail attachment, a CI artifact or a laptop with no network. Everything shown is read
from the document; the only work here is picking what to show and formatting it.
Jinja2 escapes every value (log lines, paths and reasons are other people's text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from ckptctl.errors import InputError
from ckptctl.ops import report_charts as charts

TEMPLATE = "templates/report.html.j2"
PROBLEM_VERDICTS = {"spike", "nan", "replayed-steps", "skipped-steps", "tokens-mismatch", "schedule-reset", "diverged"}


def render(doc: Mapping[str, Any]) -> str:
    """The page. A value of an unexpected type (a report edited by hand) is an ``InputError``."""
    try:
        return _render(doc)
    except (TypeError, ValueError, AttributeError, LookupError, jinja2.TemplateError) as e:
        raise InputError(
            f"cannot draw the report: a value in the run root's records has an unexpected shape "
            f"({type(e).__name__}: {e})",
            hint="a recovery report or the audit log may have been edited; --json shows the data as read",
        ) from e


def _render(doc: Mapping[str, Any]) -> str:
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["duration"] = duration
    env.filters["size"] = size
    env.filters["clock"] = clock
    env.filters["day"] = day
    env.filters["verdict_class"] = verdict_class
    text = resources.files("ckptctl").joinpath(TEMPLATE).read_text("utf-8")
    return env.from_string(text).render(**view(doc))


def view(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the template shows, taken from the document (see ``ops.report``)."""
    ledger = _dict(doc.get("incidents"))
    recoveries = [r for r in doc.get("recoveries") or [] if isinstance(r, Mapping)]
    with_incident = [r for r in recoveries if isinstance(r.get("incident"), Mapping)]
    rows = [r for r in ledger.get("incidents") or [] if isinstance(r, Mapping)]
    incidents: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        record = _dict(with_incident[i].get("incident")) if i < len(with_incident) else {}
        incidents.append({"number": i + 1, "row": row, "record": record})
    timeline = charts.timeline_chart(
        [
            {
                "label": f"{inc['number']}. {inc['row'].get('category') or 'unknown'}",
                "phases_s": inc["record"].get("phases_s") or {},
                "note": _timeline_note(inc["row"], inc["record"]),
            }
            for inc in incidents
        ]
    )
    reasons = _quarantine_reasons(doc.get("audit") or [])
    checkpoints = []
    for c in _dict(doc.get("checkpoints")).get("checkpoints") or []:
        if isinstance(c, Mapping):
            checkpoints.append({**c, "why": _why(c, reasons)})
    shown = []
    for n, rep in enumerate(recoveries, 1):
        attempts = []
        for a in rep.get("attempts") or []:
            if not isinstance(a, Mapping):
                continue
            watch = _dict(a.get("watch"))
            svg = charts.loss_chart(watch) if watch else None
            attempts.append({**a, "watch": watch, "chart": Markup(svg) if svg else None})
        shown.append({"number": n, "report": rep, "attempts": attempts})
    return {
        "doc": doc,
        "ledger": ledger,
        "incidents": incidents,
        "timeline": Markup(timeline) if timeline else None,
        "recoveries": shown,
        "checkpoints": checkpoints,
        "pointers": _dict(doc.get("checkpoints")).get("pointers") or [],
        "hosts": [h for h in ledger.get("hosts") or [] if isinstance(h, Mapping)],
        "drains": [r for r in doc.get("audit") or [] if isinstance(r, Mapping) and r.get("action") == "drain"],
    }


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _timeline_note(row: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    lost = row.get("badput_s", record.get("time_lost_s"))
    verdicts = ", ".join(str(v) for v in row.get("verdicts") or [] if v) or "no watch verdict"
    return f"lost {duration(lost)}; {verdicts}; {row.get('outcome') or '-'}"


def _quarantine_reasons(records: Sequence[Any]) -> dict[str, str]:
    """Quarantined name -> the reason its audit record gives (the newest record wins)."""
    out: dict[str, str] = {}
    for r in records:
        if isinstance(r, Mapping) and r.get("action") == "quarantine" and isinstance(r.get("to"), str):
            out[r["to"].rstrip("/").rsplit("/", 1)[-1]] = str(r.get("reason") or "")
    return out


def _why(c: Mapping[str, Any], reasons: Mapping[str, str]) -> str:
    name = str(c.get("name") or "")
    if name in reasons:
        return "quarantined: " + reasons[name]
    problems = [str(p) for p in c.get("problems") or []]
    return "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")


def duration(seconds: Any) -> str:
    """``93.2`` -> ``1 min 33 s``; None -> ``-``."""
    s = charts.num(seconds)
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    m, sec = divmod(round(s), 60)
    if m < 60:
        return f"{m} min {sec} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


def clock(stamp: Any) -> str:
    """``2026-11-21T12:19:05Z`` -> ``12:19:05Z`` (the table's date is the failure's); None -> ``-``."""
    if not isinstance(stamp, str) or not stamp:
        return "-"
    return stamp.split("T", 1)[-1]


def day(stamp: Any) -> str:
    """``2026-11-21T12:19:05Z`` -> ``2026-11-21``; None -> ``-``."""
    if not isinstance(stamp, str) or not stamp:
        return "-"
    return stamp.split("T", 1)[0]


def size(num_bytes: Any) -> str:
    b = charts.num(num_bytes)
    if b is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} TiB"


def verdict_class(verdict: Any) -> str:
    if verdict == "continuous" or verdict == "recovered" or verdict == "complete":
        return "good"
    if verdict in PROBLEM_VERDICTS or verdict in ("stopped", "corrupt"):
        return "bad"
    return "warn"
