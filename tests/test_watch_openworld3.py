"""Reader rules of the open-world evaluation's round 3 (issue 23, helper watch23c): each rule on
small lines written here. The corpus of these families is tests/fixtures/losslogs_openworld
(``ow_marian_*``, ``ow_olmo_*``, ``ow_steps_per_epoch_*``, ``ow_swin_*``, ``ow_icefall_*``,
``ow_ms_swift_*``; tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import pytest

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.axis import choose_axis, per_epoch_counter
from ckptctl.core.watch.logevents import EPOCH_BATCH_AXIS, STEP_AXIS, LossPoint, match_marker
from ckptctl.core.watch.losslog import parse_lines


def _points(lines: list[str], fast: bool = True) -> list[LossPoint]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


@pytest.mark.parametrize(
    ("key", "meaning"),
    [
        ("up", (lk.STEP, 1)),  # Marian's "Up. 14000" (the dot is no part of the key)
        ("upd", (lk.STEP, 1)),
        ("itn", (lk.STEP, 3)),  # spaCy 2's "Itn." column
        ("ep", (lk.EPOCH, 0)),
        ("warm_up", None),  # an abbreviation only alone
        ("speed_up", None),
        ("batch", (lk.STEP, 6)),  # a batch counter: after every other step key
        ("batch_size", None),
        ("batch_time", (lk.SEC_PER_STEP, 1)),
        ("trn_loss", (lk.LOSS, 1)),  # fastai 0.7's "trn_loss": a training qualifier
        ("train/cross_entropy_loss", (lk.LOSS, 2)),
    ],
)
def test_abbreviated_and_batch_keys(key: str, meaning: tuple[str, int] | None) -> None:
    assert lk.classify_key(key) == meaning


def test_marian_abbreviated_keys_and_cost() -> None:
    lines = [f"[2021-07-17 12:54:33] Ep. 1 : Up. {u} : Sen. 965,843 : Cost {5.2 - u / 10000:.8f} : Time 359.59s : 3007.81 words/s"
             for u in range(2000, 12001, 2000)]
    pts = _points(lines)
    assert [(p.step, p.epoch) for p in pts] == [(u, 1.0) for u in range(2000, 12001, 2000)]
    assert pts[0].loss == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("train/CrossEntropyLoss=12.18", "train/cross_entropy_loss"),
        ("avgLoss: 2.5", "avg_loss"),
        ("GIoU 0.5", "giou"),  # all-capital runs stay whole
        ("stEp 3", "step"),  # odd casing of one word is no camel case (LitGPT prints "stEp")
    ],
)
def test_camel_case_keys(raw: str, key: str) -> None:
    assert [f.key for f in lt.tokenize(raw).fields] == [key]


def test_a_camel_case_line_is_not_meaningless() -> None:
    assert not lk.is_meaningless("train/CrossEntropyLoss=12.18")
    assert lk.is_meaningless("Nothing to see here = 12.18")


def test_olmo_block_with_camel_case_loss() -> None:
    lines: list[str] = []
    for step in (10, 20, 30):
        lines += [f"2024-08-06 09:59:26.181 node-0:0  olmo.train:908  INFO    [step={step}/739328,epoch=0]",
                  "    optim/total_grad_norm=0.5", f"    train/CrossEntropyLoss={3 - step / 100:.2f}",
                  "    throughput/total_tokens=1,048,576"]
    for fast in (True, False):
        assert [(p.step, p.loss) for p in _points(lines, fast)] == [(10, 2.9), (20, 2.8), (30, 2.7)]


def test_batch_counter_beside_an_epoch_counts_within_it() -> None:
    lines = [f"Epoch {e:3d} Batch {b:4d}/225 - Loss: {3 - e / 10 - b / 1000:.4f} - perplextity: 25.5" for e in range(3) for b in (50, 100, 150)]
    pts = _points(lines)
    assert {p.axis for p in pts} == {EPOCH_BATCH_AXIS}
    assert [p.step for p in pts] == [e * 225 + b for e in range(3) for b in (50, 100, 150)]
    # with no epoch beside it, "batch N/T" stays a field of its own
    assert [f.key for f in lt.tokenize("batch 120/500 loss 2.5").fields] == ["batch", "loss"]


def test_icefall_batch_index_composes_with_the_epoch() -> None:
    lines = [f"2022-04-29 10:31:17,699 INFO [train.py:756] Epoch {e}, batch {b}, loss[loss={0.6 - e / 20:.4f}, simple_loss=1.1, "
             f"over 2432.00 frames.], tot_loss[loss=0.55, over 9785.40 frames.], batch size: {32 + b % 7}, lr: 3.00e-03"
             for e in range(3) for b in range(0, 300, 50)]
    pts = _points(lines)
    assert [(p.step, p.epoch) for p in pts][:3] == [(0, 0.0), (50, 0.0), (100, 0.0)]
    axis = choose_axis(pts)
    assert axis.name == EPOCH_BATCH_AXIS and axis.composed and axis.epoch_len == 300


def test_two_bracketed_counters_are_the_epoch_and_the_batch() -> None:
    lines = [f"[2022-03-14 09:05:16 swin] (main.py 226): INFO Train: [{e}/300][{b}/1251]\teta 0:10:52 lr 0.000710\t"
             f"time 0.6408 (0.6516)\tloss {6.5 - e / 10:.4f} (6.3074)\tgrad_norm 6.5613 (10.6225)\tmem 14764MB"
             for e in (13, 14) for b in (250, 260)]
    pts = _points(lines)
    assert [(p.step, p.epoch, p.axis) for p in pts] == [(e * 1251 + b, float(e), EPOCH_BATCH_AXIS) for e in (13, 14) for b in (250, 260)]
    # a date prefix is still no counter
    assert lt.tokenize("[11/21 01:57:00] loss: 2.5").counter is None


def test_a_count_the_same_every_epoch_is_no_step() -> None:
    lines = [f"Epoch {e} |   Training | Elapsed Time: 2:40:25 | Steps: 6275 | Loss: {4.6 - e / 100:.6f}" for e in range(40, 46)]
    pts = _points(lines)
    assert {p.step for p in pts} == {6275}
    assert per_epoch_counter(pts) == 6276
    axis = choose_axis(pts)
    assert axis.name == EPOCH_BATCH_AXIS and axis.composed
    # a counter that goes on across the epochs stays the run's own step
    going_on = [LossPoint(step=100 * i, loss=1.0, line_no=i, fmt="generic", epoch=float(i // 3)) for i in range(1, 10)]
    assert per_epoch_counter(going_on) is None
    assert choose_axis(going_on).name == STEP_AXIS


def test_a_string_count_of_total_in_a_dict_is_the_step() -> None:
    line = ('{"loss": 0.6675415, "grad_norm": 0.23, "learning_rate": 4.324e-05, "epoch": 0.278, '
            '"global_step/max_steps": "601/2161", "percentage": "27.81%", "elapsed_time": "8h 8m 1s"}')
    (p,) = _points([line])
    assert (p.step, p.loss) == (601, 0.6675415)


@pytest.mark.parametrize(
    ("line", "step"),
    [
        ("[2026-11-23 05:00:01] Loading model from model/model.iter12000.npz", 12000),
        ("INFO    Loading checkpoint from checkpoints/olmo-tiny/step1000-unsharded...", 1000),
        ("Loading checkpoint from ckpt/iter_0003000/model.pt", 3000),
    ],
)
def test_a_step_glued_in_a_checkpoint_path(line: str, step: int) -> None:
    marker = match_marker(line, line, 1, None)
    assert marker is not None and marker.kind == "restore" and marker.step == step


def test_darknet_values_before_their_keys() -> None:
    lines = [f" {i}: {3 - i / 100:.6f}, {3.1 - i / 100:.6f} avg loss, 0.001000 rate, 2.913 seconds, {i * 64} images, 9.8 hours left"
             for i in range(1, 6)] + ["Loaded: 0.000034 seconds", "> 6: 2.9, 3.0 avg loss, 0.001000 rate, 2.9 seconds, 384 images"]
    for fast in (True, False):
        pts = _points(lines, fast)
        assert [(p.step, p.loss) for p in pts] == [(i, pytest.approx(3.1 - i / 100)) for i in range(1, 6)] + [(6, 3.0)]
        assert pts[0].metrics["lr"] == pytest.approx(0.001)
    # a leading "N:" and "X rate," only beside a loss given before its key
    assert [f.key for f in lt.tokenize("12: 34 loss 2.5").fields] == ["loss"]
    assert [f.key for f in lt.tokenize("epoch 3, 0.5 rate, loss 2.1").fields] == ["epoch", "loss"]


def test_a_tab_ends_a_key_and_a_bracketed_batch_index_counts_within_the_epoch() -> None:
    lines = [f"INFO:root:Epoch[{e}] Batch [{b}]\tSpeed: 3.22 samples/sec\tCrossEntropy={4.2 - e / 10 - b / 1000:.6f}\tSmoothL1=0.816728"
             for e in range(3) for b in (10, 20, 30)]
    assert [f.key for f in lt.tokenize(lt.clean_line(lines[0])[0]).fields] == ["epoch", "batch", "speed", "cross_entropy", "smoothl1"]
    for fast in (True, False):
        pts = _points(lines, fast)
        assert [(p.step, p.epoch) for p in pts][:4] == [(10, 0.0), (20, 0.0), (30, 0.0), (10, 1.0)]
        axis = choose_axis(pts)
        assert axis.name == EPOCH_BATCH_AXIS and axis.composed
    # words separated by blanks still make one key
    assert [f.key for f in lt.tokenize("lm loss: 2.3 | elapsed time per iteration (ms): 120.5").fields] == ["lm_loss", "elapsed_time_per_iteration_ms"]
