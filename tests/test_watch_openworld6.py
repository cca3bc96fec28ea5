"""Rules of the open-world evaluation's round 6 (issue 23, helper watch6), each on small lines written
here: a dict after a bracketed prefix of fields (ParlAI), a bare list ending in a step and a learning
rate (the VITS family), an (epoch, batch) pair in a batch key's ``N/T`` (WeNet), an epoch key named the
training one and a logger's level before a counter's key, a table's ``total`` beside loss components
(old YOLO), a loss under a ``loss/`` path in a dict (TRL's PPO). The corpus of these families is
tests/fixtures/losslogs_openworld (``ow_parlai_*``, ``ow_rvc_*``, ``ow_wenet_*``, ``ow_yolov3_total_*``,
``ow_trl_ppo_*``; tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import pytest

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch.logevents import EPOCH_AXIS, LossPoint
from ckptctl.core.watch.logextras import list_record
from ckptctl.core.watch.losslog import parse_lines


def _points(lines: list[str], *, fast: bool = True) -> list[LossPoint]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


@pytest.mark.parametrize(
    ("key", "meaning"),
    [
        ("epoch_train", (lk.EPOCH, 0)),  # TF-CRNN's "Epoch_Train: 64003 cost= 0.28"
        ("epoch_training", (lk.EPOCH, 0)),
        ("epoch_size", None),  # another word after it: no epoch
        ("train_batch", (lk.STEP, 6)),
        ("debug_train_batch", (lk.STEP, 6)),  # WeNet's "DEBUG TRAIN Batch 4/203700": the level is no word of it
        ("info_loss", (lk.LOSS, 2)),  # (a level word before anything but a counter stays: InfoGAN's loss)
        ("total_exs", (lk.SAMPLES, 0)),  # ParlAI's examples seen
        ("exs", None),  # examples in this interval: no count of the run
    ],
)
def test_the_keys_of_round_six(key: str, meaning: tuple[str, int] | None) -> None:
    assert lk.classify_key(key) == meaning


@pytest.mark.parametrize("fast", [True, False])
def test_a_dict_after_a_prefix_takes_its_position_from_the_prefix(fast: bool) -> None:
    lines = [f"[ time:{n // 30}s total_exs:{n} ] {{'exs': 320, 'train_loss': {9 - n / 1000:.3f}}}" for n in range(320, 3201, 320)]
    points = _points(lines, fast=fast)
    assert [p.step for p in points] == list(range(320, 3201, 320))
    assert points[0].loss == pytest.approx(8.68) and "sec_per_step" not in points[0].metrics  # (time since the start)
    # a prefix without a bracket is no such prefix; a dict that names its step keeps it
    assert not _points(["time:10s total_exs:32 {'exs': 32, 'train_loss': 330.1}"] * 2)
    kept = _points(["[ time:10s total_exs:32 ] {'num_updates': 7, 'loss': 3.1}", "[ time:11s total_exs:64 ] {'num_updates': 8, 'loss': 3.0}"])
    assert [p.step for p in kept] == [7, 8]


@pytest.mark.parametrize(
    ("line", "step", "lr", "loss"),
    [
        ("INFO:ljs_base:[2.68, 2.04, 5.97, 41.6, 3.53, 37.0, 1200, 0.0002]", 1200, 0.0002, 2.68),  # VITS: losses first
        ("INFO:rvc:[200, 9.99875e-05]", 200, 9.99875e-05, None),  # RVC: step and lr alone
        ("[400, 0.5]", 400, 0.5, None),
    ],
)
def test_a_list_ending_in_step_and_lr(line: str, step: int, lr: float, loss: float | None) -> None:
    rec = list_record(line)
    assert rec is not None and (rec.step, rec.metrics["lr"], rec.loss) == (step, lr, loss)


@pytest.mark.parametrize("line", ["[200, 1.5]", "[2.5, 0.001]", "INFO:x:[200, 0.1] done", "[200]", "batch sizes [16, 32]"])
def test_other_lists_are_none(line: str) -> None:
    assert list_record(line) is None


@pytest.mark.parametrize("fast", [True, False])
def test_the_line_after_a_list_record_gives_its_loss(fast: bool) -> None:
    lines: list[str] = []
    for step in range(200, 2001, 200):
        lines += [f"INFO:voice:Train Epoch: {step // 400 + 1} [10%]", f"INFO:voice:[{step}, 0.0001]",
                  f"INFO:voice:loss_disc={3 - step / 2000:.3f}, loss_gen=3.0, loss_fm=10.4,loss_mel=21.9, loss_kl=1.27"]
    points = _points(lines, fast=fast)
    assert [p.step for p in points] == list(range(200, 2001, 200))
    assert points[0].loss == pytest.approx(2.9) and points[0].metrics["lr"] == 0.0001


def _wenet(first_batch: int) -> list[str]:
    return [f"2026-01-01 00:00:{b % 60:02d},000 DEBUG TRAIN Batch {e}/{b} loss {50 - e - b / 1000:.3f} lr 0.0004 rank 0"
            for e in range(2, 5) for b in range(first_batch if e == 2 else 0, 1001, 100)]


@pytest.mark.parametrize("fast", [True, False])
def test_an_epoch_batch_pair_in_a_batch_key(fast: bool) -> None:
    # from the epoch's batch 0 (no total is 0) every line is (epoch, batch)
    points = _points(_wenet(0), fast=fast)
    assert [(p.epoch, p.step) for p in points[:3]] == [(2.0, 0), (2.0, 100), (2.0, 200)]
    assert points[11].epoch == 3.0 and points[11].step == 0
    # mid-epoch: the pair shows when the first number stays and the second moves (the first line stays as read)
    later = _points(_wenet(400), fast=fast)
    assert (later[0].epoch, later[0].step) == (None, 2)
    assert [(p.epoch, p.step) for p in later[1:3]] == [(2.0, 500), (2.0, 600)]


@pytest.mark.parametrize("fast", [True, False])
def test_a_count_of_a_total_stays_one(fast: bool) -> None:
    lines = [f"TRAIN Batch {b}/3000 loss {5 - b / 1000:.3f}" for b in range(100, 1001, 100)]
    assert [p.step for p in _points(lines, fast=fast)] == list(range(100, 1001, 100))


def test_an_epoch_key_named_the_training_one() -> None:
    lines = [f"I0328 11:58:{s:02d}.839020 50989 train_shadownet.py:337] Epoch_Train: {64000 + s} cost=  0.{28 + s}" for s in range(1, 6)]
    points = _points(lines)
    assert [p.step for p in points] == [64001, 64002, 64003, 64004, 64005] and points[0].axis == EPOCH_AXIS


def test_a_total_column_beside_loss_components() -> None:
    header = "     Epoch   gpu_mem      GIoU       obj       cls     total   targets  img_size"
    rows = [f"{e:>10}/199        9G     0.651     0.187    0.0233     {1 - e / 100:.3f}        12       640" for e in range(3, 7)]
    points = _points([header, *rows, header, "   7/199   8.99G   1.11   0.35   0.127   **1.59**   13   640"])
    assert [(p.step, p.loss) for p in points] == [(3, 0.97), (4, 0.96), (5, 0.95), (6, 0.94), (7, 1.59)]
    # a "total" with no loss components beside it names no loss
    assert not _points(["Epoch  time  total", *(f"{e}  1.{e}  9.{e}" for e in range(3, 7))])


@pytest.mark.parametrize("fast", [True, False])
def test_a_loss_namespace_in_a_dict(fast: bool) -> None:
    lines = [f"{{'objective/kl': 3.1, 'loss/policy_avg': {0.5 - i / 100:.3f}, 'loss/value_avg': 0.2, 'val/ratio': 0.97, "
             f"'lr': 3e-06, 'episode': {16 * i}, 'epoch': {i / 100:.2f}}}" for i in range(1, 6)]
    points = _points(lines, fast=fast)
    assert [p.loss for p in points] == [0.49, 0.48, 0.47, 0.46, 0.45]
    # a key that is the loss itself comes first; a component outside the namespace is none
    assert _points(["{'loss/policy_avg': 0.4, 'loss': 2.5, 'epoch': 0.1}"])[0].loss == 2.5
    assert not _points(["{'policy_loss_avg': 0.4, 'epoch': 0.1}", "{'policy_loss_avg': 0.3, 'epoch': 0.2}"])
