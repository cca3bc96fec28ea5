"""Reader rules for line shapes met in real logs of producers the other corpora lacked (issue 23,
the open-world evaluation): each rule on small logs written here. The corpus of these families
is tests/fixtures/losslogs_openworld (tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import random

import pytest

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.axis import choose_axis
from ckptctl.core.watch.logevents import EPOCH_AXIS, EPOCH_BATCH_AXIS, LossPoint, record_shape
from ckptctl.core.watch.losslog import LossLogParser, parse_lines
from ckptctl.ops.watch import watch_lines


def _tokens(line: str) -> lt.Tokens:
    return lt.tokenize(lt.clean_line(line)[0])


@pytest.mark.parametrize(
    ("line", "counter", "outer"),
    [
        # a logger's date before a time of day is no counter; the bracketed one after the epoch is
        ("08/18 11:56:34 - mmengine - INFO - Epoch(train)  [1][ 10/196]  lr: 3.3333e-04  loss: 6.1887", (10, 196), 1),
        ("07/03 13:04:17 - mmengine - INFO - Epoch(train) [12][  50/480]  lr: 1.0e-02  loss: 2.3", (50, 480), 12),
        ("[11/21 01:57:13] ppdet.engine INFO: Epoch: [0] [ 20/105] learning_rate: 0.000017 loss: 13622.3", (20, 105), 0),
        ("11/21 01:57:13 loss: 2.5 lr: 0.1", None, None),
        # blanks around the slash
        ("| epoch   3 |   200/ 2983 batches | lr 20.00 | ms/batch 45.21 | loss  6.90 | ppl   991.35", (200, 2983), None),
        ("| epoch 010  2000 / 8223 loss=1.27 (1.50), wps=962, wpb=908, bsz=32, lr=0.001", (2000, 8223), None),
        # unchanged: a progress bar, a Keras bar
        (" 45%|####5     | 450/1000 [01:02<01:15,  7.2it/s, loss=2.31]", (450, 1000), None),
        ("120/500 [=====>........] - ETA: 3s - loss: 0.4123", (120, 500), None),
    ],
)
def test_counters_and_dates(line: str, counter: tuple[int, int] | None, outer: int | None) -> None:
    t = _tokens(line)
    assert t.counter == counter
    assert t.counter_epoch == outer


def test_dates_do_not_compose_an_epoch_batch_position() -> None:
    lines = [f"11/23 0{e}:{b // 10:02d}:00 - mmengine - INFO - Epoch(train)  [{e}][{b:>3d}/200]  lr: 1.0e-02  loss: {3 - e / 10 - b / 1000:.4f}"
             for e in (1, 2) for b in range(50, 201, 50)]
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [p.step for p in points] == [250, 300, 350, 400, 450, 500, 550, 600]
    assert {p.axis for p in points} == {EPOCH_BATCH_AXIS}


@pytest.mark.parametrize(
    ("key", "meaning"),
    [("trainloss", (lk.LOSS, 1)), ("validloss", (lk.EVAL, 0)), ("testloss", (lk.EVAL, 0)), ("totalloss", (lk.LOSS, 1)),
     ("gloss", None), ("lossy", None)],
)
def test_loss_glued_to_its_qualifier(key: str, meaning: tuple[str, int] | None) -> None:
    assert lk.classify_key(key) == meaning


def test_glued_loss_lines_are_read() -> None:
    lines = [f"| epoch 004 | {u:07d} updates | words/s    7781| trainloss     {4 - u / 1e5:.2f} | train ppl    13.00" for u in (21028, 22028)]
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [(p.step, p.loss) for p in points] == [(21028, 3.79), (22028, 3.78)]
    assert not lk.is_meaningless("trainloss 3.70")


def test_typographic_quotes_are_straightened() -> None:
    assert lt.clean_line("{\u2018loss\u2019: 1.453, \u2018epoch\u2019: 0.19}")[0] == "{'loss': 1.453, 'epoch': 0.19}"
    assert lt.clean_line("\u201closs\u201d: 2")[0] == '"loss": 2'
    lines = [f"{{\u2018loss\u2019: {1.5 - k / 100:.4f}, \u2018learning_rate\u2019: 4.6e-05, \u2018epoch\u2019: {k / 10:.2f}}}" for k in range(1, 4)]
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [(p.loss, p.epoch, p.fmt) for p in points] == [(1.49, 0.1, "hf"), (1.48, 0.2, "hf"), (1.47, 0.3, "hf")]


def test_keras_verbose2_summary_takes_the_epoch_line_above() -> None:
    lines = ["Train on 50000 samples", "Epoch 1/3", " - 41s - loss: 0.9 - acc: 0.7 - val_loss: 1.0", "Epoch 2/3",
             " - 40s - loss: 0.8 - acc: 0.7 - val_loss: 0.9", "Epoch 00002: saving model to w.02.hdf5", "final loss: 0.7"]
    parser = LossLogParser()
    points = [e for e in parser.feed_lines(lines) + parser.flush() if isinstance(e, LossPoint)]
    assert [(p.step, p.loss, p.axis) for p in points] == [(1, 0.9, EPOCH_AXIS), (2, 0.8, EPOCH_AXIS)]
    assert any("a loss without a step" in s for s in parser.unread_samples)  # one epoch line, one summary


def test_an_axis_that_never_advances_is_no_axis() -> None:
    """A bar ending every epoch at 190/190 (no epoch on its line) beside the epoch's summary line."""
    lines = []
    for e in range(1, 6):
        loss = 2.0 - e / 10
        lines += [f"100%|##########| 190/190 [03:08<00:00,  1.01it/s, train_loss={loss:.3g}]",
                  f"train_logger - epoch: {e}, lr: 1.00e+00 - train loss: {loss:.2e} - valid loss: {loss + 0.2:.3g}, valid CER: {100 / e:.4g}"]
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert sum(p.axis == EPOCH_AXIS for p in points) == 5  # every summary line counts (e-notation or not)
    assert choose_axis(points).name == EPOCH_AXIS


def test_record_shape_ignores_exponents() -> None:
    assert record_shape("valid CER: 1.54e+02, lr 3E-4") == record_shape("valid CER: 35.42, lr 3")
    assert record_shape("release-2e") == "release-e"  # a word's letters stay


def _refits(*, kept: bool, lr_restart: bool = False) -> list[str]:
    """Two fit() calls: the epoch counter starts again at 1; the loss goes on (kept) or starts over."""
    rng = random.Random(7)
    lines = []
    for fit in range(2):
        lines.append("Train on 60000 samples, validate on 10000 samples")
        for e in range(1, 16):
            x = e + (15 if fit and kept else 0)
            lr = 1e-3 if (fit == 0 or lr_restart) and e == 1 else 1e-3 * 0.95 ** x
            loss = (0.3 + 2.0 * (x + 1) ** -0.7) * (1 + rng.gauss(0, 0.005))
            lines += [f"Epoch {e}/15", f" - 80s - loss: {loss:.4f} - lr: {lr:.4e} - val_loss: {loss * 1.2:.4f}"]
    return lines


def test_counter_restart_with_the_loss_going_on_is_a_relative_counter() -> None:
    r = watch_lines(_refits(kept=True), stop_when_decided=False)
    assert r.verdict == "continuous"
    assert "relative-step-counter" in r.report.note_codes


@pytest.mark.parametrize(("kept", "lr_restart", "verdict"), [(True, False, "continuous"), (False, False, "replayed-steps"), (True, True, "replayed-steps")])
def test_a_followed_log_waits_for_the_relative_counter_rule(kept: bool, lr_restart: bool, verdict: str) -> None:
    """Followed line by line and stopped at the first decided verdict (``recover``'s watch): the
    same verdict as the whole log, not a replay decided at the first point after the restart."""
    whole = watch_lines(_refits(kept=kept, lr_restart=lr_restart), stop_when_decided=False)
    followed = watch_lines(_refits(kept=kept, lr_restart=lr_restart), stop_when_decided=True)
    assert whole.verdict == followed.verdict == verdict, followed.report.explanation


def test_counter_restart_from_scratch_stays_a_replay() -> None:
    r = watch_lines(_refits(kept=False), stop_when_decided=False)
    assert r.verdict == "replayed-steps"


def test_counter_restart_with_the_schedule_started_over_stays_a_replay() -> None:
    r = watch_lines(_refits(kept=True, lr_restart=True), stop_when_decided=False)
    assert r.verdict == "replayed-steps"
    assert "relative-step-counter" not in r.report.note_codes



def test_yolo_rows_with_a_bar_after_them() -> None:
    header = "      Epoch    GPU_mem   box_loss   obj_loss   cls_loss  Instances       Size"
    lines = []
    for e in range(3):
        lines += [header, f"      {e}/299      10.2G    0.0{9 - e}632    0.03235    0.03949         23        640: 100% 15/15 [00:08<00:00,  1.79it/s]",
                  "                 Class     Images  Instances          P          R      mAP50   mAP50-95: 100% 1/1 [00:01<00:00,  1.11s/it]",
                  "                   all         51         87     0.0569      0.023     0.0474     0.0197"]
    lines.append("      3/299      10.2G    0.05632    prose here  23   640: 100% 15/15")  # a cell that is no number: no row
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [(p.step, p.loss, p.axis, p.fmt) for p in points] == [
        (0, 0.09632, EPOCH_AXIS, "columns"), (1, 0.08632, EPOCH_AXIS, "columns"), (2, 0.07632, EPOCH_AXIS, "columns")]


# -- round 2 (helper watch23b) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "meaning"),
    [("xent", (lk.LOSS, 2)), ("cost", (lk.LOSS, 2)), ("nll", (lk.LOSS, 2)), ("rmse_train", (lk.LOSS, 2)),
     ("train_cost", (lk.LOSS, 2)), ("cross_entropy", (lk.LOSS, 2)),
     # a time or a batch's cost, an evaluation's error: no loss
     ("time_cost", None), ("batch_cost", None), ("data_cost", None), ("rmse_val", None), ("val_xent", None),
     ("iterations", (lk.STEP, 3)), ("number_of_skipped_iterations", None), ("i", (lk.STEP, 5))],
)
def test_criterion_named_losses_and_step_words(key: str, meaning: tuple[str, int] | None) -> None:
    assert lk.classify_key(key) == meaning


def test_a_key_named_loss_wins_over_a_criterion() -> None:
    line = "[2026-11-23 00:01:50,050 INFO] Step 50/200000; acc:  28.54; ppl:  23.24; xent: 3.15; lr: 0.00020; 5050/265 tok/s;    150 sec"
    points = [e for e in parse_lines([line, line.replace("Step 50/", "Step 100/")]) if isinstance(e, LossPoint)]
    assert [(p.step, p.loss) for p in points] == [(50, 3.15), (100, 3.15)]
    both = "step 7 | cost= 0.9 | loss 2.5"
    assert [(p.step, p.loss) for p in parse_lines([both]) if isinstance(p, LossPoint)] == [(7, 2.5)]


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        ("INFO: 8epoch:train:376-750batch: iter_time=9.8e-04, loss=1.568, lr_0=0.100",
         [("epoch", 8.0), ("iter", 750.0), ("iter_time", 0.00098), ("loss", 1.568), ("lr_0", 0.1)]),
        ("7epoch results: [train] loss=1.613", [("epoch", 7.0), ("loss", 1.613)]),
        # a number followed by "-<digit>" starts a range: no value of its own (a date is no field either)
        ("range: 12-40batch", [("iter", 40.0)]),
    ],
)
def test_counts_glued_before_their_word(line: str, fields: list[tuple[str, float]]) -> None:
    assert [(f.key, f.value) for f in _tokens(line).fields] == fields


def test_espnet2_batch_ranges_compose_with_the_epoch() -> None:
    lines = [f"INFO: {e}epoch:train:{b - 374}-{b}batch: iter_time=2.8e-04, loss={3 - e / 10 - b / 10000:.4f}, lr_0=1.0e-05"
             for e in (1, 2, 3) for b in (375, 750, 1125, 1500)]
    points = [p for p in parse_lines(lines) if isinstance(p, LossPoint)]
    assert [(p.epoch, p.step) for p in points[:2]] == [(1.0, 375), (1.0, 750)]
    # the counter within the epoch starts again at each epoch: composed with it, no restart
    assert choose_axis(points).name == EPOCH_BATCH_AXIS
    assert watch_lines(lines).verdict != "replayed-steps"


def test_loading_data_from_a_pt_file_is_no_restore() -> None:
    data = "[2019-03-21 18:35:23,631 INFO] Loading dataset from data/demo.train.3.pt, number of examples: 66620"
    ckpt = "[2019-03-21 18:35:23,631 INFO] Loading checkpoint from models/model_step_4000.pt"
    assert parse_lines([data]) == []
    (marker,) = parse_lines([ckpt])
    assert getattr(marker, "kind", None) == "restore" and getattr(marker, "step", None) == 4000


@pytest.mark.parametrize(
    ("line", "step", "names_next"),
    [("Initializing from       cv/checkpoint_7000.t7", 7000, False),
     ("[rank0]:[titan] 2026-11-23 03:00:00,010 - root - INFO - Loading the checkpoint at step 400.", 400, False),
     ("[rank0]:[titan] 2026-11-23 03:00:11,322 - root - INFO - Training starts at step 401", 401, True)],
)
def test_restores_in_other_words(line: str, step: int, names_next: bool) -> None:
    (marker,) = parse_lines([line])
    assert (getattr(marker, "kind", None), getattr(marker, "step", None), getattr(marker, "names_next", None)) == ("restore", step, names_next)
    assert parse_lines(["Initializing from scratch"]) == []


def test_epoch_indexed_csv_has_the_epoch_as_position() -> None:
    lines = ["epoch,accuracy,loss,lr,val_accuracy,val_loss", "0,0.50,1.20,0.001,0.60,1.10", "1,0.60,1.00,0.001,0.65,1.00"]
    points = [p for p in parse_lines(lines) if isinstance(p, LossPoint)]
    assert [(p.step, p.loss, p.axis, p.fmt) for p in points] == [(0, 1.2, EPOCH_AXIS, "lightning-csv"), (1, 1.0, EPOCH_AXIS, "lightning-csv")]
    # no usual loss column: the one whose words name the training loss (never the validation's)
    lines = ["Epoch ,LR ,RMSE_Train ,RMSE_Val", "    0 ,0.001 , 1434.09 ,1103.95", "    1 ,0.001 ,  873.64 , 921.05"]
    assert [(p.step, p.loss) for p in parse_lines(lines) if isinstance(p, LossPoint)] == [(0, 1434.09), (1, 873.64)]
