"""Pure core of ``ckptctl watch``: log-line parsing and the continuity decision (tables)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable

import pytest

from ckptctl.core.watch.analyze import analyze
from ckptctl.core.watch.logevents import LogEvent, LossPoint, ResumeMarker
from ckptctl.core.watch.logpattern import PatternError, compile_pattern
from ckptctl.core.watch.logtokens import clean_line
from ckptctl.core.watch.losslog import (
    AUTO,
    FORMATS,
    LossLogParser,
    parse_lines,
)
from ckptctl.core.watch.model import (
    CONTINUOUS,
    DIVERGED,
    INSUFFICIENT,
    NAN,
    REPLAYED,
    SKIPPED,
    SPIKE,
    VERDICTS,
    WatchConfig,
    WatchConfigError,
)
from ckptctl.core.watch.resume import select_rank
from ckptctl.core.watch.session import WatchSession
from ckptctl.core.watch.stats import curvature_free_residuals, fit_trend, robust_spread

# -- parsing: one line of each format ------------------------------------------------------

ESC = "\x1b"

LINES: list[tuple[str, str, tuple[int | None, float, int | None]]] = [
    # (format, line, (step, loss, rank))
    (
        "ckptctl",
        "ckptctl-train step=120 loss=2.3456789012345678 tokens_seen=491520 lr=0.001 rank=0",
        (120, 2.3456789012345678, 0),
    ),
    (
        "ckptctl",
        "[default1]:ckptctl-train step=7 loss=3.5 tokens_seen=28672 lr=0.001 rank=1",
        (7, 3.5, 1),
    ),
    ("ckptctl", "[rank3]:ckptctl-train step=7 loss=3.5 tokens_seen=28672 lr=0.001", (7, 3.5, 3)),
    (
        "ckptctl",
        "[default0]:[rank0]:ckptctl-train step=9 loss=nan tokens_seen=1 lr=0.1 rank=0",
        (9, math.nan, 0),
    ),
    ("ckptctl", "ckptctl-train step=9 loss=inf tokens_seen=1 lr=0.1 rank=0", (9, math.inf, 0)),
    (
        "megatron",
        " [2025-01-20 11:02:03] iteration      120/  500000 | consumed samples:        61440 | elapsed time per iteration (ms): 1432.8 | learning rate: 1.800000E-05 | global batch size:   512 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.912 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        (120, 2.345678, None),
    ),
    (
        "megatron",
        " iteration       30/     100 | lm loss: 4.000000E+00 | number of nan iterations:   2 |",
        (30, math.nan, None),
    ),
    (
        "megatron",
        " iteration       40/     100 | learning rate: 1.0E-04 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:  10 |",
        (40, math.nan, None),
    ),
    (
        "torchtitan",
        f"[rank0]:[titan] 2025-02-11 09:00:01,037 - root - INFO - {ESC}[31mstep: 10  {ESC}[32mloss:  3.44584  {ESC}[38;2;255;165;0mgrad_norm:  0.9368  {ESC}[34mtps: 7,412{ESC}[39m",
        (10, 3.44584, 0),
    ),
    (
        "torchtitan",
        "[titan] 2024-10-01 10:00:00,000 - root - INFO - step:  1  loss: 12.2511  memory: 20.12GiB(25.40%)  wps: 8,112  mfu: 4.12%",
        (1, 12.2511, None),
    ),
    ("nanogpt", "iter 4200: loss 2.9173, time 98.41ms, mfu 38.12%", (4200, 2.9173, None)),
    ("jsonl", '{"step": 120, "loss": 2.34}', (120, 2.34, None)),
    ("jsonl", '{"global_step": 5, "train/loss": NaN, "rank": 2}', (5, math.nan, 2)),
    (
        "jsonl",
        '2025-01-01 INFO metrics {"iteration": 8, "train_loss": "2.5", "epoch": 0.1}',
        (8, 2.5, None),
    ),
    (
        "hf",
        "{'loss': 2.3456, 'grad_norm': 1.2345678, 'learning_rate': 4.5e-05, 'epoch': 0.12}",
        (None, 2.3456, None),
    ),
    (
        "hf",
        "{'loss': nan, 'grad_norm': nan, 'learning_rate': 4.5e-05, 'epoch': 0.12}",
        (None, math.nan, None),
    ),
    (
        "hf",
        "{'loss': '2.345', 'grad_norm': '1.2', 'learning_rate': '4.5e-05', 'epoch': '0.5'}",
        (None, 2.345, None),
    ),
    (
        "lightning",
        "Epoch 3:  45%|####5     | 450/1000 [00:12<00:15, 36.50it/s, v_num=0, train_loss=2.340]",
        (3450, 2.34, None),
    ),
    (
        "lightning",
        "Epoch 0:  10%|#         | 10/? [00:01<00:00, 9.9it/s, v_num=2, train_loss_step=3.1, train_loss_epoch=3.9]",
        (10, 3.1, None),
    ),
    ("generic", "step 120 | loss 2.3456 | lr 3.0e-04 | grad_norm 1.23", (120, 2.3456, None)),
    ("generic", "Step 120/1000, Loss: 2.3456", (120, 2.3456, None)),
    ("generic", "2026-11-20 10:00:00 INFO train step=120 loss=2.34567 lr=0.0003", (120, 2.34567, None)),
    ("generic", "[rank0]:Epoch 2 | Iteration 120 | train_loss: 4.5e-01 | 12.3 s", (120, 0.45, 0)),
    ("generic", "global_step: 7 training loss = nan", (7, math.nan, None)),
]


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize(
    ("fmt", "line", "expected"), LINES, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(LINES)]
)
def test_each_format_parses_its_line(
    fmt: str, line: str, expected: tuple[int | None, float, int | None]
) -> None:
    for requested in (fmt, AUTO):
        events = LossLogParser(requested).feed(line)
        points = [e for e in events if isinstance(e, LossPoint)]
        assert len(points) == 1, (requested, events)
        p = points[0]
        assert (p.step, p.rank) == (expected[0], expected[2])
        assert _same(p.loss, expected[1])
        assert p.fmt == fmt


NOT_TRAINING_LOSS = [
    # validation/eval lines, summaries, configs: never a training loss
    f"[titan] - root - INFO - {ESC}[33mvalidate step: 500  {ESC}[32mloss:  2.9000  {ESC}[34mtps: 21,077{ESC}[39m",
    " validation loss at iteration 1000 | lm loss value: 2.470000E+00 | lm loss PPL: 1.182E+01 |",
    "{'eval_loss': 2.41, 'eval_runtime': 12.3, 'epoch': 0.5}",
    "{'train_runtime': 1532.1, 'train_samples_per_second': 125.3, 'train_loss': 2.9871, 'epoch': 0.81}",
    '{"train_runtime": 1532.1, "train_loss": 2.98, "step": 3000}',
    '{"step": 100, "eval_loss": 2.4}',
    '{"loss": 1.0, "aux_loss": 0.01}',
    '{"loss": "cross_entropy", "step": 3}',
    "Validation DataLoader 0:  50%|#####     | 5/10 [00:00<00:00, 30.1it/s]",
    "ckptctl-train checkpoint step=40 path=/ckpt/run1/step_40",
    "Epoch 0:   0%|          | 0/250 [00:00<?, ?it/s]",
    "  5%|#         | 50/1000 [00:10<03:10,  5.00it/s]",
    "",
    "\x00\x01 binary garbage \xff",
    # shapes the generic reader must leave alone
    "step 120 | val_loss 2.41 | val_ppl 11.1",
    "Evaluating: step 120, eval loss: 2.41",
    "step 120 | loss_scale 65536 | aux_loss 0.01",
    "[Rank 0] step=120, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
    "step 120 loss: 2.5.1",
    "Loss function: cross entropy, step size 1",
]


@pytest.mark.parametrize("line", NOT_TRAINING_LOSS)
def test_lines_that_are_not_a_training_loss(line: str) -> None:
    assert not [e for e in LossLogParser().feed(line) if isinstance(e, LossPoint)]


def test_a_line_with_eval_words_and_a_named_train_loss_is_a_weak_record() -> None:
    """'Epoch 3 | train loss | val loss' is the epoch's training record when the log has nothing
    else; beside per-iteration lines (nanoGPT's 'step N: train loss, val loss' estimates) those win."""
    alone = parse_lines(["Epoch 1/90 | lr 0.1 | train loss 1.97 | val loss 2.11", "Epoch 2/90 | lr 0.1 | train loss 1.74 | val loss 1.86"])
    assert [(e.step, e.loss, e.axis) for e in alone if isinstance(e, LossPoint)] == [(1, 1.97, "epoch"), (2, 1.74, "epoch")]
    mixed = parse_lines(
        ["step 0: train loss 11.0570, val loss 11.0573", "iter 0: loss 11.0561, time 900.1ms", "iter 10: loss 9.8, time 410.2ms",
         "step 20: train loss 9.1, val loss 9.2", "iter 20: loss 9.05, time 411.0ms"]
    )
    points = [(e.step, e.loss, e.fmt) for e in mixed if isinstance(e, LossPoint)]
    # the estimates count from their second line on, and not after iteration lines locked the format
    assert points == [(0, 11.0561, "nanogpt"), (10, 9.8, "nanogpt"), (20, 9.05, "nanogpt")]
    # one such line alone (a quoted example in a script) is no training log
    assert not [e for e in parse_lines(['    "step 500: train loss 2.6001, val loss 2.6511",']) if isinstance(e, LossPoint)]


MARKERS = [
    ("  Continuing training from global step 500", 500),
    (
        "[rank0]:[titan] 2025-02-11 09:05:00,009 - root - INFO - Loading the checkpoint at step 500.",
        500,
    ),
    ("  successfully loaded checkpoint from /ckpt/gpt3 [ t 1/4, p 1/2 ] at iteration 1000", 1000),
    ("  successfully loaded checkpoint from /ckpt at iteration 70", 70),
    ("Restoring states from the checkpoint path at /ckpt/epoch=1-step=500.ckpt", 500),
    ("Restoring states from the checkpoint path at /ckpt/last.ckpt", None),
    ("Resuming training from out", None),
    ("[default0]:ckptctl-train resume step=120 path=/ckpt/step_120", 120),
]


@pytest.mark.parametrize(("line", "step"), MARKERS)
def test_restore_lines_are_markers(line: str, step: int | None) -> None:
    events = LossLogParser().feed(line)
    assert len(events) == 1 and isinstance(events[0], ResumeMarker)
    assert events[0].step == step


def test_clean_line_strips_colours_and_torchrun_tags() -> None:
    assert clean_line(f"[default3]:[rank11]:{ESC}[31mhello{ESC}[39m\n") == ("hello", 3)
    assert clean_line("[2025-01-01 10:00:00] x") == ("[2025-01-01 10:00:00] x", None)
    assert clean_line("[trainer12]: y") == ("y", 12)


def test_auto_detection_locks_onto_the_first_format() -> None:
    parser = LossLogParser()
    parser.feed("ckptctl-train step=1 loss=2.0 tokens_seen=1 lr=0.1 rank=0")
    assert parser.format == "ckptctl"
    # A line of another format afterwards is not mixed in.
    assert parser.feed('{"step": 2, "loss": 9.0}') == []
    assert len(parser.feed("ckptctl-train step=2 loss=1.9 tokens_seen=2 lr=0.1 rank=0")) == 1


def test_lightning_csv_follows_its_header_and_skips_validation_rows() -> None:
    lines = ["epoch,step,train_loss,val_loss", "0,9,3.5,", "0,19,3.4,", "0,19,,3.6", "1,29,3.3,"]
    points = [e for e in parse_lines(lines, "lightning-csv") if isinstance(e, LossPoint)]
    assert [(p.step, p.loss, p.epoch) for p in points] == [
        (9, 3.5, 0.0),
        (19, 3.4, 0.0),
        (29, 3.3, 1.0),
    ]
    # A rewritten header (new metric columns) moves the loss column.
    more = parse_lines([*lines, "epoch,lr,step,train_loss", "1,0.1,39,3.2"], "lightning-csv")
    assert [e.step for e in more if isinstance(e, LossPoint)][-1] == 39


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # TensorBoard's scalar export of the loss curve
        (["Wall time,Step,Value", "1700000000.5,10,3.5", "1700000001.5,20,3.25"], [(10, 3.5), (20, 3.25)]),
        # W&B's export: run-prefixed column names, __MIN/__MAX companions
        (
            [
                '"Step","run-7 - train/loss","run-7 - train/loss__MIN","run-7 - train/loss__MAX"',
                "10,3.5,3.4,3.6",
                "20,3.25,3.2,3.3",
            ],
            [(10, 3.5), (20, 3.25)],
        ),
        # a global_step column and Megatron's loss name, any case
        (["Global_Step,LM Loss,val_loss", "10,3.5,", "20,3.25,3.9"], [(10, 3.5), (20, 3.25)]),
        # no training-loss column: nothing is read
        (["Step,val_loss", "10,3.5"], []),
        (["Wall time,Step,Value,Other", "1.0,10,3.5,1"], []),
    ],
)
def test_csv_exports_of_other_tools(lines: list[str], expected: list[tuple[int, float]]) -> None:
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [(p.step, p.loss) for p in points] == expected
    assert all(p.fmt == "lightning-csv" for p in points)


def test_lightning_bar_redraws_replace_the_previous_value() -> None:
    line = "\r".join(
        [
            "Epoch 1:   0%|          | 0/100 [00:00<?, ?it/s]",
            "Epoch 1:   1%|          | 1/100 [00:00<00:10, 9.9it/s, v_num=0, train_loss=3.00]",
            "Epoch 1:   1%|          | 1/100 [00:00<00:10, 9.9it/s, v_num=0, train_loss=2.90]",
            "Epoch 1:   2%|          | 2/100 [00:00<00:10, 9.9it/s, v_num=0, train_loss=2.90]",
        ]
    )
    points = [e for e in LossLogParser().feed(line) if isinstance(e, LossPoint)]
    assert [(p.step, p.redraws_previous) for p in points] == [
        (101, False),
        (101, True),
        (102, False),
    ]
    assert all(p.line_no == 1 for p in points)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(", "not a valid regular expression"),
        (r"step=(?P<step>\d+)", "named group 'loss'"),
        (r"(?P<loss>\S+) (?P<foo>\d)", "unknown"),
    ],
)
def test_bad_patterns_are_refused(pattern: str, message: str) -> None:
    with pytest.raises(PatternError, match=message):
        compile_pattern(pattern)


def test_pattern_without_step_numbers_points_in_order() -> None:
    events = parse_lines(["a loss=3.0", "a loss=2.5", "noise"], pattern=r"loss=(?P<loss>\S+)")
    assert [(e.step, e.loss) for e in events if isinstance(e, LossPoint)] == [
        (None, 3.0),
        (None, 2.5),
    ]


def test_select_rank_prefers_rank_zero_else_the_first_seen() -> None:
    def pts(*ranks: int | None) -> list[LossPoint]:
        return [
            LossPoint(step=1, loss=1.0, line_no=i, fmt="x", rank=r) for i, r in enumerate(ranks)
        ]

    assert select_rank(pts(3, 1, 0, 2)) == 0
    assert select_rank(pts(7, 5)) == 7
    assert select_rank(pts(None, None)) is None


# -- statistics ----------------------------------------------------------------------------


def test_trend_recovers_a_line_despite_outliers() -> None:
    steps = list(range(100, 200))
    losses = [3.0 - 0.004 * s for s in steps]
    for i in (10, 50, 51, 90):
        losses[i] += 5.0  # a few wild points
    trend = fit_trend(steps, losses)
    assert trend.slope_per_step == pytest.approx(-0.004)
    assert trend.at(150) == pytest.approx(3.0 - 0.004 * 150)
    # Held flat past the window's end: never extrapolated downwards.
    assert trend.upper(400) == pytest.approx(trend.at(199))


def test_robust_spread_estimates_a_gaussian_sd_and_ignores_outliers() -> None:
    rng = random.Random(5)
    values = [rng.gauss(0, 0.3) for _ in range(4000)] + [50.0] * 100
    assert robust_spread(values) == pytest.approx(0.3, rel=0.06)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"num_steps": 0}, "num_steps"),
        ({"k": 0.0}, "k"),
        ({"k_median": -1.0}, "k_median"),
        ({"min_rel_tol": -0.1}, "min_rel_tol"),
        ({"persistence": 30}, "persistence"),
        ({"window": 2}, "window"),
        ({"window": 9}, "min_baseline_points"),
        ({"local_points": 0}, "local_points"),
        ({"gap_tolerance_intervals": 0.5}, "gap_tolerance_intervals"),
    ],
)
def test_config_errors_name_the_field(fields: dict[str, float], name: str) -> None:
    with pytest.raises(WatchConfigError, match=f"^{name} "):
        WatchConfig(**fields)  # type: ignore[arg-type]


# -- the decision on generated runs --------------------------------------------------------


def level(step: int) -> float:
    return 2.0 + 8.0 * (step + 200) ** -0.45


def run_log(
    *,
    seed: int,
    pre: range,
    post: range | list[int],
    noise: float = 0.01,
    post_value: Callable[[int, float], float] | None = None,
    heavy_tails: bool = False,
) -> list[LogEvent]:
    """ckptctl-train lines (rank 0) for a pre-failure run, a restart, and a resumed run."""
    rng = random.Random(seed)
    batches: dict[int, float] = {}

    def noisy(step: int) -> float:
        z = rng.gauss(0, 1)
        if heavy_tails:
            z = (
                rng.gauss(0, 1)
                / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3)
                / math.sqrt(3)
            )
        # A re-run step trains on the same batch (a faithful resume): its noise, give or take
        # a tenth for non-deterministic kernels.
        z = batches[step] + 0.1 * z if step in batches else batches.setdefault(step, z)
        return level(step) * (1 + noise * z)

    lines = [f"ckptctl-train step={s} loss={noisy(s)!r} tokens_seen={s} lr=0.1 rank=0" for s in pre]
    lines.append("torch.distributed.elastic: restarting worker group")
    for s in post:
        value = noisy(s)
        if post_value is not None:
            value = post_value(s, value)
        lines.append(f"ckptctl-train step={s} loss={value!r} tokens_seen={s} lr=0.1 rank=0")
    return parse_lines(lines)


def jump(size: float, *, first: int = 0, last: int = 10**9) -> Callable[[int, float], float]:
    """Add ``size`` x level to the loss on steps first..last."""
    return lambda s, v: v + size * level(s) if first <= s <= last else v


def at_step(step: int, value: float) -> Callable[[int, float], float]:
    return lambda s, v: value if s == step else v


SCENARIOS: list[tuple[str, dict, int | None, str]] = [
    # (id, run_log kwargs, --resume-step, verdict)
    ("continuous", {"pre": range(1, 401), "post": range(301, 341)}, 300, CONTINUOUS),
    (
        "continuous-inferred-resume",
        {"pre": range(1, 401), "post": range(301, 341)},
        None,
        CONTINUOUS,
    ),
    (
        "continuous-noisy",
        {"pre": range(1, 401), "post": range(301, 341), "noise": 0.05},
        300,
        CONTINUOUS,
    ),
    (
        "continuous-heavy-tails",
        {"pre": range(1, 401), "post": range(301, 341), "noise": 0.03, "heavy_tails": True},
        300,
        CONTINUOUS,
    ),
    (
        "one-wild-point-is-not-a-spike",
        {
            "pre": range(1, 401),
            "post": range(301, 341),
            "post_value": jump(0.8, first=305, last=305),
        },
        300,
        CONTINUOUS,
    ),
    (
        "two-wild-points-are-not-a-spike",
        {
            "pre": range(1, 401),
            "post": range(301, 341),
            "post_value": jump(0.8, first=305, last=306),
        },
        300,
        CONTINUOUS,
    ),
    (
        "level-shift",
        {"pre": range(1, 401), "post": range(301, 341), "post_value": jump(0.15)},
        300,
        SPIKE,
    ),
    (
        "transient-spike",
        {
            "pre": range(1, 401),
            "post": range(301, 341),
            "post_value": jump(0.5, first=301, last=304),
        },
        300,
        SPIKE,
    ),
    (
        "spike-later-than-n-points-is-not-judged",
        {"pre": range(1, 401), "post": range(301, 341), "post_value": jump(0.5, first=330)},
        300,
        CONTINUOUS,
    ),
    (
        "nan",
        {"pre": range(1, 401), "post": range(301, 341), "post_value": at_step(333, math.nan)},
        300,
        NAN,
    ),
    (
        "inf",
        {"pre": range(1, 401), "post": range(301, 341), "post_value": at_step(302, math.inf)},
        300,
        NAN,
    ),
    ("replayed-below-checkpoint", {"pre": range(1, 401), "post": range(151, 191)}, 300, REPLAYED),
    ("replayed-at-checkpoint-step", {"pre": range(1, 401), "post": range(300, 340)}, 300, REPLAYED),
    ("replayed-from-scratch", {"pre": range(1, 401), "post": range(1, 41)}, None, REPLAYED),
    (
        "replayed-inside-resumed-run",
        {"pre": range(1, 401), "post": [*range(301, 311), *range(305, 331)]},
        300,
        REPLAYED,
    ),
    ("skipped-at-resume", {"pre": range(1, 401), "post": range(341, 381)}, 300, SKIPPED),
    ("skipped-past-the-crash", {"pre": range(1, 321), "post": range(361, 401)}, 300, SKIPPED),
    (
        "skipped-inside-resumed-run",
        {"pre": range(1, 401), "post": [*range(301, 311), *range(351, 381)]},
        300,
        SKIPPED,
    ),
    (
        "one-lost-log-line-is-not-skipped",
        {"pre": range(1, 401), "post": [*range(301, 311), *range(312, 341)]},
        300,
        CONTINUOUS,
    ),
    ("crash-lost-the-log-tail", {"pre": range(1, 281), "post": range(301, 341)}, 300, CONTINUOUS),
    (
        "logs-every-10-steps",
        {"pre": range(10, 4001, 10), "post": range(3010, 3401, 10)},
        3000,
        CONTINUOUS,
    ),
    (
        "logs-every-10-skipped",
        {"pre": range(10, 4001, 10), "post": range(3060, 3401, 10)},
        3000,
        SKIPPED,
    ),
    (
        "logs-before-update-resumes-at-checkpoint-step",
        {"pre": range(0, 400), "post": range(300, 340)},
        300,
        CONTINUOUS,
    ),
    (
        "restart-at-the-last-logged-step",
        {"pre": range(1, 301), "post": range(300, 340)},
        299,
        CONTINUOUS,
    ),
    ("too-few-post-points", {"pre": range(1, 401), "post": range(301, 311)}, 300, INSUFFICIENT),
    ("too-short-baseline", {"pre": range(1, 6), "post": range(1, 41)}, 0, INSUFFICIENT),
    (
        "drop-at-rerun-steps",
        {"pre": range(1, 401), "post": range(301, 341), "post_value": jump(-0.2)},
        300,
        DIVERGED,
    ),
]


@pytest.mark.parametrize(
    ("kwargs", "resume_step", "verdict"), [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS]
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_verdicts_on_generated_runs(
    kwargs: dict, resume_step: int | None, verdict: str, seed: int
) -> None:
    report = analyze(run_log(seed=seed, **kwargs), resume_step=resume_step)
    assert report.verdict == verdict, report.explanation
    assert report.decided == (verdict != INSUFFICIENT)
    if verdict != CONTINUOUS and verdict != INSUFFICIENT:
        assert report.findings[0].verdict == verdict and report.findings[0].message
    # The explanation always ends with the decision, stated with its verdict.
    assert report.explanation[-1].startswith(f"decision: {verdict}")


def test_noisy_continuous_curves_do_not_alarm_across_many_seeds() -> None:
    alarms = []
    for seed in range(60):
        rng = random.Random(seed)
        noise = rng.choice((0.005, 0.02, 0.05))
        pre_end = 300 + rng.randint(1, 60)  # the crash lost 1..60 steps of work
        report = analyze(
            run_log(seed=seed, pre=range(1, pre_end + 1), post=range(301, 341), noise=noise),
            resume_step=300,
        )
        if report.verdict != CONTINUOUS:
            alarms.append((seed, report.verdict, report.explanation))
    assert not alarms


def test_a_level_shift_within_point_noise_is_caught_by_the_median() -> None:
    """3.5 sd up for good: single points rarely clear 4 sd three in a row, the median does."""
    caught_by_median = 0
    for seed in range(10):
        report = analyze(
            run_log(
                seed=seed,
                pre=range(1, 401),
                post=range(301, 341),
                noise=0.02,
                post_value=jump(0.07),
            ),
            resume_step=300,
        )
        assert report.verdict == SPIKE, report.explanation
        assert report.observed is not None and report.threshold is not None
        if report.observed.longest_run_above < report.threshold.persistence:
            assert "median" in report.findings[0].message
            caught_by_median += 1
    assert caught_by_median >= 5


def test_spike_report_carries_the_numbers() -> None:
    report = analyze(
        run_log(seed=4, pre=range(1, 401), post=range(301, 341), post_value=jump(0.3)),
        resume_step=300,
    )
    assert report.verdict == SPIKE
    b, t, o = report.baseline, report.threshold, report.observed
    assert b is not None and t is not None and o is not None
    assert b.num_points == 100 and b.last_step <= 320
    assert b.level == pytest.approx(level(301), rel=0.02)
    assert t.value == pytest.approx(b.level + t.tolerance)
    assert t.tolerance >= max(4 * b.spread, 0.02 * b.level) - 1e-12
    assert o.num_points == 20 and o.median_loss > t.median_value
    assert report.resume_step == 300 and report.resume_step_source == "flag"
    assert report.first_resumed_step == 301
    assert report.rerun is not None and report.rerun.num_compared == 20
    text = "\n".join(report.explanation)
    for number in (b.level, t.value, o.median_loss):
        assert f"{number:.4g}" in text


def test_rerun_steps_of_a_deterministic_resume_are_identical() -> None:
    pre = [p for p in run_log(seed=9, pre=range(1, 361), post=[]) if isinstance(p, LossPoint)]

    def line(step: int, loss: float) -> str:
        return f"ckptctl-train step={step} loss={loss!r} tokens_seen=0 lr=0.1 rank=0"

    history = [line(p.step, p.loss) for p in pre]
    rerun = [(p.step, p.loss) for p in pre if 300 < p.step <= 340]
    identical = [line(s, v) for s, v in rerun]
    config = WatchConfig(expect_identical=True)
    report = analyze(parse_lines([*history, "restart", *identical]), resume_step=300, config=config)
    assert report.verdict == CONTINUOUS
    assert (
        report.rerun is not None and report.rerun.num_identical == report.rerun.num_compared == 20
    )
    # One re-run step off by 1e-3: a deterministic run must reproduce it exactly.
    tampered = [line(s, v + (1e-3 if s == 305 else 0.0)) for s, v in rerun]
    report = analyze(parse_lines([*history, "restart", *tampered]), resume_step=300, config=config)
    assert report.verdict == DIVERGED and report.findings[0].step == 305
    # Without --expect-identical the same difference is noise.
    assert (
        analyze(parse_lines([*history, "restart", *tampered]), resume_step=300).verdict
        == CONTINUOUS
    )


def test_restore_line_marks_a_seamless_resume() -> None:
    """A preemption checkpoint at the last logged step: the counter just continues."""
    events = run_log(seed=6, pre=range(1, 301), post=range(301, 341))
    assert analyze(events).verdict == INSUFFICIENT  # invisible without more information
    restart = (
        next(i for i, e in enumerate(events) if isinstance(e, LossPoint) and e.step == 300) + 1
    )
    marker = ResumeMarker(line_no=0, step=300, text="ckptctl-train resume step=300")
    report = analyze([*events[:restart], marker, *events[restart:]])
    assert report.verdict == CONTINUOUS
    assert report.resume_step == 300 and report.resume_step_source == "log-marker"
    assert report.resume_detected_by == "log-marker"


def test_a_log_that_runs_past_the_given_checkpoint_step_is_not_split_on_a_guess() -> None:
    """Steps 1..340 and checkpoint step 300: a crash at 340 not resumed yet, or a seamless
    resume at 300 with no restore line; judging 301..340 as the resume could be false comfort."""
    events = run_log(seed=6, pre=range(1, 301), post=range(301, 341))
    report = analyze(events, resume_step=300)
    assert report.verdict == INSUFFICIENT and not report.decided
    assert any("cannot tell which" in line for line in report.explanation)
    assert not any(
        "cannot tell which" in line for line in analyze(events, resume_step=500).explanation
    )


def test_separate_baseline_file() -> None:
    events = run_log(seed=8, pre=range(1, 321), post=range(301, 341))
    split = next(i for i, e in enumerate(events) if isinstance(e, LossPoint) and e.step == 320) + 1
    baseline, resumed = events[:split], events[split:]
    report = analyze(resumed, baseline_events=baseline, resume_step=300)
    assert report.verdict == CONTINUOUS and report.resume_detected_by == "baseline-file"
    assert report.baseline is not None and report.baseline.source == "baseline"
    # Nothing logged by the resumed run yet: no decision, no crash.
    waiting = analyze([], baseline_events=baseline, resume_step=300)
    assert waiting.verdict == INSUFFICIENT and not waiting.decided


def test_multi_rank_log_uses_rank_zero() -> None:
    rng = random.Random(3)
    lines = []
    for step in range(1, 201):
        for rank in (1, 0):  # rank 1 prints first and has a very different local loss
            loss = level(step) * (1 + 0.01 * rng.gauss(0, 1)) + (5.0 if rank == 1 else 0.0)
            lines.append(
                f"[default{rank}]:ckptctl-train step={step} loss={loss!r} tokens_seen=0 lr=0.1 rank={rank}"
            )
    lines.append("restart")
    for step in range(151, 191):
        lines.append(
            f"[default0]:ckptctl-train step={step} loss={level(step)!r} tokens_seen=0 lr=0.1 rank=0"
        )
    report = analyze(parse_lines(lines), resume_step=150)
    assert report.rank == 0 and report.verdict == CONTINUOUS


def test_irregular_cadence_is_not_skipped_steps() -> None:
    """A throttled progress bar logs at uneven intervals."""
    rng = random.Random(2)
    steps, s = [], 0
    while s < 2000:
        s += rng.choice((12, 15, 17, 21, 34))
        steps.append(s)
    post = [t for t in steps if t > 1500][:25]
    report = analyze(run_log(seed=2, pre=steps, post=post), resume_step=1500)
    assert report.verdict == CONTINUOUS, report.explanation


def test_session_decides_at_the_nth_point_and_early_on_nan() -> None:
    cfg = WatchConfig(num_steps=10)
    pre = [
        f"ckptctl-train step={s} loss={level(s)!r} tokens_seen=0 lr=0.1 rank=0"
        for s in range(1, 201)
    ]
    session = WatchSession(config=cfg, resume_step=150)
    for line in pre:
        assert session.feed(line) is None
    decided_at = None
    for i, step in enumerate(range(151, 171), start=1):
        report = session.feed(
            f"ckptctl-train step={step} loss={level(step)!r} tokens_seen=0 lr=0.1 rank=0"
        )
        if report is not None:
            decided_at = i
            assert report.verdict == CONTINUOUS
            break
    assert decided_at == cfg.num_steps

    session = WatchSession(config=cfg, resume_step=150)
    for line in pre:
        session.feed(line)
    session.feed(f"ckptctl-train step=151 loss={level(151)!r} tokens_seen=0 lr=0.1 rank=0")
    report = session.feed("ckptctl-train step=152 loss=nan tokens_seen=0 lr=0.1 rank=0")
    assert report is not None and report.verdict == NAN


def test_hf_style_logs_without_steps_realign_by_epoch() -> None:
    rng = random.Random(1)

    def line(i: int) -> str:
        return str(
            {
                "loss": round(level(i) * (1 + 0.01 * rng.gauss(0, 1)), 4),
                "learning_rate": 1e-4,
                "epoch": round(i / 100, 2),
            }
        )

    lines = (
        [line(i) for i in range(1, 131)]
        + ["  Continuing training from global step 1000"]
        + [line(i) for i in range(101, 131)]
    )
    report = analyze(parse_lines(lines))
    assert report.step_kind == "epoch-aligned"
    assert report.first_resumed_step == 101  # lined up with the pre-failure point at the same epoch
    assert report.verdict == CONTINUOUS
    assert report.rerun is not None and report.rerun.num_compared == 20


def test_verdict_names_are_the_documented_ones() -> None:
    assert set(VERDICTS) == {
        "continuous",
        "spike",
        "nan",
        "replayed-steps",
        "skipped-steps",
        "diverged",
        "insufficient-data",
        "tokens-mismatch",
        "schedule-reset",
        "data-position-mismatch",
        "data-stream-reset",
    }
    assert "lightning-csv" in FORMATS


def test_a_curve_that_bends_inside_the_window_is_not_a_spike() -> None:
    """Steep descent, then a plateau (warmup ends, early training): the straight line
    through the window undershoots at its end; the local median does not."""

    def bent(step: int) -> float:
        return 3.6 - 0.03 * min(step, 40)

    for seed in range(5):
        rng = random.Random(seed)
        losses = {s: bent(s) * (1 + 0.015 * rng.gauss(0, 1)) for s in range(1, 61)}
        lines = [
            f"ckptctl-train step={s} loss={losses[s]!r} tokens_seen=0 lr=0.1 rank=0"
            for s in range(1, 47)
        ]
        lines.append(
            "ckptctl-train resumed from=/ckpt/step_40 step=40 world_size=1 saved_world_size=1"
        )
        lines += [
            f"ckptctl-train step={s} loss={losses[s]!r} tokens_seen=0 lr=0.1 rank=0"
            for s in range(41, 61)
        ]
        report = analyze(parse_lines(lines))
        assert report.resume_step == 40 and report.verdict == CONTINUOUS, report.explanation
        assert (
            report.baseline is not None and report.baseline.local_level > report.baseline.line_level
        )


@pytest.mark.parametrize(("first_step", "curved"), [(1, True), (200, False)])
def test_spread_measures_noise_rather_than_curvature(first_step: int, curved: bool) -> None:
    """Early in training a line through the window leaves the curvature in its
    residuals; the parabola's residuals keep much less of it, and on a window that
    is not curved they estimate the noise without bias."""
    sd = 0.01
    line_spreads, spreads = [], []
    for seed in range(5):
        rng = random.Random(seed)
        steps = list(range(first_step, first_step + 100))
        losses = [2.0 + 9.0 * (s + 30) ** -0.5 + rng.gauss(0, sd) for s in steps]
        line = fit_trend(steps, losses)
        line_spreads.append(
            robust_spread([y - line.at(x) for x, y in zip(steps, losses, strict=True)])
        )
        residuals = curvature_free_residuals(steps, losses)
        assert residuals is not None
        spreads.append(robust_spread(residuals))
    if curved:
        assert min(line_spreads) > 4 * sd
        assert max(s / ls for s, ls in zip(spreads, line_spreads, strict=True)) < 0.5
    else:
        assert statistics.mean(spreads) == pytest.approx(sd, rel=0.15)


def test_a_non_finite_loss_is_bad_even_when_no_resume_is_found() -> None:
    """An excerpt of the resumed run only (its restore line not in it), multi-line records
    whose loss is nan: no resume, no baseline, and still a bad run (``nan``, decided)."""
    lines = []
    for step in range(217050, 217054):
        lines += [f"--> STEP: {step - 217021}/104 -- GLOBAL_STEP: {step}", f"     | > loss: {'nan' if step > 217051 else '0.75'}"]
    report = analyze(parse_lines(lines))
    assert report.verdict == NAN and report.decided and report.first_resumed_step is None
    assert report.findings[0].step == 217052 and any("judged as a whole" in e for e in report.explanation)
    # The same log with finite losses: nothing to judge without a resume.
    finite = analyze(parse_lines([ln.replace("nan", "0.70") for ln in lines]))
    assert finite.verdict == INSUFFICIENT and not finite.decided and not finite.findings
