"""The watch's checks as a registry, and each verdict's class declared once and used by recover."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ckptctl.core.recover import decisions
from ckptctl.core.watch.analyze import analyze
from ckptctl.core.watch.context import CheckContext, CheckResult
from ckptctl.core.watch.logevents import LossPoint, ResumeMarker
from ckptctl.core.watch.model import (
    BAD,
    GOOD,
    LOST_LOG_LINES,
    NOTE_CODES,
    PROBLEMS,
    RELATIVE_COUNTER,
    SPIKE,
    UNDECIDED,
    UNREAD_INPUT,
    VERDICT_CLASS,
    VERDICT_CLASSES,
    VERDICTS,
    Finding,
    verdict_class,
)
from ckptctl.core.watch.registry import CHECKS, Check

DECISIONS_SRC = Path(decisions.__file__)


def test_every_verdict_has_exactly_one_class() -> None:
    assert set(VERDICT_CLASS) == set(VERDICTS)
    assert set(VERDICT_CLASS.values()) <= set(VERDICT_CLASSES)
    assert [v for v in VERDICTS if VERDICT_CLASS[v] == GOOD] == ["continuous"]
    # precedence: every bad verdict beats continuous and insufficient-data
    assert VERDICTS[: len(PROBLEMS)] == PROBLEMS
    assert verdict_class(None) == UNDECIDED
    assert verdict_class("a-verdict-from-a-newer-watch") == UNDECIDED


@pytest.mark.parametrize("verdict", VERDICTS)
def test_recover_acts_on_the_watch_class_of_every_verdict(verdict: str) -> None:
    expected = {GOOD: "good", BAD: "bad", UNDECIDED: "unverified"}[VERDICT_CLASS[verdict]]
    assert decisions.classify_verdict(verdict) == expected
    assert decisions.VERDICT_CLASSES[verdict] == expected
    assert (verdict in decisions.BAD_RESUME_VERDICTS) == (VERDICT_CLASS[verdict] == BAD)
    last = decisions.Attempt(
        number=1, checkpoint_step=40, checkpoint_path="/r/step_40", exit_code=0, watch_verdict=verdict
    )
    nxt = decisions.decide_after_attempt([last], max_attempts=3)
    assert (nxt.kind == "rollback-and-resume") == (VERDICT_CLASS[verdict] == BAD)
    outcome = decisions.outcome_when_done(last) if nxt.kind == "done" else None
    assert (outcome == "recovered") == (VERDICT_CLASS[verdict] == GOOD)


def test_recover_does_not_list_verdicts_itself() -> None:
    """The table lives in core/watch/model.py; decisions.py names no verdict (a verdict missing
    from a second list would silently become 'unverified')."""
    tree = ast.parse(DECISIONS_SRC.read_text())
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not literals & set(VERDICTS), sorted(literals & set(VERDICTS))


def test_the_registry_names_every_check_once_and_covers_every_problem() -> None:
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names))
    declared = {v for c in CHECKS for v in c.verdicts}
    assert declared == set(PROBLEMS)
    assert declared <= set(VERDICTS)
    codes = {code for c in CHECKS for code in c.note_codes}
    # the reader's own notes (lost lines, a relative counter) come before any check runs;
    # unread input is the source reader's (ops/watch.py), after them
    assert codes | {LOST_LOG_LINES, RELATIVE_COUNTER, UNREAD_INPUT} == set(NOTE_CODES)


def _log() -> list[LossPoint | ResumeMarker]:
    events: list[LossPoint | ResumeMarker] = []
    line = 0
    for step in range(1, 61):
        line += 1
        events.append(LossPoint(step=step, loss=3.0 - step * 0.01, line_no=line, fmt="generic"))
    line += 1
    events.append(ResumeMarker(line_no=line, step=50, text="resumed from step 50"))
    for step in range(51, 81):
        line += 1
        events.append(LossPoint(step=step, loss=3.0 - step * 0.01, line_no=line, fmt="generic"))
    return events


def test_analyze_runs_every_registered_check_and_composes_them() -> None:
    report = analyze(_log(), final=True)
    assert report.verdict == "continuous"
    # the loss check's numbers and the decision line come through
    assert report.baseline is not None and report.observed is not None
    assert report.explanation[-1].startswith("decision: continuous")


def test_a_check_that_gives_an_undeclared_verdict_is_refused() -> None:
    def rogue(ctx: CheckContext) -> CheckResult:
        return CheckResult(findings=[Finding(verdict=SPIKE, message="x")])

    def rogue_note(ctx: CheckContext) -> CheckResult:
        return CheckResult(notes=[("no-such-code", "x")])

    with pytest.raises(ValueError, match="undeclared verdict 'spike'"):
        analyze(_log(), final=True, checks=(Check("rogue", rogue, verdicts=("nan",)),))
    with pytest.raises(ValueError, match="undeclared note code"):
        analyze(_log(), final=True, checks=(Check("rogue", rogue_note),))
    report = analyze(_log(), final=True, checks=(*CHECKS, Check("ok", rogue, verdicts=(SPIKE,))))
    assert report.verdict == SPIKE and report.decided


def test_every_check_sees_the_same_context() -> None:
    seen: list[CheckContext] = []

    def spy(ctx: CheckContext) -> CheckResult:
        seen.append(ctx)
        return CheckResult(notes=[(None, "spy was here")], checks={"spy": {"n": len(ctx.post)}})

    report = analyze(_log(), final=True, checks=(Check("spy", spy), *CHECKS, Check("spy2", spy)))
    assert len(seen) == 2 and seen[0] is seen[1]
    ctx = seen[0]
    assert ctx.resumed.first_step == 51 and ctx.rs == 50 and ctx.interval == 1
    assert [p.step for p in ctx.judged] == list(range(51, 71))
    assert report.notes.count("spy was here") == 2 and report.checks["spy"] == {"n": 30}
    # without the loss check there is no loss judgement: nothing decides
    no_loss = analyze(_log(), final=True, checks=tuple(c for c in CHECKS if c.name != "loss"))
    assert no_loss.verdict == "insufficient-data" and not no_loss.decided
