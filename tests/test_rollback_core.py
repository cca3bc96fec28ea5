"""The pure rollback/undo plans (ckptctl.core.rollback.plan) as tables: no I/O, no clock."""

from __future__ import annotations

import pytest

from ckptctl.core.names import stamp_of
from ckptctl.core.rollback import plan as rb
from ckptctl.core.rollback.model import (
    AMBIGUOUS_STEP,
    NAME_TAKEN,
    NO_FALLBACK,
    NO_SUCH_STEP,
    NOTHING_TO_ROLL_BACK,
    NOTHING_TO_UNDO,
    ROOT_CHANGED,
    Candidate,
    Refusal,
    RollbackPlan,
    Who,
)

ACTOR = Who(time="2026-11-21T03:12:00Z", user="oncall", host="login-1", pid=4242, ckptctl_version="9.9.9")
STAMP = "20261121T031200Z"
ROOT = "s3://bucket/run"


def cands(spec: str) -> list[Candidate]:
    """'step_30:corrupt step_20:complete step_10:-' -> candidates ('-' = not inspected)."""
    out = []
    for item in spec.split():
        name, _, status = item.partition(":")
        c = Candidate.from_name(name, None if status in ("", "-") else status)
        assert c is not None, name
        out.append(c)
    return out


def plan(spec: str, **kw: object) -> RollbackPlan | Refusal:
    return rb.plan_rollback(cands(spec), root=ROOT, now_stamp=STAMP, actor=ACTOR, **kw)  # type: ignore[arg-type]


def undo(spec: str, **kw: object) -> RollbackPlan | Refusal:
    return rb.plan_undo(cands(spec), root=ROOT, now_stamp=STAMP, actor=ACTOR, **kw)  # type: ignore[arg-type]


# (candidates, step, source, fallback, next_locate)
ROLLBACKS = [
    ("step_30:complete step_20:complete step_10:-", None, "step_30", "step_20", "step_20"),
    # locate already skips a broken newest: rollback marks what locate returns NOW
    ("step_30:corrupt step_20:complete step_10:complete", None, "step_20", "step_10", "step_10"),
    # falls back past broken and temp ones, as locate does
    ("step_30:complete step_25.tmp-ab:- step_20:incomplete step_10:complete", None, "step_30", "step_10", "step_10"),
    # already-quarantined checkpoints are never a fallback, even if their content is complete
    (
        "step_30:complete step_20.quarantined-20261120T000000Z:complete step_10:complete",
        None,
        "step_30",
        "step_10",
        "step_10",
    ),
    # other frameworks' names
    ("global_step300:complete global_step200:complete", None, "global_step300", "global_step200", "global_step200"),
    ("checkpoint-30:complete checkpoint-20:complete", None, "checkpoint-30", "checkpoint-20", "checkpoint-20"),
    # --step N older than the newest complete: locate still returns the newest
    ("step_30:complete step_20:complete step_10:complete", 20, "step_20", "step_10", "step_30"),
    # --step on the newest
    ("step_30:complete step_20:complete step_10:-", 30, "step_30", "step_20", "step_20"),
    # --step on a broken checkpoint newer than what locate returns
    ("step_30:corrupt step_20:complete step_10:-", 30, "step_30", "step_20", "step_20"),
]


@pytest.mark.parametrize(("spec", "step", "source", "fallback", "next_locate"), ROLLBACKS)
def test_rollback_plans(spec: str, step: int | None, source: str, fallback: str, next_locate: str) -> None:
    p = plan(spec, step=step)
    assert isinstance(p, RollbackPlan), p
    assert (p.action, p.source, p.fallback, p.next_locate) == ("quarantine", source, fallback, next_locate)
    assert p.destination == f"{source}.quarantined-{STAMP}"
    assert p.path(p.next_locate) == f"{ROOT}/{next_locate}"


# (candidates, step, refusal code, words in the message)
ROLLBACK_REFUSALS = [
    ("step_30:complete", None, NO_FALLBACK, "no complete checkpoint older than step 30"),
    ("step_30:complete step_20:corrupt step_10:incomplete", None, NO_FALLBACK, "roll back step_30"),
    ("step_30:complete step_20.quarantined-20261120T000000Z:complete", None, NO_FALLBACK, "older than step 30"),
    ("step_30:corrupt step_20:incomplete", None, NOTHING_TO_ROLL_BACK, "nothing to roll back"),
    ("", None, NOTHING_TO_ROLL_BACK, "nothing to roll back"),
    ("step_30:complete step_20:complete", 25, NO_SUCH_STEP, "no checkpoint at step 25"),
    (
        "step_30.quarantined-20261120T000000Z:complete step_20:complete",
        30,
        NO_SUCH_STEP,
        "already quarantined: step_30.quarantined-20261120T000000Z",
    ),
    ("step_30.tmp-1:- step_20:complete", 30, NO_SUCH_STEP, "only a temporary directory"),
    ("step_30:complete step-30:complete step_20:complete", 30, AMBIGUOUS_STEP, "step-30, step_30"),
    ("step_30:complete step_20:complete step_10:complete", 10, NO_FALLBACK, "older than step 10"),
]


@pytest.mark.parametrize(("spec", "step", "code", "words"), ROLLBACK_REFUSALS)
def test_rollback_refusals(spec: str, step: int | None, code: str, words: str) -> None:
    r = plan(spec, step=step)
    assert isinstance(r, Refusal), r
    assert r.code == code
    assert words in r.message, r.message
    assert r.hint


def test_refusal_says_what_locate_returns_meanwhile() -> None:
    r = plan("step_30:complete step_20:corrupt")
    assert isinstance(r, Refusal)
    assert r.current_locate == "step_30"
    assert r.to_json()["current_locate"] == "step_30"
    assert ROOT in r.hint


def test_notes_for_step_older_than_newest_and_for_a_broken_target() -> None:
    p = plan("step_30:complete step_20:complete step_10:complete", step=20)
    assert isinstance(p, RollbackPlan)
    assert any("step_30 is newer than step_20 and complete" in n for n in p.notes), p.notes
    p = plan("step_30:corrupt step_20:complete step_10:-", step=30)
    assert isinstance(p, RollbackPlan)
    assert any("already not complete (corrupt)" in n for n in p.notes), p.notes


def test_note_when_the_same_name_was_quarantined_before() -> None:
    p = plan("step_30:complete step_30.quarantined-20261120T000000Z:- step_20:complete")
    assert isinstance(p, RollbackPlan)
    assert p.source == "step_30"
    assert any("was quarantined before" in n for n in p.notes)


def test_destination_never_collides() -> None:
    spec = f"step_30:complete step_30.quarantined-{STAMP}:- step_20:complete"
    p = plan(spec)
    assert isinstance(p, RollbackPlan)
    assert p.destination == f"step_30.quarantined-{STAMP}-2"
    p = plan("step_30:complete step_20:complete", other_names=[f"step_30.quarantined-{STAMP}"])
    assert isinstance(p, RollbackPlan)
    assert p.destination == f"step_30.quarantined-{STAMP}-2"


def test_audit_record_of_a_plan() -> None:
    p = plan("step_30:complete step_20:complete", reason="loss spike at 31k")
    assert isinstance(p, RollbackPlan)
    assert p.record.to_json() == {
        "time": "2026-11-21T03:12:00Z",
        "user": "oncall",
        "host": "login-1",
        "pid": 4242,
        "action": "quarantine",
        "from": "step_30",
        "to": f"step_30.quarantined-{STAMP}",
        "step": 30,
        "reason": "loss spike at 31k",
        "ckptctl_version": "9.9.9",
        "root": ROOT,
    }
    doc = p.to_json()
    assert doc["source"] == {"name": "step_30", "path": f"{ROOT}/step_30", "status": "complete"}
    assert doc["next_locate"] == {"name": "step_20", "path": f"{ROOT}/step_20"}
    assert doc["audit_record"] == p.record.to_json()


def test_uninspected_candidate_on_the_decision_path_is_a_bug_not_a_guess() -> None:
    with pytest.raises(ValueError, match="not inspected"):
        plan("step_30:- step_20:complete")
    with pytest.raises(ValueError, match="not inspected"):
        plan("step_30:complete step_20:- step_10:complete")
    # uninspected candidates past the decision are fine
    assert isinstance(plan("step_30:complete step_20:complete step_10:- step_5:-"), RollbackPlan)


@pytest.mark.parametrize("stamp", ["2026-11-21T03:12:00Z", "20261121T0312Z", "", "20261321T031200Z"])
def test_bad_stamp_is_rejected(stamp: str) -> None:
    with pytest.raises(ValueError, match="now_stamp"):
        rb.plan_rollback(cands("step_30:complete step_20:complete"), root=ROOT, now_stamp=stamp, actor=ACTOR)


# (candidates, step, restored source, destination, next_locate)
UNDOS = [
    (
        "step_30.quarantined-20261121T010000Z:complete step_20:complete",
        None,
        "step_30.quarantined-20261121T010000Z",
        "step_30",
        "step_30",
    ),
    # the most recent quarantine by stamp, not by step
    (
        "step_30.quarantined-20261121T010000Z:complete step_20.quarantined-20261121T020000Z:complete step_10:complete",
        None,
        "step_20.quarantined-20261121T020000Z",
        "step_20",
        "step_20",
    ),
    # same second: successive rollbacks go back in steps, so the lower step is the later one
    (
        "step_30.quarantined-20261121T010000Z:complete step_20.quarantined-20261121T010000Z:complete step_10:complete",
        None,
        "step_20.quarantined-20261121T010000Z",
        "step_20",
        "step_20",
    ),
    # the same-second disambiguator sorts after the plain stamp
    (
        "step_30.quarantined-20261121T010000Z:complete step_30.quarantined-20261121T010000Z-2:complete "
        "step_20:complete",
        None,
        "step_30.quarantined-20261121T010000Z-2",
        "step_30",
        "step_30",
    ),
    # --step picks among the quarantined ones at that step
    (
        "step_30.quarantined-20261121T010000Z:complete step_20.quarantined-20261121T020000Z:complete step_10:complete",
        30,
        "step_30.quarantined-20261121T010000Z",
        "step_30",
        "step_30",
    ),
    # an older restore does not change what locate returns
    (
        "step_30:complete step_20.quarantined-20261121T020000Z:complete step_10:complete",
        None,
        "step_20.quarantined-20261121T020000Z",
        "step_20",
        "step_30",
    ),
    # restoring broken content: locate still skips it
    (
        "step_30.quarantined-20261121T010000Z:corrupt step_20:complete",
        None,
        "step_30.quarantined-20261121T010000Z",
        "step_30",
        "step_20",
    ),
]


@pytest.mark.parametrize(("spec", "step", "source", "destination", "next_locate"), UNDOS)
def test_undo_plans(spec: str, step: int | None, source: str, destination: str, next_locate: str) -> None:
    p = undo(spec, step=step, reason="false alarm")
    assert isinstance(p, RollbackPlan), p
    assert (p.action, p.source, p.destination, p.next_locate) == ("restore", source, destination, next_locate)
    assert p.fallback is None
    assert p.record.action == "restore" and p.record.reason == "false alarm"
    assert (p.record.from_name, p.record.to_name) == (source, destination)


def test_undo_of_broken_content_says_locate_will_not_return_it() -> None:
    p = undo("step_30.quarantined-20261121T010000Z:corrupt step_20:complete")
    assert isinstance(p, RollbackPlan)
    assert any("locate will not return it" in n for n in p.notes)


# (candidates, step, other names, refusal code, words)
UNDO_REFUSALS = [
    ("step_30:complete step_20:complete", None, (), NOTHING_TO_UNDO, "nothing to undo"),
    ("step_30.quarantined-20261121T010000Z:complete step_20:complete", 20, (), NOTHING_TO_UNDO, "at step 20"),
    (
        "step_30.quarantined-20261121T010000Z:complete step_30:complete step_20:complete",
        None,
        (),
        NAME_TAKEN,
        "step_30 exists",
    ),
    ("step_30.quarantined-20261121T010000Z:complete step_20:complete", None, ("step_30",), NAME_TAKEN, "step_30"),
]


@pytest.mark.parametrize(("spec", "step", "others", "code", "words"), UNDO_REFUSALS)
def test_undo_refusals(spec: str, step: int | None, others: tuple[str, ...], code: str, words: str) -> None:
    r = undo(spec, step=step, other_names=others)
    assert isinstance(r, Refusal), r
    assert r.code == code
    assert words in r.message
    assert r.hint


def test_candidate_from_name() -> None:
    c = Candidate.from_name("step_30.quarantined-20261121T010000Z", "complete")
    assert c is not None and c.is_quarantined and not c.is_live and c.step == 30
    t = Candidate.from_name("step_40.tmp-9f2c")
    assert t is not None and t.is_temp and not t.is_live and t.status is None
    assert Candidate.from_name(".ckptctl") is None
    assert Candidate.from_name("latest") is None
    assert stamp_of("step_30.quarantined-20261121T010000Z-2") == "20261121T010000Z-2"
    assert stamp_of("step_30") == ""


# (candidates still there, vanished, step, refusal code or the plan's (source, fallback))
VANISHED = [
    # the newest vanished before it was inspected: the "newest" is unknown -> refuse
    ("step_20:complete step_10:-", "step_30", None, ROOT_CHANGED),
    # nothing complete left, but something live vanished: not "nothing to roll back"
    ("step_20:incomplete step_10:incomplete", "step_30", None, ROOT_CHANGED),
    # --step target itself, or a newer one than it, vanished
    ("step_20:complete step_10:complete", "step_30", 20, ROOT_CHANGED),
    # an older one vanished: decided without it
    ("step_30:complete step_20:complete", "step_10", None, ("step_30", "step_20")),
    ("step_30:complete step_20:incomplete", "step_10", None, NO_FALLBACK),
    # a vanished temp or quarantined directory never matters to a rollback
    ("step_30:complete step_20:complete", "step_40.tmp-ab", None, ("step_30", "step_20")),
]


@pytest.mark.parametrize(("spec", "gone", "step", "want"), VANISHED)
def test_rollback_with_vanished_candidates(spec: str, gone: str, step: int | None, want: object) -> None:
    got = plan(spec, step=step, vanished=cands(gone))
    if isinstance(want, str):
        assert isinstance(got, Refusal) and got.code == want, got
        if want == ROOT_CHANGED:
            assert gone in got.message
    else:
        assert isinstance(got, RollbackPlan), got
        assert (got.source, got.fallback) == want


def test_undo_refuses_when_a_quarantined_candidate_vanished() -> None:
    spec = "step_20:complete step_30.quarantined-20261121T031100Z:complete"
    got = undo(spec, vanished=cands("step_30.quarantined-20261121T031000Z"))
    assert isinstance(got, Refusal) and got.code == ROOT_CHANGED
    # one at another step does not matter to an undo --step
    ok = undo(spec, step=30, vanished=cands("step_40.quarantined-20261121T031000Z"))
    assert isinstance(ok, RollbackPlan) and ok.destination == "step_30"
