"""What the rollback and undo planners (``ckptctl.core.rollback.plan``) need to know about a run root.

Facts come from ONE listing of the root: the same walk ``locate`` makes
(``runroot.locate.locate_in``) over that listing gives the statuses, so every
candidate the planner walks past was inspected. A directory that appears after the
listing (a save committing) is not part of the plan; one that disappears before it
is probed (retention purging it) is left out and named in ``vanished``. Either way
the plan is made on a consistent picture, and the use case locates again after
acting and warns when the root changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ckptctl.core.rollback.model import Candidate
from ckptctl.core.verify import contract as v
from ckptctl.errors import NotFoundError
from ckptctl.runroot.inspect import RootScan, inspect_checkpoint, scan_root
from ckptctl.runroot.locate import locate_in
from ckptctl.runroot.reports import CheckOptions, CheckpointReport, LocateResult, ProgressFn
from ckptctl.runroot.root import RunRoot


@dataclass(slots=True)
class RootFacts:
    """The run root as the planner sees it."""

    candidates: list[Candidate]
    """Every checkpoint directory of the listing still there, with the statuses known."""
    other_names: list[str]
    """Every other name in the listing (files, other folders, vanished directories)."""
    vanished: list[Candidate] = field(default_factory=list)
    """Directories the listing named that were gone when probed (status None)."""

    def note(self) -> str | None:
        if not self.vanished:
            return None
        return (
            f"{', '.join(c.name for c in self.vanished)} disappeared while the run root was being "
            "inspected (a training job's retention at work?)"
        )


def content_status(report: CheckpointReport) -> str:
    """Status of a quarantined directory's content, as if it had its original name."""
    if not report.is_quarantined:
        return report.status
    return v.status_of(p for p in report.problem_details if p.code != v.QUARANTINED)


def _reports(*located: LocateResult) -> Iterable[CheckpointReport]:
    for loc in located:
        yield from loc.skipped
        if loc.checkpoint is not None:
            yield loc.checkpoint


def _facts(scan: RootScan, statuses: dict[str, str], vanished: list[str]) -> RootFacts:
    gone = set(vanished)
    every = [
        Candidate(
            name=cn.name,
            step=cn.step,
            is_temp=cn.is_temp,
            is_quarantined=cn.is_quarantined,
            status=None if cn.name in gone else statuses.get(cn.name),
        )
        for cn, _e in scan.candidates
    ]
    cands = [c for c in every if c.name not in gone]
    named = {c.name for c in cands}
    others = [e.name for e in scan.entries if e.name not in named]
    return RootFacts(
        candidates=cands, other_names=others, vanished=[c for c in every if c.name in gone]
    )


def _inspect(
    scan: RootScan, name: str, options: CheckOptions, progress: ProgressFn
) -> CheckpointReport | None:
    path = next(e.path for cn, e in scan.candidates if cn.name == name)
    try:
        return inspect_checkpoint(scan.storage, path, options=options, progress=progress)
    except NotFoundError:
        return None


def rollback_facts(
    root: RunRoot, *, step: int | None, options: CheckOptions, progress: ProgressFn
) -> RootFacts:
    """Inspect what the rollback decision walks past, newest first, as ``locate`` would."""
    scan = scan_root(root.storage, root.path, root.list())
    current = locate_in(scan, options=CheckOptions(world_size=options.world_size), progress=progress)
    statuses: dict[str, str] = {r.name: r.status for r in _reports(current)}
    vanished = list(current.vanished)
    target: tuple[str, int] | None = None
    if step is None:
        if current.checkpoint is not None and current.checkpoint.step is not None:
            target = (current.checkpoint.name, current.checkpoint.step)
    else:
        matches = [cn.name for cn, _e in scan.candidates if cn.is_candidate and cn.step == step]
        matches = [n for n in matches if n not in vanished]
        if len(matches) == 1:
            target = (matches[0], step)
            if matches[0] not in statuses:
                report = _inspect(scan, matches[0], options, progress)
                if report is None:
                    vanished.append(matches[0])
                    target = None
                else:
                    statuses[matches[0]] = report.status
    if target is not None:
        # The safety rule, checked by the same walk `locate --before` runs.
        older = locate_in(scan, options=options, before_step=target[1], progress=progress)
        statuses.update({r.name: r.status for r in _reports(older)})
        vanished.extend(older.vanished)
    return _facts(scan, statuses, vanished)


def undo_facts(root: RunRoot, *, step: int | None, progress: ProgressFn) -> RootFacts:
    """What undo decides on: the live walk, and the content status of each quarantined one."""
    scan = scan_root(root.storage, root.path, root.list())
    current = locate_in(scan, progress=progress)
    statuses: dict[str, str] = {r.name: r.status for r in _reports(current)}
    vanished = list(current.vanished)
    for cn, _e in scan.candidates:
        if cn.is_quarantined and (step is None or cn.step == step):
            report = _inspect(scan, cn.name, CheckOptions(), progress)
            if report is None:
                vanished.append(cn.name)
            else:
                statuses[cn.name] = content_status(report)
    return _facts(scan, statuses, vanished)
