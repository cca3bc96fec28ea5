"""The step axis, records, restore wordings and sparse series of ``ckptctl watch`` (issue 23).

Small logs written here for each rule; the realistic corpus (tests/fixtures/losslogs_realistic,
``f_*`` files) holds a whole log of each family, scored by test_watch_sources.
"""

from __future__ import annotations

import math
import random

import pytest

from ckptctl.core.watch.analyze import analyze
from ckptctl.core.watch.logevents import LossPoint, ResumeMarker, match_marker
from ckptctl.core.watch.losslog import LossLogParser, parse_lines
from ckptctl.core.watch.model import SCHEDULE_RESET, WEIGHTS_ONLY


def _curve(x: float) -> float:
    return 0.6 + 2.5 * (x + 3) ** -0.5


def _points(lines: list[str]) -> list[LossPoint]:
    return [e for e in parse_lines(lines) if isinstance(e, LossPoint)]


# -- the axis ------------------------------------------------------------------------------


def _epoch_log(restore: str, first_after: int, *, last_before: int = 30, rng_seed: int = 1) -> list[str]:
    rng = random.Random(rng_seed)
    out = ["Model: resnet50", "Dataset: 1,281,167 images"]
    out += [f"Epoch {e}/90 | lr 0.1000 | train loss {_curve(e) * (1 + rng.gauss(0, 0.005)):.4f} | val loss 2.0 | 312.1s" for e in range(1, last_before + 1)]
    out += ["Traceback (most recent call last):", "RuntimeError: NCCL error", "Model: resnet50", "Dataset: 1,281,167 images", restore]
    out += [f"Epoch {e}/90 | lr 0.1000 | train loss {_curve(e) * (1 + rng.gauss(0, 0.005)):.4f} | val loss 2.0 | 312.1s" for e in range(first_after, first_after + 25)]
    return out


def test_an_epoch_indexed_log_is_read_on_the_epoch_axis() -> None:
    points = _points(_epoch_log("Resuming from epoch 28 (ckpt/epoch_28.pt)", 29))
    assert {p.axis for p in points} == {"epoch"} and points[0].step == 1 and points[-1].step == 53
    report = analyze(parse_lines(_epoch_log("Resuming from epoch 28 (ckpt/epoch_28.pt)", 29)), final=True)
    assert report.step_axis == "epoch" and report.resume_step == 28 and report.first_resumed_step == 29
    assert report.verdict == "continuous", report.explanation


@pytest.mark.parametrize(
    ("restore", "first_after", "verdict"),
    [
        ("Resuming from epoch 28 (ckpt/epoch_28.pt)", 28, "continuous"),  # a checkpoint "of epoch E" may hold E as next
        ("Resuming from epoch 28 (ckpt/epoch_28.pt)", 33, "skipped-steps"),
        ("Resuming from epoch 28 (ckpt/epoch_28.pt)", 20, "replayed-steps"),
        ("loaded checkpoint /ckpt/last.pt, continuing at epoch 29", 29, "continuous"),
        ("loaded checkpoint /ckpt/last.pt, continuing at epoch 29", 36, "skipped-steps"),
        ("loaded checkpoint /ckpt/last.pt, continuing at epoch 29", 28, "replayed-steps"),
    ],
)
def test_an_epoch_indexed_log_resumes_at_an_epoch(restore: str, first_after: int, verdict: str) -> None:
    report = analyze(parse_lines(_epoch_log(restore, first_after)), final=True)
    assert report.verdict == verdict, report.explanation


def _iter_wrap_log(*, restart_epoch: int, restart_iter: int, restore: str | None) -> list[str]:
    rng = random.Random(5)
    batch: dict[tuple[int, int], float] = {}

    def noise(e: int, it: int) -> float:
        # a re-run batch is the same batch (a faithful resume): its noise, give or take a tenth
        if (e, it) in batch:
            return batch[(e, it)] + rng.gauss(0, 0.0004)
        return batch.setdefault((e, it), rng.gauss(0, 0.004))

    out = ["building dataloaders (300 iterations per epoch)"]
    for e in range(0, 8):
        for it in range(0, 300, 20):
            out.append(f"epoch {e} iter {it} loss {_curve(e * 15 + it / 20) * (1 + noise(e, it)):.4f} lr 0.0100")
    out += ["srun: error: node-3: task 0: Killed"]
    if restore:
        out.append(restore)
    for e in range(restart_epoch, restart_epoch + 3):
        for it in range(restart_iter if e == restart_epoch else 0, 300, 20):
            out.append(f"epoch {e} iter {it} loss {_curve(e * 15 + it / 20) * (1 + noise(e, it)):.4f} lr 0.0100")
    return out


def test_a_counter_that_restarts_every_epoch_is_composed_with_the_epoch() -> None:
    report = analyze(parse_lines(_iter_wrap_log(restart_epoch=7, restart_iter=0, restore="Resuming training at epoch 7")), final=True)
    assert (report.step_axis, report.epoch_len, report.step_axis_composed) == ("epoch-batch", 300, True)
    assert report.first_resumed_step == 7 * 300 and report.verdict == "continuous", report.explanation
    # every epoch's "iter 0" is no restart: one resume found, not seven
    assert report.num_segments == 2


def test_a_composed_counter_still_sees_a_restart_from_the_beginning() -> None:
    report = analyze(parse_lines(_iter_wrap_log(restart_epoch=0, restart_iter=0, restore=None)), final=True)
    assert report.step_axis == "epoch-batch" and report.verdict == "replayed-steps", report.explanation


def test_a_global_step_beside_an_epoch_is_not_composed() -> None:
    lines = [f"epoch {s // 100} step {s} loss {_curve(s / 10):.4f}" for s in range(0, 1000, 10)]
    report = analyze(parse_lines(lines), final=True)
    assert (report.step_axis, report.step_axis_composed) == ("step", False)


@pytest.mark.parametrize(
    ("line", "position", "epoch_len"),
    [
        ("Train: 3 [ 120/500 ( 24%)]  Loss: 2.3141 (2.3310)  Time: 0.211s  LR: 1.000e-01", 3 * 500 + 120, 500),
        ("Epoch: [3][ 120/391]\tTime  0.212 ( 0.215)\tLoss 2.3141e+00 (2.3310e+00)\tAcc@1  45.31", 3 * 391 + 120, 391),
        ("Epoch(train)  [3][120/500]  lr: 1.0000e-02  eta: 0:10:00  loss: 2.3141", 3 * 500 + 120, 500),
    ],
)
def test_bracketed_counters_within_an_epoch(line: str, position: int, epoch_len: int) -> None:
    (p,) = _points([line])
    assert (p.step, p.axis, p.epoch_len, p.epoch) == (position, "epoch-batch", epoch_len, 3.0)


def test_an_epochs_own_total_is_no_progress_counter() -> None:
    (p,) = _points(["Epoch 12/90 | lr 0.1 | loss 2.31"])
    assert (p.step, p.axis, p.epoch) == (12, "epoch", 12.0)


# -- records ---------------------------------------------------------------------------------


def test_a_block_headed_by_its_step_carries_its_loss_and_learning_rate() -> None:
    lines = ["== step 1200 ==", "  loss: 2.31", "  lr: 3.0e-04", "== step 1250 ==", "  loss: 2.29", "  lr: 2.9e-04"]
    assert [(p.step, p.loss, p.metrics.get("lr")) for p in _points(lines)] == [(1200, 2.31, 3e-4), (1250, 2.29, 2.9e-4)]


def test_markdown_tables_with_the_header_again_at_each_launch() -> None:
    header = ["| step | loss | lr |", "|---|---|---|"]
    lines = [*header, "| 100 | 2.91 | 3.0e-04 |", "| 200 | 2.80 | 3.0e-04 |", "relaunched", *header, "| 200 | 2.81 | 3.0e-04 |"]
    assert [(p.step, p.loss) for p in _points(lines)] == [(100, 2.91), (200, 2.80), (200, 2.81)]


def test_a_log_pasted_in_a_fence_between_prose() -> None:
    # (prose before the first fence is read as a log would be: nothing says yet that it is notes)
    lines = ["```text", "step 10 loss 2.5", "step 20 loss 2.4", "```", "Then we resumed; step 25 gave loss 3.3 on eval.",
             "```", "step 30 loss 2.3", "```"]  # fmt: skip
    assert [(p.step, p.loss) for p in _points(lines)] == [(10, 2.5), (20, 2.4), (30, 2.3)]


def test_a_summary_repeating_a_step_is_no_restart() -> None:
    rng = random.Random(3)
    lines = []
    for s in range(50, 3001, 50):
        lines.append(f"step {s} | loss {_curve(s / 50) * (1 + rng.gauss(0, 0.003)):.4f}")
        if s % 1000 == 0:
            lines.append(f"Epoch {s // 1000} finished: global step {s}, average loss {_curve(s / 100):.4f}")
    report = analyze(parse_lines(lines), final=True)
    assert report.num_segments == 1 and report.resume_detected_by is None, report.explanation


def test_a_multi_line_block_shows_a_learning_rate_reset() -> None:
    rng = random.Random(9)

    def block(s: int, lr: float) -> list[str]:
        return [f"== step {s} ==", f"  loss: {_curve(s / 10) * (1 + rng.gauss(0, 0.003)):.4f}", f"  lr: {lr:.3e}"]

    lines = [x for s in range(10, 2010, 10) for x in block(s, 3e-4 * (1 - s / 10000))]
    lines += ["Loaded checkpoint from step 2000"]
    lines += [x for s in range(2010, 2300, 10) for x in block(s, 3e-4 * (s - 2000) / 1000)]  # a warm-up again
    report = analyze(parse_lines(lines), final=True)
    assert report.verdict == SCHEDULE_RESET, report.explanation


# -- restore lines ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "step", "epoch", "names_next", "weights_only"),
    [
        ("Resuming from epoch 45 (ckpt/epoch_45.pt)", "restore", None, 45, False, False),
        ("loaded checkpoint /ckpt/last.pt, continuing at epoch 18", "restore", None, 18, True, False),
        ("Loaded checkpoint 'out/ckpt_12000' from iteration 12000", "restore", 12000, None, False, False),
        ("Restored from x/epoch=3-step=1200.ckpt", "restore", 1200, 3, False, False),
        ("[Checkpointer] Loading from output/v1/model_0039999.pth ...", "restore", 39999, None, False, False),
        ("Restored model from ckpt/iter_2000.pt at iteration 2000 (weights only: optimizer state not restored)", "restore", 2000, None, False, True),
        ("WARNING: optimizer state not found in checkpoint; using a fresh AdamW optimizer", "weights-only", None, None, False, True),
        ("Saved checkpoint to ckpt/epoch_5.pt", "save", None, 5, False, False),
    ],
)
def test_restore_lines_in_other_words(text: str, kind: str, step: int | None, epoch: int | None, names_next: bool, weights_only: bool) -> None:
    m = match_marker(text, text, 1, None)
    assert m is not None
    assert (m.kind, m.step, m.epoch, m.names_next, m.weights_only) == (kind, step, epoch, names_next, weights_only)


@pytest.mark.parametrize("text", ["Loading dataset from /data/train", "Loaded resnet50 model from torchvision", "Loaded model from /home/e2/ckpt.pt"])
def test_lines_with_no_checkpoint_step_or_epoch(text: str) -> None:
    m = match_marker(text, text, 1, None)
    assert m is None or (m.step is None and m.epoch is None)


def test_a_weights_only_restore_is_a_note() -> None:
    rng = random.Random(4)
    lines = [f"step {s} loss {_curve(s / 10) * (1 + rng.gauss(0, 0.003)):.4f}" for s in range(10, 2010, 10)]
    lines += ["Loaded model weights from ckpt/step_2000.pt", "optimizer state not found in checkpoint; starting a fresh optimizer"]
    lines += [f"step {s} loss {_curve(s / 10) * (1 + rng.gauss(0, 0.003)):.4f}" for s in range(2010, 2300, 10)]
    report = analyze(parse_lines(lines), final=True)
    assert WEIGHTS_ONLY in report.note_codes and report.verdict == "continuous", report.explanation


def test_counters_that_say_they_count_from_the_resume() -> None:
    rng = random.Random(6)
    lines = [f"step{s} | loss: {_curve(s / 10) * (1 + rng.gauss(0, 0.003)):.4f}" for s in range(0, 2000)]
    lines += ["Loaded checkpoint. Resuming training for another 100 steps."]
    lines += [f"Step {k} (After Resuming) | Loss: {_curve((1999 + k) / 10) * (1 + rng.gauss(0, 0.003)):.4f}" for k in range(1, 101)]
    report = analyze(parse_lines(lines), resume_step=2000, final=True)
    assert report.verdict == "continuous" and "relative-step-counter" in report.note_codes, report.explanation


def _saved_after_log(first_after: int) -> list[str]:
    rng = random.Random(8)
    lines = [f"step{s} | loss: {_curve(s / 10) * (1 + rng.gauss(0, 0.003)):.4f}" for s in range(0, 1001)]
    lines += ["Checkpoint saved at step 1000", "Resuming from step 1000"]
    return lines + [f"step{s} | loss: {_curve(s / 10) * (1 + rng.gauss(0, 0.003)):.4f}" for s in range(first_after, first_after + 100)]


def test_a_checkpoint_saved_after_its_steps_line_holds_that_step() -> None:
    assert analyze(parse_lines(_saved_after_log(1000)), final=True).verdict == "replayed-steps"
    assert analyze(parse_lines(_saved_after_log(1001)), final=True).verdict == "continuous"


# -- sparse series -----------------------------------------------------------------------------


def _sparse_lr_log(post_lr: list[float]) -> list[str]:
    rng = random.Random(2)
    out: list[str] = []
    for s in range(10, 3010, 10):
        lr = f" lr {0.1 * 0.2 ** (s // 2000):.4f}" if s % 500 == 0 else ""  # once per epoch of 500 steps
        out.append(f"step {s} loss {_curve(s / 10) * (1 + rng.gauss(0, 0.003)):.4f}{lr}")
    out.append("Resuming from step 3000")
    for k, s in enumerate(range(3010, 4510, 10)):
        lr = f" lr {post_lr[k // 50]:.4f}" if s % 500 == 0 and k // 50 < len(post_lr) else ""
        out.append(f"step {s} loss {_curve(s / 10) * (1 + rng.gauss(0, 0.003)):.4f}{lr}")
    return out


def test_a_learning_rate_logged_once_per_epoch_is_judged_at_its_own_cadence() -> None:
    # held flat across the schedule's constant stretch, not extrapolated through its last drop
    assert analyze(parse_lines(_sparse_lr_log([0.02, 0.02, 0.02])), final=True).verdict == "continuous"
    assert analyze(parse_lines(_sparse_lr_log([0.1, 0.1, 0.1])), final=True).verdict == SCHEDULE_RESET


def test_one_learning_rate_sample_is_a_note_not_a_verdict() -> None:
    report = analyze(parse_lines(_sparse_lr_log([0.1])), final=True)
    assert report.verdict == "continuous" and report.checks["schedule"]["ok"] is None
    assert any("not enough to judge" in n for n in report.notes)


# -- bounds ------------------------------------------------------------------------------------


def test_the_template_store_stays_bounded_on_lines_of_ever_new_shapes() -> None:
    rng = random.Random(1)
    parser = LossLogParser()
    words = ["loss", "lr", "step", "rank", "alpha", "beta", "gamma"]
    for i in range(20000):
        line = " ".join(f"{rng.choice(words)}{rng.choice(['=', ': ', ' '])}{rng.random():.3f}" for _ in range(rng.randint(1, 6)))
        parser.feed(f"{line} {'x' * (i % 97)}")
    fast = parser._fast
    assert fast is not None and fast.count <= 512 and len(fast.tries) <= 8 * 512


def test_nan_epoch_and_hex_words_never_raise() -> None:
    lines = ["Epoch nan/90 | train loss 2.0", "comm 0x7f3a12 rank 3 nRanks 8", "comm 0xdeadbeef rank 3 nRanks 8", "Epoch inf | train loss 1.0"] * 3
    events = parse_lines(lines)
    assert all(isinstance(e, (LossPoint, ResumeMarker)) for e in events)
    assert all(math.isfinite(p.step) for p in events if isinstance(p, LossPoint) and p.step is not None)
