"""Rules of the open-world evaluation's round 9b (issue 23, helper watch9b), each on small lines written
here: Lightning's RichProgressBar captured in a file (the batches column ``N/T`` followed by ``elapsed •
remaining``, ``logtokens``; named ``lightning``, not ``keras``, ``logplan``), and a run's history printed
again after every restore line of a log of several sessions (``reprint``). The corpus of these families
is tests/fixtures/losslogs_openworld (``ow_rich_bar_*``, ``ow_notes_sessions_*``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.logevents import EPOCH_BATCH_AXIS, LossPoint
from ckptctl.core.watch.logplan import dialect
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.core.watch.model import CONTINUOUS, REPLAYED, SPIKE
from ckptctl.ops.watch import watch_lines, watch_log

BOTH = pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
FIXTURES = Path(__file__).parent / "fixtures" / "losslogs_openworld"
BAR = "\u2501" * 12 + "\u2578" + "\u2501" * 27


def _points(lines: list[str], fast: bool) -> list[LossPoint]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


def _loss(step: int) -> float:
    return 1.5 + 2.0 / (1 + step / 300) + 0.01 * math.sin(step / 7)


def _rich(epoch: int, batch: int, loss: float) -> str:
    return f"Epoch {epoch}/9 {BAR} {batch}/400 0:01:{batch % 60:02d} \u2022 0:02:03 3.10it/s v_num: 0 train_loss: {loss:.4f}"


def test_a_counter_before_elapsed_and_remaining_is_the_batch_a_date_prefix_is_not() -> None:
    assert lt.tokenize(_rich(2, 120, 1.5)).counter == (120, 400)
    assert lt.tokenize("Epoch 0/999 \u2501\u2501 0/1250 0:00:00 \u2022 -:--:-- 0.00it/s").counter == (0, 1250)
    # a logger's date and time of day before the message: no counter (no bullet after the time)
    assert lt.tokenize("08/18 11:56:34 iter 200 loss 2.31").counter is None
    assert lt.tokenize("[11/21 01:57:00] epoch 3 loss 0.52").counter is None


def test_the_rich_bar_is_lightnings_and_keras_bar_stays_keras() -> None:
    assert dialect(_rich(0, 40, 2.0)) == "lightning"
    assert dialect("Epoch 0/9 \u2578" + "\u2501" * 39 + " 0/400 0:00:00 \u2022 -:--:-- 0.00it/s") == "lightning"
    assert dialect("1875/1875 " + "\u2501" * 20 + " 3s 1ms/step - accuracy: 0.8712 - loss: 0.4312") == "keras"


@BOTH
def test_rich_bar_lines_are_points_on_the_epoch_batch_axis(fast: bool) -> None:
    lines = [_rich(e, b, _loss(e * 400 + b)) for e in range(3) for b in range(20, 401, 20)]
    pts = _points(lines, fast)
    assert [p.step for p in pts] == [e * 400 + b for e in range(3) for b in range(20, 401, 20)]
    assert all(p.axis == EPOCH_BATCH_AXIS and p.epoch_len == 400 for p in pts)
    assert pts[5].loss == pytest.approx(round(_loss(120), 4))


def test_a_rich_bar_resume_is_judged_at_the_restored_epoch() -> None:
    def run(f: float) -> list[str]:
        before = [_rich(e, b, _loss(e * 400 + b)) for e in range(4) for b in range(20, 401, 20)]
        after = [_rich(e, b, _loss(e * 400 + b) * f) for e in range(4, 6) for b in range(20, 401, 20)]
        return [*before, "Restored all states from the checkpoint at /ckpt/epoch=3-step=1600.ckpt", *after]

    smooth = watch_lines(run(1.0), stop_when_decided=False)
    assert smooth.verdict == CONTINUOUS
    assert smooth.report.resume_step == 1600
    assert watch_lines(run(1.5), stop_when_decided=False).verdict == SPIKE


def _table(steps: range, values: dict[int, float]) -> list[str]:
    return ["| Step | Train | Val |", "|------|-------|-----|", *(f"| {s} | {values[s]:.3f} | {values[s] + 0.4:.3f} |" for s in steps)]


def _sessions(third: dict[int, float], start: int = 50) -> list[str]:
    first = {s: _loss(s) for s in range(50, 1601, 50)}
    return ["## session 2", "Resuming from `checkpoint-1000`.", *_table(range(50, 1601, 50), first), "",
            "## session 3", "Resuming from `checkpoint-1500`.", *_table(range(start, 2601, 50), third)]


def test_history_reprinted_after_every_restore_line_is_no_replay() -> None:
    copied = {s: _loss(s) for s in range(50, 2601, 50)}
    result = watch_lines(_sessions(copied), stop_when_decided=False)
    assert result.verdict == CONTINUOUS
    assert result.report.resume_step == 1500
    assert sum("history printed" in n for n in result.report.notes[0].split("; ")) == 2
    jumped = {s: _loss(s) * (1.6 if s > 1500 else 1.0) for s in range(50, 2601, 50)}
    assert watch_lines(_sessions(jumped), stop_when_decided=False).verdict == SPIKE


def test_rows_trained_again_are_no_reprint() -> None:
    # the third session's rows up to the checkpoint differ from those printed before: a loop run again
    again = {s: _loss(s) * (1.03 if s <= 1500 else 1.0) for s in range(50, 2601, 50)}
    result = watch_lines(_sessions(again), stop_when_decided=False)
    assert result.verdict == REPLAYED
    # one row alike is not enough to call the rest a copy
    one = {s: (_loss(s) if s == 50 else _loss(s) * 1.03) for s in range(50, 2601, 50)}
    assert watch_lines(_sessions(one), stop_when_decided=False).verdict == REPLAYED


@pytest.mark.parametrize(
    ("name", "verdict", "step"),
    [("ow_rich_bar_ok.log", CONTINUOUS, 2000), ("ow_rich_bar_spike.log", SPIKE, 2000),
     ("ow_notes_sessions_ok.log", CONTINUOUS, 1500), ("ow_notes_sessions_spike.log", SPIKE, 1500),
     ("ow_notes_sessions_replayed.log", REPLAYED, 1500)],
)
def test_the_round_9b_fixtures(name: str, verdict: str, step: int) -> None:
    result = watch_log(str(FIXTURES / name))
    assert result.verdict == verdict
    assert result.report.resume_step == step


def test_a_deterministic_run_resumed_from_an_earlier_step_is_no_reprint() -> None:
    # the rows after the restore line repeat the values printed before, but from step 1050 on (an
    # earlier checkpoint, trained the same way again), not from the log's first row: a replay
    first = {s: _loss(s) for s in range(50, 1601, 50)}
    lines = ["Resuming from `checkpoint-1000`.", *_table(range(50, 1601, 50), first), "",
             "Resuming from `checkpoint-1500`.", *_table(range(1050, 2601, 50), {s: _loss(s) for s in range(50, 2601, 50)})]
    result = watch_lines(lines, stop_when_decided=False)
    assert result.verdict == REPLAYED
