"""``ckptctl report ROOT``: one document of what ckptctl knows about a run, and its HTML view.

The document (``--json``, schema ``ckptctl.report/1``) is made of what other commands
already compute, embedded whole so that it follows them as they change:

* ``incidents``: ``ckptctl incidents ROOT --json`` (goodput, MTBF, hosts, RMA candidates);
* ``recoveries``: every recovery report the audit log points at, oldest first, as
  ``recover`` wrote it (classify, drain, skipped checkpoints, attempts with the loss
  watch's JSON and its ``curve``, rollbacks, the incident record);
* ``checkpoints``: ``ckptctl list ROOT --json`` (quick verification);
* ``audit``: the audit records of quarantines, restores, drains and deletions.

``render_html`` turns the document into one self-contained HTML file
(``ops.report_html``; needs the ``report`` extra: Jinja2 and matplotlib, imported
only there). Nothing here writes: the caller writes the HTML where it was told to.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ckptctl import __version__
from ckptctl.errors import CkptctlError
from ckptctl.ops.status import run_incidents
from ckptctl.runroot import audit
from ckptctl.runroot.locate import list_checkpoints
from ckptctl.runroot.root import RunRoot, as_run_root
from ckptctl.runroot.state import reports

SCHEMA = "ckptctl.report/1"
#: Audit actions the report shows (what happened to checkpoints and hosts).
SHOWN_ACTIONS = ("quarantine", "restore", "drain", "retention-delete", "supersede")


def build_report(root: str | RunRoot, *, now: datetime | None = None) -> dict[str, Any]:
    """The report document of the run root ``root`` (read-only)."""
    rr = as_run_root(root)
    when = now or datetime.now(timezone.utc)
    records = audit.read(rr).records
    return {
        "schema": SCHEMA,
        "root": rr.url,
        "generated": when.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "ckptctl_version": __version__,
        "incidents": run_incidents(rr),
        "recoveries": [r.doc for r in reports(rr)],
        "checkpoints": list_checkpoints(rr).to_json(),
        "audit": [r for r in records if r.get("action") in SHOWN_ACTIONS],
    }


class ReportExtraMissing(CkptctlError):
    """The HTML view needs the ``report`` extra (Jinja2, matplotlib)."""


def render_html(doc: dict[str, Any]) -> str:
    """The document as one self-contained HTML page (no network, no other file)."""
    try:
        from ckptctl.ops import report_html
    except ImportError as e:  # jinja2 / matplotlib
        raise ReportExtraMissing(
            f"the HTML report needs the 'report' extra ({e.name or e} is not installed)",
            hint="pip install 'ckptctl[report]' (Jinja2, matplotlib); --json works without it",
        ) from e
    return report_html.render(doc)


def html_available() -> bool:
    """Whether ``render_html`` can run here (without importing the libraries)."""
    from importlib.util import find_spec

    return all(find_spec(name) is not None for name in ("jinja2", "matplotlib"))
