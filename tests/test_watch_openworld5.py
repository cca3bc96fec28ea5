"""Rules of the open-world evaluation's round 5 (issue 23, helper watch23e), each on small lines
written here: a loss logged only as its perplexity, a rate's unit ending a key, key-value blocks
(Stable-Baselines3's logger). The corpus of these families is tests/fixtures/losslogs_openworld
(``ow_sockeye_*``, ``ow_sb3_*``; tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import math

import pytest

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch.logevents import LossPoint, ResumeMarker
from ckptctl.core.watch.logtokens import tokenize
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.core.watch.model import CONTINUOUS, SPIKE
from ckptctl.ops.watch import watch_lines


@pytest.mark.parametrize(
    ("key", "meaning"),
    [
        ("perplexity", (lk.LOSS, 3)),
        ("ppl", (lk.LOSS, 3)),
        ("train_ppl", (lk.LOSS, 3)),
        ("val_ppl", (lk.EVAL, 0)),
        ("token_perplexity_ratio", None),
    ],
)
def test_a_perplexity_is_the_loss_only_bare_or_as_the_training_one(key: str, meaning: tuple[str, int] | None) -> None:
    assert lk.classify_key(key) == meaning


@pytest.mark.parametrize(
    ("line", "loss"),
    [
        # a key named loss, or by its criterion, keeps its place before the perplexity
        ("| epoch 003:    100 / 1563 loss=2.994, nll_loss=2.101, ppl=4.29, wps=9123, num_updates=3226, lr=0.0005", 2.994),
        ("[2026-11-23 02:10:44,120 INFO] Step 2250/200000; acc:  31.18; ppl: 57.53; xent: 4.05; lr: 0.00100", 4.05),
        ("Epoch[0] Batch [2700]\tSpeed: 1293.60 samples/sec\tperplexity=355.576054\taccuracy=0.209457", 355.576054),
    ],
)
def test_the_loss_a_line_gives_beside_a_perplexity(line: str, loss: float) -> None:
    points = [e for e in parse_lines([line, line.replace("0", "1", 1)], fast=False) if isinstance(e, LossPoint)]
    assert points and points[0].loss == loss


def test_a_rate_unit_ends_a_key() -> None:
    line = "[INFO:sockeye.training] Epoch[0] Batch [2700]   Speed: 1293.60 samples/sec 6.25 updates/sec perplexity=355.576054"
    keys = [f.key for f in tokenize(line).fields]
    assert "perplexity" in keys and not any("sec_" in k for k in keys)
    # (a unit inside a key's words, not a word of its own, is left alone)
    assert [f.key for f in tokenize("time per step s/it 0.25").fields] == ["time_per_step_s/it"]


def _sockeye(jump: float) -> list[str]:
    def line(b: int, f: float = 1.0) -> str:
        ppl = math.exp((1.2 + 2.0 * (b / 400 + 1.5) ** -0.6 + 0.01 * math.sin(b)) * f)
        return f"[INFO:sockeye.training] Epoch[{b // 2000}] Batch [{b}]   Speed: 1200.00 samples/sec 6.25 updates/sec perplexity={ppl:.6f}"

    out = [line(b) for b in range(50, 2401, 50)]
    out += ["[INFO:sockeye.training] Found partial training in directory model/training_state. Resuming from saved state."]
    return out + [line(b, 1 + jump * math.exp(-(b - 2400) / 400)) for b in range(2450, 4001, 50)]


@pytest.mark.parametrize(("jump", "verdict"), [(0.0, CONTINUOUS), (0.4, SPIKE)])
def test_a_perplexity_log_across_a_resume(jump: float, verdict: str) -> None:
    result = watch_lines(_sockeye(jump), stop_when_decided=False)
    assert result.verdict == verdict
    assert (result.report.resume_detected_by, result.report.first_resumed_step) == ("log-marker", 2450)


def _block(n: int, loss: float, *, eval_section: bool = False) -> list[str]:
    rows = ["| rollout/                |           |", f"|    ep_rew_mean          | {-200 + n:<9} |",
            "| time/                   |           |", f"|    iterations           | {n % 40 + 1:<9} |",
            f"|    total_timesteps      | {4096 * n:<9} |", "| train/                  |           |",
            f"|    learning_rate        | {0.0003:<9} |", f"|    loss                 | {loss:<9.4g} |",
            f"|    n_updates            | {10 * n:<9} |", f"|    value_loss           | {loss * 9:<9.4g} |"]
    if eval_section:
        rows = ["| eval/                   |           |", "|    mean_reward          | 12.5      |",
                "|    loss                 | 99.0      |", *rows]
    return ["-" * 39, *rows, "-" * 39]


@pytest.mark.parametrize("fast", [True, False])
def test_a_key_value_block_is_one_record(fast: bool) -> None:
    lines = ["Using cuda device"]
    for n in range(1, 6):
        lines += _block(n, 2.0 - n / 10, eval_section=n == 3)
    events = parse_lines(lines, fast=fast)
    points = [e for e in events if isinstance(e, LossPoint)]
    assert [(p.step, p.loss) for p in points] == [(10 * n, pytest.approx(2.0 - n / 10)) for n in range(1, 6)]
    assert all(p.metrics.get("lr") == 0.0003 for p in points)
    # every block prints the same rows again: no start-up lines coming back, no restart
    assert not [e for e in events if isinstance(e, ResumeMarker)]


def test_a_block_left_without_its_rule_ends_at_the_next_line() -> None:
    lines = [*_block(1, 1.9)[:-1], "Saving model to ppo_cartpole.zip", *_block(2, 1.8)]
    assert [e.step for e in parse_lines(lines) if isinstance(e, LossPoint)] == [10, 20]


def test_markdown_and_column_tables_are_no_blocks() -> None:
    md = ["| step | loss | lr |", "|---|---|---|", *(f"| {s} | {3.0 - s / 1000:.3f} | 3e-4 |" for s in range(100, 1001, 100))]
    assert [e.step for e in parse_lines(md) if isinstance(e, LossPoint)] == list(range(100, 1001, 100))
    two = ["| step | loss |", "|------|------|", *(f"| {s} | {3.0 - s / 1000:.3f} |" for s in range(100, 601, 100))]
    assert [e.step for e in parse_lines(two) if isinstance(e, LossPoint)] == list(range(100, 601, 100))


def _sb3(jump: float) -> list[str]:
    def loss(n: int) -> float:
        return 0.5 + 3.0 * (n / 8 + 1) ** -0.7 * (1 + 0.02 * math.sin(n))

    out = ["Using cuda device"]
    for n in range(1, 41):
        out += _block(n, loss(n))
    out += ["srun: error: gpu-node-07: task 0: Killed",
            "Loading a model without an environment, this model cannot be trained until it has a valid environment.",
            "Using cuda device"]
    for n in range(41, 81):
        out += _block(n, loss(n) * (1 + jump * math.exp(-(n - 41) / 6)))
    return out


@pytest.mark.parametrize(("jump", "verdict"), [(0.0, CONTINUOUS), (0.6, SPIKE)])
def test_key_value_blocks_across_a_relaunch(jump: float, verdict: str) -> None:
    result = watch_lines(_sb3(jump), stop_when_decided=False)
    assert result.verdict == verdict
    assert (result.report.resume_detected_by, result.report.first_resumed_step) == ("log-marker", 410)


@pytest.mark.parametrize(
    ("key", "meaning"),
    [("avg_epoch_loss", (lk.LOSS, 4)), ("epoch_loss", (lk.LOSS, 4)), ("train_loss_epoch", None), ("val_epoch_loss", (lk.EVAL, 0))],
)
def test_an_epoch_average_is_a_loss_of_last_resort(key: str, meaning: tuple[str, int] | None) -> None:
    assert lk.classify_key(key) == meaning


def test_a_step_loss_comes_before_the_epoch_average() -> None:
    bar = "Epoch 3: 100%|##########| 500/500 [00:12<00:00, 36.5it/s, v_num=0, train_loss_step={v}, train_loss_epoch=2.900]"
    points = [e for e in parse_lines([bar.format(v="2.800"), bar.format(v="2.700")]) if isinstance(e, LossPoint)]
    assert points and points[-1].loss == 2.7


def _gluonts(jump: float) -> list[str]:
    def epoch(e: int, f: float = 1.0) -> list[str]:
        loss = (0.4 + 1.5 * (e + 1.5) ** -0.6 + 0.004 * math.sin(e)) * f
        return [f"100%|##########| 100/100 [00:30<00:00,  3.30it/s, epoch={e + 1}/60, avg_epoch_loss={loss:.4g}]",
                f"Epoch[{e}] Evaluation metric 'epoch_loss'={loss:.6f}", f"Epoch[{e + 1}] Learning rate is 0.001"]

    out = ["Start model training"]
    for e in range(0, 16):
        out += epoch(e)
    out += ["srun: error: gpu-node-07: task 0: Killed", "Start model training"]
    for e in range(16, 40):
        out += epoch(e, 1 + jump * math.exp(-(e - 16) / 3))
    return out


@pytest.mark.parametrize(("jump", "verdict"), [(0.0, CONTINUOUS), (0.4, SPIKE)])
def test_an_epoch_average_log_across_a_relaunch(jump: float, verdict: str) -> None:
    result = watch_lines(_gluonts(jump), stop_when_decided=False)
    assert result.verdict == verdict
    # one point per epoch, at its end: (the bar counts epochs from 1) epoch x 100 + 100
    assert result.report.first_resumed_step == 17 * 100 + 100
