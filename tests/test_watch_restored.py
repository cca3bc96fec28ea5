"""The load-coverage line (``ckptctl: restored: N/M keys``) as ``watch`` reads it.

The lines are the training library's own (``KeyCoverage.line`` writes them with
``format_restored``; tests/test_training_coverage.py checks a real load logs one), written
here around a trainer's loss lines.
"""

from __future__ import annotations

import pytest

from ckptctl.core.recover.decisions import classify_verdict
from ckptctl.core.watch.losslog import LossLogParser
from ckptctl.core.watch.model import NOTE_CODES, PARTIAL_RESTORE, WatchReport
from ckptctl.core.watch.restored import allowed_groups, format_restored, parse_restored
from ckptctl.core.watch.session import WatchSession
from ckptctl.ops.watch import watch_lines

# -- the line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("ckptctl: restored: 412/412 keys step=100", (412, 412, 100, None, None)),
        ("ckptctl: restored: 410/414 keys step=100 allowed-missing=2 allowed-unexpected=2", (410, 414, 100, 2, 2)),
        ("WARNING:ckptctl.training:ckptctl: restored: 7/9 keys allowed-unexpected=2 step=5 allowed-missing=0",
         (7, 9, 5, 0, 2)),
        ("2026-01-02 03:04:05,678 ckptctl: restored: 3/3 keys step=0 shards=4", (3, 3, 0, None, None)),
        ("ckptctl: restored: 3/3 keys", (3, 3, None, None, None)),
    ],
)  # fmt: skip
def test_a_coverage_line_is_read(line: str, want: tuple[object, ...]) -> None:
    c = parse_restored(line, 4)
    assert c is not None
    assert (c.restored, c.total, c.step, c.allowed_missing, c.allowed_unexpected) == want
    assert c.line_no == 4


@pytest.mark.parametrize(
    "line",
    [
        "ckptctl: restored: 413/412 keys step=100",  # more restored than there are
        "ckptctl: restored: 412 keys step=100",
        "ckptctl: restored: -1/412 keys step=100",
        "ckptctl: restored 412/412 keys step=100",
        "ckptctl-train resumed from=/ckpt/step_100 step=100",
        "",
    ],
)
def test_anything_else_is_not_a_coverage_line(line: str) -> None:
    assert parse_restored(line, 1) is None


def test_the_formatter_writes_what_the_reader_reads() -> None:
    assert format_restored(412, 412, 100) == "ckptctl: restored: 412/412 keys step=100"
    line = format_restored(410, 414, 100, allowed_missing=2, allowed_unexpected=2)
    assert line == "ckptctl: restored: 410/414 keys step=100 allowed-missing=2 allowed-unexpected=2"
    c = parse_restored(line, 1)
    assert c is not None and c.allowance_named and not c.complete


def test_the_allowed_groups_are_named_and_read_back() -> None:
    keys = ["optimizer.state.fc.weight.exp_avg", "optimizer.param_groups.lr", "dataloader.epoch"]
    assert allowed_groups(keys) == ("dataloader", "optimizer")
    line = format_restored(7, 10, 3, allowed_unexpected=3, groups=allowed_groups(keys))
    assert line == "ckptctl: restored: 7/10 keys step=3 allowed-missing=0 allowed-unexpected=3 allowed=dataloader,optimizer"
    c = parse_restored(line, 1)
    assert c is not None and c.groups == ("dataloader", "optimizer")
    # a name the line cannot carry (a space, a comma, '='), and more groups than it shows
    assert allowed_groups(["my model.w", "a,b.c", "x=y"]) == ("?",)
    many = allowed_groups([f"g{i:02d}.w" for i in range(12)])
    assert len(many) == 9 and many[-1] == "..." and many[0] == "g00"
    c = parse_restored(format_restored(1, 13, 3, allowed_missing=12, groups=many), 1)
    assert c is not None and c.groups == many and c.allowance_named
    # a full restore names no groups, whatever is passed
    assert format_restored(5, 5, 1, groups=("model",)) == "ckptctl: restored: 5/5 keys step=1"


def test_the_reader_takes_the_line_for_a_restore_line_naming_its_step() -> None:
    events = LossLogParser().feed("WARNING:ckptctl.training:" + format_restored(5, 5, 40))
    assert len(events) == 1
    marker = events[0]
    assert getattr(marker, "kind", None) == "restore" and getattr(marker, "step", None) == 40


def test_the_note_code_is_declared() -> None:
    assert PARTIAL_RESTORE in NOTE_CODES


# -- the check --------------------------------------------------------------------------------


def run(first: int, last: int, *, resumed_from: int | None = None, coverage: str | None = None,
        own_restore_line: bool = True, late_coverage: bool = False) -> list[str]:
    """One launch of a trainer: (resumed) its restore lines, then a loss per step."""
    lines = []
    if resumed_from is not None:
        if coverage is not None and not late_coverage:
            lines.append("WARNING:ckptctl.training:" + coverage)
        if own_restore_line:
            lines.append(f"ckptctl-train resumed from=/ckpt/step_{resumed_from} step={resumed_from} world_size=2")
    for step in range(first, last + 1):
        lines.append(f"ckptctl-train step={step} loss={2.0 + 5.0 / step + 0.01 * (step % 7)!r} rank=0")
        if late_coverage and coverage is not None and step == first:
            lines.append("WARNING:ckptctl.training:" + coverage)
    return lines


def judge(lines: list[str]) -> WatchReport:
    session = WatchSession()
    for line in lines:
        session.feed(line, evaluate=False)
    session.end_log()
    return session.evaluate(final=True)


FULL = format_restored(412, 412, 40)
PARTIAL = format_restored(410, 412, 40, allowed_missing=0, allowed_unexpected=2, groups=("optimizer",))


def test_a_full_restore_is_said_so() -> None:
    r = judge(run(1, 57) + run(41, 90, resumed_from=40, coverage=FULL))
    assert r.verdict == "continuous"
    rc = r.checks["restore_coverage"]
    assert rc["complete"] is True and (rc["restored"], rc["total"], rc["step"]) == (412, 412, 40)
    assert PARTIAL_RESTORE not in r.note_codes
    assert any("restored 412/412 keys" in n and "every saved key restored" in n for n in r.notes)


def test_a_partial_restore_by_allowance_is_reported_not_failed() -> None:
    r = judge(run(1, 57) + run(41, 90, resumed_from=40, coverage=PARTIAL))
    assert r.verdict == "continuous" and classify_verdict(r.verdict) == "good"
    assert PARTIAL_RESTORE in r.note_codes
    rc = r.checks["restore_coverage"]
    assert rc["complete"] is False and rc["allowance_named"] is True
    assert (rc["restored"], rc["total"], rc["allowed_unexpected"]) == (410, 412, 2)
    note = next(n for n in r.notes if "restored 410/412 keys" in n)
    assert "allowance" in note and "2 allowed unexpected (saved, not restored) in optimizer" in note
    assert rc["allowed_groups"] == ["optimizer"]


def test_a_partial_line_without_an_allowance_says_it_is_not_ckptctls() -> None:
    r = judge(run(1, 57) + run(41, 90, resumed_from=40, coverage="ckptctl: restored: 400/412 keys step=40"))
    assert PARTIAL_RESTORE in r.note_codes
    assert r.checks["restore_coverage"]["allowance_named"] is False
    assert any("names no allowance" in n for n in r.notes)
    # an allowance that does not add up is no allowance either
    odd = format_restored(400, 412, 40, allowed_missing=1, allowed_unexpected=1)
    assert judge(run(1, 57) + run(41, 90, resumed_from=40, coverage=odd)).checks["restore_coverage"][
        "allowance_named"
    ] is False


def test_an_earlier_partial_resume_is_a_note() -> None:
    lines = run(1, 57) + run(41, 77, resumed_from=40, coverage=PARTIAL) + run(
        61, 100, resumed_from=60, coverage=format_restored(412, 412, 60)
    )
    r = judge(lines)
    assert r.verdict == "continuous" and r.resume_step == 60
    assert PARTIAL_RESTORE in r.note_codes
    assert r.checks["restore_coverage"]["complete"] is True and r.checks["restore_coverage"]["earlier_partial"] == 1
    assert any(n.startswith("an earlier resume restored 410/412 keys") for n in r.notes)


@pytest.mark.parametrize("own_restore_line", [True, False])
def test_the_coverage_line_is_one_resume_with_the_trainers_restore_line(own_restore_line: bool) -> None:
    """Next to the trainer's own restore line, or alone: one resume, from the step it names."""
    plain = judge(run(1, 57) + run(41, 90, resumed_from=40))
    r = judge(run(1, 57) + run(41, 90, resumed_from=40, coverage=FULL, own_restore_line=own_restore_line))
    assert r.num_segments == plain.num_segments == 2
    assert r.resume_step == 40 and r.first_resumed_step == 41 and r.verdict == "continuous"
    # two resumes: three segments, the coverage lines add none
    two = run(1, 57) + run(41, 77, resumed_from=40, coverage=FULL) + run(61, 100, resumed_from=60,
                                                                          coverage=format_restored(9, 9, 60))
    r2 = judge(two)
    assert r2.num_segments == 3 and r2.resume_step == 60 and r2.verdict == "continuous"


@pytest.mark.parametrize("own_restore_line", [True, False])
def test_a_coverage_line_printed_after_the_first_step_is_no_second_resume(own_restore_line: bool) -> None:
    """stderr read after stdout's first step line (two pipes): still one resume."""
    lines = run(1, 57) + run(41, 90, resumed_from=40, coverage=FULL, late_coverage=True,
                             own_restore_line=own_restore_line)
    r = judge(lines)
    assert r.num_segments == 2 and r.resume_step == 40 and r.first_resumed_step == 41
    assert r.verdict == "continuous"
    assert r.checks["restore_coverage"]["complete"] is True


def test_a_restore_line_of_another_step_after_the_first_step_is_a_new_resume() -> None:
    """Only a line naming the step the run resumed from is read as late; one naming
    another step starts a new run there (and its counter that goes on is skipped steps)."""
    lines = run(1, 57) + run(41, 90, resumed_from=40, coverage=format_restored(412, 412, 20), late_coverage=True)
    r = judge(lines)
    assert r.num_segments == 3 and r.resume_step == 20 and r.first_resumed_step == 42
    assert r.verdict == "skipped-steps"


def test_in_the_json_of_watch() -> None:
    result = watch_lines(run(1, 57) + run(41, 90, resumed_from=40, coverage=PARTIAL), stop_when_decided=False)
    doc = result.to_json()
    assert PARTIAL_RESTORE in doc["note_codes"]
    assert doc["checks"]["restore_coverage"]["restored"] == 410
