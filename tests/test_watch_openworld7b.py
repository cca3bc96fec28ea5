"""Rules of the open-world evaluation's round 7b (issue 23, helper watch7b: real resumes), each on small
lines written here: a value in brackets glued to its key (``updates[ 1410] train loss[2.61834]``,
``logtokens``), no ``skipped-steps`` from a logging interval no two points show (``registry``), an
epoch's own banner printed before every epoch is no restart (``logevents.RestartDetector``). Both read
paths (the fast path and the general one) are checked. The corpus of these families is
tests/fixtures/losslogs_openworld (``ow_glued_brackets_*``, ``ow_epoch_banner_restore_*``;
tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import math

import pytest

from ckptctl.core.watch.logevents import LossPoint, ResumeMarker
from ckptctl.core.watch.logtokens import clean_line, tokenize
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.core.watch.model import CONTINUOUS, INSUFFICIENT, SKIPPED, SPIKE
from ckptctl.ops.watch import watch_lines

BOTH = pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])


def _points(lines: list[str], fast: bool) -> list[LossPoint]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


def _restarts(lines: list[str], fast: bool) -> list[ResumeMarker]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, ResumeMarker) and e.kind == "restart"]


# -- a value in brackets glued to its key ----------------------------------------------------


def _fields(line: str) -> dict[str, float]:
    return {f.key: f.value for f in tokenize(clean_line(line)[0]).fields}


def test_a_number_in_brackets_right_after_its_key_is_its_value() -> None:
    assert _fields("09/30/2026 11:02:03 epoch [ 4] updates[   1234] train loss[2.71834] remaining[0:03:10]") == {
        "epoch": 4.0, "updates": 1234.0, "train_loss": 2.71834,
    }
    # a clock in brackets is no value; a counter N/T in brackets keeps its own rule
    assert "remaining" not in _fields("updates[ 10] remaining[0:00:07]")
    assert _fields("loss [0.5] lr[3e-4]") == {"loss": 0.5, "lr": 3e-4}
    # an opening bracket without its closing one right after the number reads nothing new
    assert "loss" not in _fields("loss[0.5 of the batch")
    # an index is no value: a whole number right after the bracket (code in a traceback)
    assert _fields("    total = losses[0] + step[12]") == {}


def _glued(updates: range, *, f: float = 1.0, start: int = 0) -> list[str]:
    return [f"09/30/2026 11:{(start + i) // 60 % 60:02d}:{(start + i) % 60:02d} epoch [{(u - 1) // 200 + 1:2d}] updates[{u:7d}] "
            f"train loss[{(2.0 + 3.0 / (1 + u / 100)) * f * (1 + 0.01 * math.sin(u)):.5f}] remaining[0:0{i % 9}:{i % 60:02d}]"
            for i, u in enumerate(updates)]


@BOTH
def test_glued_bracket_records_are_points_on_the_update_axis(fast: bool) -> None:
    pts = _points(_glued(range(10, 401, 10)), fast)
    assert [p.step for p in pts] == list(range(10, 401, 10))
    assert pts[0].loss == pytest.approx((2.0 + 3.0 / 1.1) * (1 + 0.01 * math.sin(10)), abs=1e-4)


def test_a_relaunch_of_glued_bracket_records_is_judged() -> None:
    before = _glued(range(10, 781, 10))
    relaunch = ["Traceback (most recent call last):", "KeyboardInterrupt", "09/30/2026 14:00:00 [Data loaded.]",
                "09/30/2026 14:00:02 [loading previous model...]", "09/30/2026 14:00:20 Epoch 4"]
    ok = watch_lines([*before, *relaunch, *_glued(range(610, 1201, 10), start=90)])
    assert ok.verdict == CONTINUOUS
    assert ok.report.first_resumed_step == 610
    assert watch_lines([*before, *relaunch, *_glued(range(610, 1201, 10), f=1.4, start=90)]).verdict == SPIKE


# -- no skipped steps from one point ---------------------------------------------------------


def _fairseq_like(num_updates: list[int], first_epoch: int = 6) -> list[str]:
    return [f"| epoch {first_epoch:03d}:   {u - 14670:4d} / 2934 loss=4.1{i}, nll_loss=2.49, ppl=5.6, num_updates={u}, "
            f"lr=0.0005, gnorm=0.32" for i, u in enumerate(num_updates)]


RESTORE = ["| loaded checkpoint checkpoints/checkpoint_last.pt (epoch 5 @ 14670 updates)",
           "| loading train data for epoch 5"]


def test_one_point_far_after_the_checkpoint_is_no_skipped_steps() -> None:
    # logged every 1000 updates: the first record 1001 updates after the checkpoint is the cadence
    one = watch_lines([*RESTORE, *_fairseq_like([15671])], resume_step=14670)
    assert one.verdict == INSUFFICIENT
    assert any("no two points show the logging interval" in line for line in one.report.explanation)
    # once two points show the interval (every 10 updates), the same gap is skipped steps
    many = watch_lines([*RESTORE, *_fairseq_like(list(range(15671, 15872, 10)))], resume_step=14670)
    assert many.verdict == SKIPPED


# -- an epoch's own banner -------------------------------------------------------------------


WARN = ["  0%|          | 0/4000 [00:00<?, ?it/s]/env/lib/python3.10/site-packages/sampler.py:12: FutureWarning: "
        "an int seed is deprecated. ", "Pass a Generator instead.", "  order = rng.permutation(n)"]


def _banner_epochs(epochs: range, *, f: float = 1.0) -> list[str]:
    out = []
    for e in epochs:
        loss = (0.3 + 1.2 / (1 + e / 5)) * (1 + 0.02 * math.sin(3 * e)) * (f if e == epochs[0] else 1 + (f - 1) * 0.5)
        out += [f"Epoch: {e}/80 - LR: 0.001000", *WARN,
                f"{30 + e % 7}.2s - loss: {loss:.3f} - acc: {70 + e / 4:.3f}: 100%|#| 4000/4000 [00:3{e % 10}<00:00, 130.50it/s] ",
                f"train loss: {loss:.3f} - train acc: {70 + e / 4:.3f} - val loss: {loss + 0.02:.3f}", ""]
    return out


@BOTH
def test_a_banner_printed_before_every_epoch_is_no_restart(fast: bool) -> None:
    assert _restarts(_banner_epochs(range(1, 25)), fast) == []


@BOTH
def test_start_up_lines_back_after_many_points_still_make_restarts(fast: bool) -> None:
    start = ["==> Building model resnet-eighteen", "==> Preparing the sampler", "==> Using SGD with a cosine schedule"]
    body = [f"iter {i} loss {2.0 / (1 + i / 50):.4f}" for i in range(1, 41)]
    # relaunched twice into the same log, one run of points apart (no restore line): two restarts
    assert len(_restarts([*start, *body, *start, *body[20:], *start, *body[30:]], fast)) == 2
    # the same lines back before every run, again and again: a banner, no restart at all
    assert _restarts([*start, *body[:5], *start, *body[5:10], *start, *body[10:15], *start, *body[15:20]], fast) == []


def test_a_restore_after_per_epoch_banners_is_the_resume() -> None:
    before = [*_banner_epochs(range(1, 20)), "Epoch: 20/80 - LR: 0.001000", *WARN,
              "21.0s - loss: 0.420 - acc: 74.750:  60%|#| 2400/4000 [00:21<00:14, 112.00it/s] ^C", ""]
    relaunch = ["[*] Model dir: ./ckpt", "[*] Loaded run_ckpt.pth.tar checkpoint @ epoch 19", ""]
    ok = watch_lines([*before, *relaunch, *_banner_epochs(range(20, 40))])
    assert ok.verdict == CONTINUOUS
    assert ok.report.resume_detected_by == "log-marker"
    assert watch_lines([*before, *relaunch, *_banner_epochs(range(20, 40), f=1.6)]).verdict == SPIKE
