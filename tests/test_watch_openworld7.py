"""Rules of the open-world evaluation's round 7 (issue 23, helper watch7: segmentation, super-resolution,
NLP-pipeline and MXNet producers), each on small lines written here: an epoch heading that heads the record
on the lines below it (``epochhead``), a table header whose column names hold a blank (``logtables``),
MXNet's batch range and ``lossvalue`` key, a batch counter ``N/T`` ended by a comma, ``l_*`` loss
components (``logkeys``), a restore line naming the epoch to run next beside a path's epoch
(``logevents``). Both read paths (the fast path and the general one) are checked. The corpus of these
families is tests/fixtures/losslogs_openworld (``ow_epoch_heading_*``, ``ow_wide_header_table_*``,
``ow_mxnet_range_lossvalue_*``, ``ow_comma_counter_*``, ``ow_basicsr_components_*``; tests/test_watch_sources.py
scores it)."""

from __future__ import annotations

import math

import pytest

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch.epochhead import is_epoch_heading
from ckptctl.core.watch.logevents import EPOCH_AXIS, EPOCH_BATCH_AXIS, LossPoint, ResumeMarker
from ckptctl.core.watch.logtables import table_header
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.core.watch.model import CONTINUOUS, SCHEDULE_RESET, SPIKE
from ckptctl.ops.watch import watch_lines

BOTH = pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])


def _points(lines: list[str], fast: bool) -> list[LossPoint]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


# -- an epoch heading ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "heading"),
    [
        ("2026-01-02 03:04:05.678901: Epoch 12", True),
        ("epoch:  6", True),
        ("INFO:root:Epoch #3", True),
        ("| EPOCH 40", True),
        ("saving the model at epoch 12", False),  # prose ending in an epoch
        ("Epoch 3/20", False),  # an epoch of a total (Keras's header: its own rule)
        ("Epoch 3 loss 2.5", False),
        ("epoch 2.5", False),
    ],
)
def test_an_epoch_heading_is_the_epoch_alone_after_a_prefix(body: str, heading: bool) -> None:
    assert is_epoch_heading(body) is heading


def _heading_blocks(epochs: range, *, lr0: float = 0.01, restart_lr: bool = False, jump: float = 0.0) -> list[str]:
    out = []
    for e in epochs:
        lr = lr0 * (1 - (e - epochs[0] if restart_lr else e) / 100) ** 0.9
        loss = -0.2 - 0.5 * (1 - math.exp(-e / 15)) + 0.004 * math.sin(e * 1.7) + jump * math.exp(-(e - epochs[0]) / 3)
        out += [f"2026-01-02 10:{e % 60:02d}:00.000001: ", f"2026-01-02 10:{e % 60:02d}:00.000002: Epoch {e}",
                f"2026-01-02 10:{e % 60:02d}:00.000003: Current learning rate: {lr:.5f}",
                f"2026-01-02 10:{e % 60:02d}:30.000004: train_loss {loss:.4f}",
                f"2026-01-02 10:{e % 60:02d}:31.000005: val_loss {loss - 0.02:.4f}",
                f"2026-01-02 10:{e % 60:02d}:31.000006: Epoch time: 31.{e % 10} s"]
    return out


@BOTH
def test_an_epoch_heading_heads_the_record_below_it(fast: bool) -> None:
    got = _points(_heading_blocks(range(0, 30)), fast)
    assert [p.step for p in got] == list(range(0, 30))
    assert all(p.axis == EPOCH_AXIS for p in got)
    assert got[3].loss == pytest.approx(-0.2 - 0.5 * (1 - math.exp(-3 / 15)) + 0.004 * math.sin(3 * 1.7), abs=1e-4)
    assert got[3].metrics.get(lk.LR) == pytest.approx(round(0.01 * (1 - 3 / 100) ** 0.9, 5))  # the line before the loss joins


@BOTH
def test_prose_ending_in_an_epoch_heads_nothing(fast: bool) -> None:
    lines = []
    for e in range(0, 20):
        lines += [f"saving the model at epoch {e}", f"train_loss {1.0 - e / 100:.4f}"]
    assert _points(lines, fast) == []


def test_an_epoch_heading_log_resumes_on_its_epochs() -> None:
    before = _heading_blocks(range(0, 38))
    relaunch = ["srun: error: node-3: task 0: Killed", "2026-01-02 12:00:00.000001: Loading checkpoint checkpoint_latest.pth, continuing at epoch 31"]
    ok = watch_lines([*before, *relaunch, *_heading_blocks(range(31, 60))])
    assert ok.verdict == CONTINUOUS
    assert ok.report.resume_step == 31
    assert watch_lines([*before, *relaunch, *_heading_blocks(range(31, 60), jump=0.3)]).verdict == SPIKE
    # the learning rate joined each epoch's record: a schedule started over is seen
    assert watch_lines([*before, *relaunch, *_heading_blocks(range(31, 60), restart_lr=True)]).verdict == SCHEDULE_RESET


# -- a table header with two-word column names -----------------------------------------------


def test_a_header_split_at_blank_runs_when_its_names_hold_a_blank() -> None:
    assert table_header("E    #       LOSS TOK2VEC  LOSS NER  ENTS_F  SCORE ") == (
        "epoch", "step", "loss_tok2vec", "loss_ner", "ents_f", "score")
    assert table_header("Epoch  Train Loss  Val Loss") == ("epoch", "train_loss", "val_loss")
    assert table_header("step loss lr") == ("step", "loss", "lr")  # single blanks only: a blank ends a name
    # identifiers set apart by single blanks and by runs alike: each is a name of its own
    assert table_header("current_step max_steps loss   lr       epoch") == ("current_step", "max_steps", "loss", "lr", "epoch")
    assert table_header("E  LOSS NER  SCORE") is None  # no step: "E" is an epoch only beside "#"


@BOTH
def test_rows_under_a_two_word_header(fast: bool) -> None:
    lines = ["E    #       LOSS TOK2VEC  LOSS NER  ENTS_F  SCORE ", "---  ------  ------------  --------  ------  ------"]
    lines += [f"{s // 1000:>3d}  {s:>6d}  {30 / (1 + s / 500):>12.2f}  {900 / (1 + s / 500):>8.2f}  {80 + s / 500:>6.2f}  {0.8:>6.2f}"
              for s in range(0, 3001, 200)]
    got = _points(lines, fast)
    assert [p.step for p in got] == list(range(0, 3001, 200))
    assert got[1].loss == pytest.approx(round(30 / 1.4, 2))


# -- MXNet's batch range, lossvalue; a comma-ended counter; l_* components ---------------------


def test_keys_glued_or_abbreviated_that_name_a_loss() -> None:
    assert lk.classify_key("lossvalue") == (lk.LOSS, 3)
    assert lk.classify_key("l_pix") == (lk.LOSS, 3)
    assert lk.classify_key("l_g_gan") == (lk.LOSS, 3)
    assert lk.classify_key("l1") is None
    assert lk.classify_key("l_1") is None
    assert lk.classify_key("logit_scale") is None  # open_clip's temperature, no loss scale
    assert lk.classify_key("grad_scale") == (lk.LOSS_SCALE, 1)


@BOTH
def test_mxnet_batch_range_and_lossvalue(fast: bool) -> None:
    lines = [f"INFO:root:Epoch[1] Batch [{b - 20}-{b}]\tSpeed: {1400 + b % 7:.2f} samples/sec\tacc=0.0100\tlossvalue={40 - b / 100:.6f}"
             for b in range(20, 401, 20)]
    got = _points(lines, fast)
    assert [p.step for p in got] == list(range(20, 401, 20))  # the range's end
    assert [p.loss for p in got] == pytest.approx([40 - b / 100 for b in range(20, 401, 20)])


@BOTH
def test_a_batch_counter_ended_by_a_comma_counts_within_the_epoch(fast: bool) -> None:
    lines = [f"2026-01-02 03:04:05,678 - root - INFO - Epoch: {e}, Batch: {b}/600, Loss={1.0 - (e * 600 + b) / 5000:.4f}, LR=0.00001000"
             for e in range(0, 3) for b in range(100, 601, 100)]
    got = _points(lines, fast)
    assert [p.step for p in got] == [e * 600 + b for e in range(0, 3) for b in range(100, 601, 100)]
    assert all(p.axis == EPOCH_BATCH_AXIS for p in got)


@BOTH
def test_l_components_with_no_total_are_the_loss(fast: bool) -> None:
    lines = [f"INFO: [train..][epoch:  0, iter:{it:8,d}, lr:(1.000e-04,)] [eta: 1 day, 2:03:04, time (data): 0.312 (0.004)] "
             f"l_pix: {0.05 - it / 1e6:.4e} l_percep: 2.1000e+00" for it in range(100, 2001, 100)]
    got = _points(lines, fast)
    assert [p.step for p in got] == list(range(100, 2001, 100))
    assert [p.loss for p in got] == pytest.approx([0.05 - it / 1e6 for it in range(100, 2001, 100)], rel=1e-3)


# -- a restore line naming the next epoch beside a path's -------------------------------------


@pytest.mark.parametrize(
    ("line", "epoch"),
    [
        ("INFO - Loaded parameters from output/epoch_1.params, resuming at epoch 2", 2),
        ("INFO - Loaded checkpoint output/epoch_7.pt", 7),
        ("Loaded checkpoint epoch_4.pth, continuing at epoch 5", 5),
    ],
)
def test_the_epoch_a_restore_line_names_next_wins_over_its_paths(line: str, epoch: int) -> None:
    markers = [e for e in parse_lines([line]) if isinstance(e, ResumeMarker)]
    assert [m.epoch for m in markers] == [epoch]
