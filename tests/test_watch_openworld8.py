"""Rules of the open-world evaluation's round 8 (issue 23, helper watch8), each on small lines written
here: box-drawn tables of splits under an epoch heading (``logsplits``), JSON lines with one record per
epoch and no step (``logplan.dict_record``), minibatch ranges counted within the epoch (``leadstep``).
Both read paths (the fast path and the general one) are checked. The corpus of these families is
tests/fixtures/losslogs_openworld (``ow_split_tables_*``, ``ow_json_epochs_*``, ``ow_minibatch_ranges_*``;
tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import math

import pytest

from ckptctl.core.watch.logevents import EPOCH_AXIS, LossPoint
from ckptctl.core.watch.logsplits import split_header
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.core.watch.model import CONTINUOUS, SPIKE
from ckptctl.ops.watch import watch_lines

BOTH = pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])


def _points(lines: list[str], fast: bool) -> list[LossPoint]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


def _curve(x: float) -> float:
    return 0.5 + 2.0 / (1 + x / 4)


# -- box-drawn tables of splits ----------------------------------------------------------------

V = "\u2502"
TOP = "\u2552" + "\u2550" * 8 + "\u2564" + "\u2550" * 8 + "\u2564" + "\u2550" * 7 + "\u2555"
HEAD = "\u255e" + "\u2550" * 8 + "\u256a" + "\u2550" * 8 + "\u256a" + "\u2550" * 7 + "\u2561"
MID = "\u251c" + "\u2500" * 8 + "\u253c" + "\u2500" * 8 + "\u253c" + "\u2500" * 7 + "\u2524"
BOTTOM = "\u2558" + "\u2550" * 8 + "\u2567" + "\u2550" * 8 + "\u2567" + "\u2550" * 7 + "\u255b"


def _table(name: str, train: float, *, prefix: str = "") -> list[str]:
    return [prefix + TOP, f"{V} {name:<6} {V}   loss {V}   mae {V}", HEAD, f"{V} train  {V} {train:6.4f} {V} 0.812 {V}", MID,
            f"{V} vali   {V} {train * 1.2:6.4f} {V} 0.901 {V}", MID, f"{V} test   {V} {train * 1.3:6.4f} {V} 0.933 {V}", BOTTOM]


def _split_epochs(epochs: range, *, f: float = 1.0) -> list[str]:
    out = []
    for e in epochs:
        loss = _curve(e) * (1 + 0.01 * math.sin(5 * e)) * (f if e == epochs[0] else 1 + (f - 1) * 0.6)
        out += [f"Epoch {e:3d}", "Training: 100%|#####| 64/64 [00:03<00:00, 19.01it/s]",
                "Evaluation train: 100%|#####| 64/64 [00:00<00:00, 88.10it/s]", "Evaluation vali : 100%|#####| 8/8 [00:00<00:00, 90.00it/s]",
                f"Took {3 + e % 4}.5012s", *_table("price", loss, prefix="INFO:fit:"), *_table("price", loss),
                *_table("combined", loss * 0.97), "Validation loss on combined improved, model saved", ""]
    return out


def test_a_split_table_header_names_a_loss_and_no_position() -> None:
    assert split_header(f"{V} price  {V}   loss {V}   mae {V}") == ("", "loss", "mae")
    # the rows' own header with a step column is a table of records (logtables), not of splits
    assert split_header(f"{V} split {V} step {V} loss {V}") is None
    # no loss among the columns, a number in a cell, one cell only: no split table
    assert split_header(f"{V} price  {V}   accuracy {V}   r2 {V}") is None
    assert split_header(f"{V} train  {V} 0.5012 {V}") is None
    assert split_header(f"{V}step loss lr{V}") is None


@BOTH
def test_the_train_row_under_an_epoch_heading_is_the_epochs_loss(fast: bool) -> None:
    pts = _points(_split_epochs(range(1, 9)), fast)
    # one point per epoch: the first train row (the table printed again, the combined table add nothing)
    assert [p.step for p in pts] == list(range(1, 9))
    assert {p.axis for p in pts} == {EPOCH_AXIS}
    assert pts[0].loss == pytest.approx(round(_curve(1) * (1 + 0.01 * math.sin(5)), 4))


@BOTH
def test_split_rows_far_from_any_heading_are_no_points(fast: bool) -> None:
    # a table of splits printed once at the end (a test report), no epoch heading above it
    lines = ["Finished training, evaluating on all splits", *_table("price", 0.75)]
    assert _points(lines, fast) == []
    # the heading too far above the table: no record of it
    assert _points(["Epoch   3", *(f"progress note {i}" for i in range(70)), *_table("price", 0.75)], fast) == []


def test_a_relaunch_of_split_tables_is_judged() -> None:
    before = [*_split_epochs(range(1, 16)), "Epoch  16", "Training:  30%|##   | 19/64 [00:01<00:02, 19.01it/s]", "Killed"]
    relaunch = ["Resuming training of model: results/run_0/model"]
    ok = watch_lines([*before, *relaunch, *_split_epochs(range(16, 30))])
    assert ok.verdict == CONTINUOUS
    assert ok.report.first_resumed_step == 16
    assert watch_lines([*before, *relaunch, *_split_epochs(range(16, 30), f=1.5)]).verdict == SPIKE


# -- JSON lines, one per epoch -----------------------------------------------------------------


def _json_epoch(e: int, f: float = 1.0) -> str:
    loss = (3.0 + _curve(e)) * (1 + 0.004 * math.sin(7 * e)) * f
    test = f', "test_loss": {loss / 3:.6f}, "test_acc1": {50 + e / 2:.4f}' if e % 4 == 3 else ""
    return f'{{"train_lr": {1e-3 * (1 - e / 400):.8f}, "train_loss": {loss:.6f}{test}, "epoch": {e}, "n_parameters": 5000000}}'


@BOTH
def test_a_json_line_per_epoch_is_a_point_on_the_epoch_axis(fast: bool) -> None:
    pts = _points([_json_epoch(e) for e in range(0, 12)], fast)
    # every line, those carrying the epoch's test stats along too
    assert [p.step for p in pts] == list(range(0, 12))
    assert {p.axis for p in pts} == {EPOCH_AXIS}
    assert pts[3].metrics["lr"] == pytest.approx(1e-3 * (1 - 3 / 400))


@BOTH
def test_json_lines_without_a_step_need_a_whole_epoch_and_a_named_training_loss(fast: bool) -> None:
    # a fractional epoch (no record per epoch), an evaluation's dict, an unnamed loss component: no point
    assert _points(['{"train_loss": 2.5, "epoch": 0.25}', '{"train_loss": 2.4, "epoch": 0.5}'], fast) == []
    assert _points(['{"test_loss": 1.5, "test_acc1": 61.2, "epoch": 3}', '{"test_loss": 1.4, "test_acc1": 62.0, "epoch": 4}'], fast) == []
    assert _points(['{"loss_box": 0.5, "loss_cls": 0.2, "epoch": 3}', '{"loss_box": 0.4, "loss_cls": 0.2, "epoch": 4}'], fast) == []
    # a JSON line with its step keeps the step axis
    assert [p.step for p in _points(['{"train_loss": 2.5, "epoch": 1, "step": 100}', '{"train_loss": 2.4, "epoch": 1, "step": 200}'], fast)] == [100, 200]


def test_a_relaunch_appending_json_epochs_is_judged() -> None:
    before = [_json_epoch(e) for e in range(0, 40)]
    ok = watch_lines([*before, *(_json_epoch(e) for e in range(36, 70))])
    assert ok.verdict == CONTINUOUS
    assert ok.report.first_resumed_step == 36
    jumped = watch_lines([*before, *(_json_epoch(e, 1 + 0.3 * math.exp(-(e - 36) / 5)) for e in range(36, 70))])
    assert jumped.verdict == SPIKE


# -- minibatch ranges --------------------------------------------------------------------------


def _ranges(epochs: range, *, f: float = 1.0, per_epoch: int = 2000, every: int = 400, upto: int | None = None) -> list[str]:
    out = []
    for e in epochs:
        last = upto if upto is not None and e == epochs[-1] else per_epoch
        for b in range(every, last + 1, every):
            loss = _curve(e - 1 + b / per_epoch) * (1 + 0.005 * math.sin(b + e)) * f
            out += [f" Minibatch[{b - every + 1:4d}-{b:4d}]: loss = {loss:.6f} * 3200, metric = {40 - e:.2f}% * 3200;"] * 2
        if last == per_epoch:
            out.append(f"Finished Epoch[{e} of 30]: loss = {_curve(e - 0.5) * f:.6f} * 16000, metric = {40 - e:.2f}% * 16000 98.102s (163.1 samples/s);")
        out.append(f"Finished Evaluation [{e}]: Minibatch[1-25]: metric = {41 - e:.2f}% * 2500;")
    return out


@BOTH
def test_a_minibatch_range_is_a_step_across_epochs(fast: bool) -> None:
    pts = _points(_ranges(range(1, 4)), fast)
    # each range's end, after the minibatches of the finished epochs; each line twice (two workers)
    assert sorted({p.step for p in pts}) == list(range(400, 6001, 400))
    assert pts[0].loss == pytest.approx(round(_curve(0.2) * (1 + 0.005 * math.sin(401)), 6))
    # the epoch summary and the evaluation's range give no point
    assert len(pts) == 2 * 15


def test_a_relaunch_of_minibatch_ranges_is_judged() -> None:
    start = ["Redirecting log to file log_rank0.txt", "Training 1204224 parameters in 12 parameter tensors."]
    before = [*start, *_ranges(range(1, 7)), *_ranges(range(7, 8), upto=1200), "Killed"]
    ok = watch_lines([*before, *start, *_ranges(range(7, 14))])
    assert ok.verdict == CONTINUOUS
    assert ok.report.first_resumed_step == 6 * 2000 + 400
    assert watch_lines([*before, *start, *_ranges(range(7, 14), f=1.4)]).verdict == SPIKE


@BOTH
def test_epoch_summaries_are_the_records_only_when_no_range_is_printed(fast: bool) -> None:
    summaries = [f"Finished Epoch[{e:2d} of 15]: [Training] loss = {_curve(e):.6f} * 6000, metric = 12.00% * 6000 21.0s (285.7 samples/s);"
                 for e in range(1, 7)]
    pts = _points(summaries, fast)
    assert [p.step for p in pts] == list(range(1, 7))
    assert {p.axis for p in pts} == {EPOCH_AXIS}
    # beside ranges (here the older "Finished Epoch [N]" form) a summary only ends the epoch
    lines = []
    for e in range(1, 4):
        lines += [f" Minibatch[{b - 99:4d}-{b:4d}]: loss = {_curve(e + b / 300):.6f} * 640, metric = 9.10% * 640;" for b in (100, 200, 300)]
        lines.append(f"Finished Epoch [{e}]: [Training] loss = {_curve(e + 0.5):.6f} * 1920, metric = 9.1% * 1920 6.094s (315.1 samples per second).")
    assert [p.step for p in _points(lines, fast)] == list(range(100, 901, 100))
