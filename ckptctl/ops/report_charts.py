"""The report's pictures as inline SVG, drawn by matplotlib's SVG backend (the ``report`` extra).

Imported only by ``ops.report_html`` (``ckptctl report`` and the HTML ``recover``
writes), never by ``--help``, list, locate, verify, classify or watch: matplotlib
takes about 1.6 s to import. No pyplot (no global figure state, no GUI backend):
a ``Figure`` is saved to SVG directly. Text is drawn as paths
(``svg.fonttype: path``) so the picture looks the same wherever the file is
opened, with no font to fetch; ids are salted with a fixed string so the same
data gives the same bytes.

Every number drawn comes from the documents as they are (the watch's ``curve``
and verdict, the incident records' ``phases_s``): nothing is judged here.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
from matplotlib.figure import Figure

#: matplotlib settings for every chart (typed Any: matplotlib's stubs want literal key types).
_RC: Any = {
    "svg.fonttype": "path",
    "svg.hashsalt": "ckptctl-report",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
}
BEFORE = "#6b7280"
AFTER = "#2563eb"
ABOVE = "#dc2626"
BAND = "#fcd34d"
EXPECTED = "#b45309"
LR = "#7c3aed"
RESUME = "#111827"
VERDICT_COLOURS = {"continuous": "#15803d", "insufficient-data": "#b45309"}
PHASE_COLOURS = {
    "detection": "#f87171",
    "drain": "#fb923c",
    "capacity": "#facc15",
    "relaunch": "#60a5fa",
    "first_step": "#a78bfa",
}
PHASE_WORDS = {
    "detection": "failure to detection",
    "drain": "drain",
    "capacity": "capacity",
    "relaunch": "relaunch",
    "first_step": "to the first step",
}


def num(value: Any) -> float | None:
    """A number of the JSON documents (``"nan"``/``"inf"`` strings included); None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _svg(fig: Figure) -> str:
    """The figure as an ``<svg>`` element for inline HTML: no XML prolog, DOCTYPE or namespaces."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    head, sep, body = text.partition(">")
    # HTML's parser puts an inline <svg> in the SVG namespace itself; the URIs would only
    # look like references to the outside (the DOCTYPE's DTD URL is one: it is dropped).
    head = re.sub(r'\s+xmlns(?::xlink)?="[^"]*"', "", head)
    return head + ' role="img"' + sep + body


def _points(rows: Sequence[Sequence[Any]]) -> list[tuple[int, float, float | None]]:
    out = []
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, list) and len(r) >= 2 and isinstance(r[0], int) and (loss := num(r[1])) is not None:
            out.append((r[0], loss, num(r[2]) if len(r) > 2 else None))
    return out


def loss_chart(watch: Mapping[str, Any]) -> str | None:
    """The losses around one resume: before, after, expected level, tolerance band, verdict, lr."""
    curve = watch.get("curve")
    if not isinstance(curve, Mapping):
        return None
    before, after = _points(curve.get("before") or []), _points(curve.get("after") or [])
    if not after:
        return None
    marks: list[tuple[int, float, float]] = []
    expected = curve.get("expected")
    for e in expected if isinstance(expected, list) else []:
        if not isinstance(e, list):
            continue
        level, top = (num(e[1]), num(e[2])) if len(e) >= 3 else (None, None)
        if isinstance(e[0], int) and level is not None and top is not None:
            marks.append((e[0], level, top))
    verdict = str(watch.get("verdict") or "-")
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(7.6, 3.1), layout="constrained")
        ax = fig.subplots()
        if marks:
            xs = [s for s, _, _ in marks]
            ax.fill_between(xs, [lv for _, lv, _ in marks], [th for _, _, th in marks], color=BAND, alpha=0.45,
                            linewidth=0, label="tolerance band")  # fmt: skip
            ax.plot(xs, [lv for _, lv, _ in marks], color=EXPECTED, ls="--", lw=1, label="expected level")
            ax.plot(xs, [th for _, _, th in marks], color=EXPECTED, lw=0.8, alpha=0.8, label="threshold")
        fb = [(s, v) for s, v, _ in before if math.isfinite(v)]
        if fb:
            ax.plot(*zip(*fb, strict=True), color=BEFORE, lw=1.2, label="before the failure")
        fa = [(s, v) for s, v, _ in after if math.isfinite(v)]
        if fa:
            ax.plot(*zip(*fa, strict=True), color=AFTER, lw=1.4, marker="o", ms=2.5, label="after the resume")
        limit = {s: th for s, _, th in marks}
        above = [(s, v) for s, v in fa if s in limit and v > limit[s]]
        if above:
            ax.scatter([x for x, _ in above], [y for _, y in above], color=ABOVE, s=14, zorder=5,
                       label="above the threshold")  # fmt: skip
        bad = [s for s, v, _ in after if not math.isfinite(v)]
        if bad:
            ax.scatter(bad, [0.97] * len(bad), marker="x", color=ABOVE, transform=ax.get_xaxis_transform(),
                       zorder=5, label="NaN / Inf loss")  # fmt: skip
        resume = watch.get("resume_step")
        first = watch.get("first_resumed_step")
        if isinstance(resume, int):
            ax.axvline(resume, color=RESUME, ls=":", lw=1, label=f"checkpoint step {resume}")
        elif isinstance(first, int):
            ax.axvline(first, color=RESUME, ls=":", lw=1, label=f"resumed at step {first}")
        ax.set_title(f"verdict: {verdict}", loc="right", color=VERDICT_COLOURS.get(verdict, ABOVE), fontweight="bold")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        handles, labels = ax.get_legend_handles_labels()
        lrs = [(s, lr) for s, _, lr in before + after if lr is not None and math.isfinite(lr)]
        if lrs:
            ax2 = ax.twinx()
            for part, style in ((before, "-"), (after, "--")):
                pts = [(s, lr) for s, _, lr in part if lr is not None and math.isfinite(lr)]
                if pts:
                    ax2.plot(*zip(*pts, strict=True), color=LR, lw=0.9, ls=style, alpha=0.7)
            ax2.set_ylim(bottom=0, top=max(lr for _, lr in lrs) * 1.15 or 1.0)
            ax2.set_ylabel("learning rate", color=LR)
            ax2.tick_params(axis="y", colors=LR, labelsize=7.5)
            ax2.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
            handles.append(ax2.lines[0])
            labels.append("learning rate")
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=4, frameon=False)
        return _svg(fig)


def timeline_chart(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """Each incident's time lost by phase, from its failure (or detection) to the first resumed step.

    ``rows``: ``{"label", "phases_s": {phase: seconds | None}, "time_lost_s", "note"}``.
    """
    drawn = [r for r in rows if any(num(v) for v in (r.get("phases_s") or {}).values())]
    if not drawn:
        return None
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(7.6, 0.9 + 0.42 * len(drawn)), layout="constrained")
        ax = fig.subplots()
        seen: set[str] = set()
        for y, row in enumerate(drawn):
            left = 0.0
            phases = row.get("phases_s") or {}
            for phase, colour in PHASE_COLOURS.items():
                width = num(phases.get(phase))
                if not width or width <= 0:
                    continue
                ax.barh(y, width, left=left, height=0.6, color=colour, edgecolor="white", linewidth=0.5,
                        label=None if phase in seen else PHASE_WORDS[phase])  # fmt: skip
                seen.add(phase)
                left += width
            ax.text(left, y, "  " + str(row.get("note") or ""), va="center", fontsize=8)
        ax.spines["right"].set_visible(False)
        ax.set_yticks(range(len(drawn)), [str(r.get("label")) for r in drawn])
        ax.invert_yaxis()
        ax.set_xlim(0, max(1.0, ax.get_xlim()[1] * 1.35))
        ax.set_xlabel("seconds from the failure (or its detection when the failure time is unknown)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(drawn) < 3 else -0.15), ncols=5,
                  frameon=False)  # fmt: skip
        return _svg(fig)
