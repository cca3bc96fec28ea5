"""The data-position line (``ckptctl: data position ...``) and the ``data-position-mismatch`` check.

The training library will log these lines (docs/watch.md gives the format); the tests use
lines in that format, built with ``format_data_position`` and written out by hand.
"""

from __future__ import annotations

import pytest

from ckptctl.core.recover.decisions import Attempt, classify_verdict, decide_after_attempt
from ckptctl.core.watch.datapos import format_data_position, parse_data_position
from ckptctl.core.watch.losslog import LossLogParser
from ckptctl.core.watch.model import (
    DATA_POSITION_MISMATCH,
    EARLIER_DATA_POSITION_MISMATCH,
    WatchReport,
)
from ckptctl.core.watch.session import WatchSession
from ckptctl.ops.watch import watch_lines

# -- the line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("ckptctl: data position recorded step=500 epoch=1 index=468", ("recorded", 500, 1, 468, None, None)),
        ("ckptctl: data position first-batch step=500 epoch=1 index=468", ("first-batch", 500, 1, 468, None, None)),
        # a logging prefix, a timestamp, torchrun's rank tag: anything before "ckptctl:"
        ("WARNING:ckptctl.training:ckptctl: data position recorded step=20 epoch=0 index=20",
         ("recorded", 20, 0, 20, None, None)),
        ("2025-03-02 04:11:52,118 ckptctl: data position first-batch step=20 epoch=0 index=20",
         ("first-batch", 20, 0, 20, None, None)),
        ("[default1]:ckptctl: data position first-batch step=20 epoch=0 index=20", ("first-batch", 20, 0, 20, None, 1)),
        # keys in any order, unknown keys ignored, a digest, a rank
        ("ckptctl: data position recorded index=3 step=9 epoch=2 loader=sampler", ("recorded", 9, 2, 3, None, None)),
        ("ckptctl: data position recorded step=9 digest=9F3A00 rank=3", ("recorded", 9, None, None, "9f3a00", 3)),
        ("ckptctl: data position recorded step=9 epoch=0 index=1 digest=ab", ("recorded", 9, 0, 1, "ab", None)),
    ],
)  # fmt: skip
def test_a_data_position_line_is_read(line: str, want: tuple[object, ...]) -> None:
    p = parse_data_position(line, 7)
    assert p is not None
    assert (p.kind, p.step, p.epoch, p.index, p.digest, p.rank) == want
    assert p.line_no == 7 and p.source == "log"


@pytest.mark.parametrize(
    "line",
    [
        "ckptctl: data position recorded epoch=1 index=468",  # no step
        "ckptctl: data position recorded step=5 epoch=1",  # epoch without index
        "ckptctl: data position recorded step=5",  # no position at all
        "ckptctl: data position recorded step=5 digest=xyz",  # not hexadecimal
        "ckptctl: data position recorded step=-5 epoch=0 index=0",
        "ckptctl: data position moved step=5 epoch=0 index=0",  # not a kind
        "ckptctl: data positions recorded step=5 epoch=0 index=0",
        "ckptctl-train step=5 loss=2.0 rank=0",
        "",
    ],
)
def test_anything_else_is_not_a_data_position(line: str) -> None:
    assert parse_data_position(line, 1) is None


def test_the_formatter_writes_what_the_reader_reads() -> None:
    line = format_data_position("recorded", 500, epoch=1, index=468)
    assert line == "ckptctl: data position recorded step=500 epoch=1 index=468"
    assert format_data_position("first-batch", 7, digest="AB01", rank=2) == (
        "ckptctl: data position first-batch step=7 digest=ab01 rank=2"
    )
    for kwargs in ({"epoch": 1, "index": 2}, {"digest": "ff"}, {"epoch": 0, "index": 0, "digest": "1", "rank": 0}):
        for kind in ("recorded", "first-batch"):
            p = parse_data_position(format_data_position(kind, 3, **kwargs), 1)  # type: ignore[arg-type]
            assert p is not None and p.kind == kind and p.step == 3
            assert (p.epoch, p.index) == (kwargs.get("epoch"), kwargs.get("index"))
    with pytest.raises(ValueError, match="kind"):
        format_data_position("saved", 1, epoch=0, index=0)
    with pytest.raises(ValueError, match="together"):
        format_data_position("recorded", 1, epoch=0)
    with pytest.raises(ValueError, match="digest"):
        format_data_position("recorded", 1)
    with pytest.raises(ValueError, match="hexadecimal"):
        format_data_position("recorded", 1, digest="not hex")


def test_the_loss_reader_takes_the_line_for_nothing() -> None:
    """No loss point, no restore or save marker: the line's words avoid both."""
    parser = LossLogParser()
    for kind in ("recorded", "first-batch"):
        line = format_data_position(kind, 500, epoch=1, index=468)
        assert parser.feed(line) == []
        assert parser.feed("WARNING:ckptctl.training:" + line) == []


# -- the check --------------------------------------------------------------------------------

BATCHES_PER_EPOCH = 32


def position(step: int) -> tuple[int, int]:
    return divmod(step, BATCHES_PER_EPOCH)


def run(
    first: int, last: int, *, save_every: int = 20, resumed_from: int | None = None,
    start_at: tuple[int, int] | None = None,
) -> list[str]:
    """One launch of a trainer that logs a loss per step and its data position at each save
    (and, resumed, at its first batch)."""
    lines = []
    shift = 0  # batches the data stream is behind the step counter (0: restored right)
    if resumed_from is not None:
        lines.append(f"ckptctl-train resumed from=/ckpt/step_{resumed_from} step={resumed_from} world_size=2")
        epoch, index = start_at if start_at is not None else position(resumed_from)
        shift = resumed_from - (epoch * BATCHES_PER_EPOCH + index)
        lines.append(format_data_position("first-batch", resumed_from, epoch=epoch, index=index))
    for step in range(first, last + 1):
        lines.append(f"ckptctl-train step={step} loss={2.0 + 5.0 / step + 0.01 * (step % 7)!r} rank=0")
        if step % save_every == 0:
            epoch, index = position(step - shift)
            lines.append(format_data_position("recorded", step, epoch=epoch, index=index))
    return lines


def judge(lines: list[str]) -> WatchReport:
    session = WatchSession()
    for line in lines:
        session.feed(line, evaluate=False)
    session.end_log()
    return session.evaluate(final=True)


def test_a_resume_that_continues_the_data_position_is_said_so() -> None:
    r = judge(run(1, 57) + run(41, 90, resumed_from=40))
    assert r.verdict == "continuous"
    dp = r.checks["data_position"]
    assert dp["ok"] is True and dp["step"] == 40 and dp["num_compared"] == 1
    assert dp["recorded"]["epoch"] == 1 and dp["recorded"]["index"] == 8
    assert any("is where the checkpoint of step 40 recorded the data loader" in n for n in r.notes)


def test_a_resume_that_starts_the_data_over_is_a_mismatch() -> None:
    lines = run(1, 57) + run(41, 90, resumed_from=40, start_at=(0, 0))
    r = judge(lines)
    assert r.verdict == DATA_POSITION_MISMATCH and r.decided
    f = r.findings[0]
    assert f.verdict == DATA_POSITION_MISMATCH and f.step == 40
    assert "epoch 0 index 0" in f.message and "epoch 1 index 8" in f.message
    assert f.line_no == lines.index(format_data_position("first-batch", 40, epoch=0, index=0)) + 1
    assert r.checks["data_position"]["ok"] is False
    assert classify_verdict(r.verdict) == "bad"
    nxt = decide_after_attempt(
        [Attempt(number=1, checkpoint_step=40, checkpoint_path="/ckpt/step_40", exit_code=0, watch_verdict=r.verdict)],
        max_attempts=3,
    )
    assert nxt.kind == "rollback-and-resume"


def test_the_second_resume_is_checked_as_the_first() -> None:
    first = run(1, 57)
    second = run(41, 77, resumed_from=40)  # restored right
    third_ok = run(61, 100, resumed_from=60)
    third_reset = run(61, 100, resumed_from=60, start_at=(0, 0))  # restored on the first resume only
    assert judge(first + second + third_ok).verdict == "continuous"
    bad = judge(first + second + third_reset)
    assert bad.verdict == DATA_POSITION_MISMATCH
    assert bad.checks["data_position"]["step"] == 60 and bad.checks["data_position"]["earlier_mismatches"] == 0


def test_an_earlier_resume_that_did_not_continue_is_a_note() -> None:
    lines = run(1, 57) + run(41, 77, resumed_from=40, start_at=(0, 0)) + run(61, 100, resumed_from=60, start_at=(0, 20))
    r = judge(lines)
    # the resume judged (from 60) continues from the checkpoint of 60 (written after the bad one)
    assert r.verdict == "continuous"
    assert EARLIER_DATA_POSITION_MISMATCH in r.note_codes
    assert r.checks["data_position"]["ok"] is True and r.checks["data_position"]["earlier_mismatches"] == 1


def test_the_latest_record_of_a_step_counts() -> None:
    """A fall-back re-saves a step: the position recorded last for it is the one on disk."""
    lines = run(1, 45) + run(21, 57, resumed_from=20, start_at=(0, 0)) + run(41, 90, resumed_from=40)
    # the first resume started the data over, so the second save of step 40 recorded (0, 20)
    r = judge(lines)
    assert r.checks["data_position"]["recorded"]["index"] == 20
    assert r.verdict == DATA_POSITION_MISMATCH  # the judged resume came back at (1, 8)
    assert EARLIER_DATA_POSITION_MISMATCH in r.note_codes
    # a resume that continues what was recorded last is right, whatever happened before
    again = run(1, 45) + run(21, 57, resumed_from=20, start_at=(0, 0)) + run(41, 90, resumed_from=40, start_at=(0, 20))
    assert judge(again).verdict == "continuous"


def test_positions_in_a_separate_baseline_file() -> None:
    baseline = run(1, 57)
    result = watch_lines(run(41, 90, resumed_from=40, start_at=(1, 9)), baseline_lines=baseline)
    assert result.verdict == DATA_POSITION_MISMATCH
    assert "of the baseline" in result.report.findings[0].message
    assert result.to_json()["checks"]["data_position"]["recorded"]["source"] == "baseline"


def test_per_rank_positions_and_digests() -> None:
    lines = [*run(1, 57)]
    for rank in (0, 1):
        lines.append(format_data_position("recorded", 40, digest=f"a{rank}", rank=rank))
    lines += run(41, 90, resumed_from=40)
    lines.insert(lines.index(next(x for x in lines if "resumed" in x)) + 1,
                 format_data_position("first-batch", 40, digest="a0", rank=0))
    ok = judge(lines)
    assert ok.verdict == "continuous"
    bad = list(lines)
    bad.insert(bad.index(format_data_position("first-batch", 40, digest="a0", rank=0)) + 1,
               format_data_position("first-batch", 40, digest="ff", rank=1))
    r = judge(bad)
    assert r.verdict == DATA_POSITION_MISMATCH and "rank 1" in r.findings[0].message
    assert "digest ff" in r.findings[0].message and "digest a1" in r.findings[0].message


def test_no_recorded_position_for_the_step_is_not_checked() -> None:
    lines = run(1, 57, save_every=1000) + run(41, 90, resumed_from=40)
    r = judge(lines)
    assert r.verdict == "continuous"
    assert r.checks["data_position"]["ok"] is None and r.checks["data_position"]["num_compared"] == 0
    assert any("no position was recorded for step 40" in n and "not checked" in n for n in r.notes)


def test_a_log_without_data_position_lines_has_no_such_check() -> None:
    lines = [x for x in run(1, 57) + run(41, 90, resumed_from=40) if "data position" not in x]
    r = judge(lines)
    assert r.verdict == "continuous" and "data_position" not in r.checks
