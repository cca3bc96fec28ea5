"""RB-7's checks in ``analyze``: tokens, schedule, throughput, loss scale, lost lines vs skipped
steps, self-baseline, relative counters, the adaptive window (generated logs, one change each)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from ckptctl.core.watch.analyze import analyze
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.core.watch.model import (
    CONTINUOUS,
    INSUFFICIENT,
    LOSS_SCALE_RESTART,
    LOST_LOG_LINES,
    RELATIVE_COUNTER,
    REPLAYED,
    SCHEDULE_RESET,
    SELF_BASELINE,
    SKIPPED,
    SPIKE,
    THROUGHPUT_REGRESSION,
    TOKENS_MISMATCH,
    WatchReport,
)

T0 = 1_760_000_000.0
TOKENS_PER_STEP = 4096
SEC_PER_STEP = 0.5


def lr_cosine(step: int, warmup: int = 100, total: int = 4000, peak: float = 3e-4) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / (total - warmup)
    return 0.1 * peak + 0.9 * peak * 0.5 * (1 + math.cos(math.pi * frac))


def line(step: int, loss: float, *, shown: int | None = None, lr: float | None = None, tokens: int | None = None,
         tps: float | None = None, scale: float | None = None, wall: float | None = None) -> str:
    import time as _t

    ts = _t.strftime("%Y-%m-%d %H:%M:%S", _t.gmtime(wall)) + " INFO " if wall is not None else ""
    parts = [f"{ts}step {shown if shown is not None else step} | loss {loss:.4f}"]
    parts.append(f"lr {lr if lr is not None else lr_cosine(step):.4e}")
    parts.append(f"tokens_seen {tokens if tokens is not None else step * TOKENS_PER_STEP}")
    parts.append(f"tok/s {tps if tps is not None else TOKENS_PER_STEP / SEC_PER_STEP:.0f}")
    if scale is not None:
        parts.append(f"loss_scale {scale:g}")
    return " | ".join(parts)


def curve(step: float) -> float:
    return 2.0 + 8.0 * (step + 50) ** -0.4


def run_log(
    *, crash: int = 1300, ckpt: int = 1200, until: int = 1500, every: int = 10, seed: int = 0,
    post: Callable[[int, dict[str, float]], None] | None = None, marker: bool = True,
    pre_filter: Callable[[int], bool] | None = None, first: int | None = None, relative: bool = False,
) -> list[str]:
    rng = random.Random(seed)
    batches: dict[int, float] = {}

    def noise(s: int) -> float:
        # a re-run step trains on the same batch (a faithful resume): its noise, give or take a
        # tenth for non-deterministic kernels
        z = rng.gauss(0, 0.01)
        return batches[s] + 0.1 * z if s in batches else batches.setdefault(s, z)

    lines = []
    for s in range(every, crash + 1, every):
        if pre_filter is not None and not pre_filter(s):
            continue
        lines.append(line(s, curve(s) * (1 + noise(s)), wall=T0 + s * SEC_PER_STEP, scale=65536.0))
    lines.append("srun: error: node-[REDACTED]: task 3: Killed")
    if marker:
        lines.append(f"Resumed from step {ckpt} (restored checkpoint)")
    restart = T0 + crash * SEC_PER_STEP + 300
    start = first if first is not None else ckpt + every
    for s in range(start, until + 1, every):
        v: dict[str, float] = {"loss": curve(s) * (1 + noise(s)), "lr": lr_cosine(s), "tokens": s * TOKENS_PER_STEP,
                               "tps": TOKENS_PER_STEP / SEC_PER_STEP * (1 + rng.gauss(0, 0.01)), "scale": 65536.0}
        if post is not None:
            post(s, v)
        lines.append(line(s, v["loss"], shown=s - ckpt if relative else s, lr=v["lr"], tokens=int(v["tokens"]), tps=v["tps"],
                          scale=v["scale"], wall=restart + (s - start) * SEC_PER_STEP))
    return lines


def judge(lines: list[str], **kw: object) -> WatchReport:
    return analyze(parse_lines(lines), final=True, **kw)  # type: ignore[arg-type]


def test_a_good_resume_is_continuous_with_every_check_ok() -> None:
    r = judge(run_log())
    assert r.verdict == CONTINUOUS and r.confidence == "high"
    assert r.checks["tokens"]["ok"] and r.checks["schedule"]["ok"] and r.checks["throughput"]["ok"]
    assert not r.checks["loss_scale"]["restarted"] and not r.note_codes


def _shift_tokens(s: int, v: dict[str, float]) -> None:
    v["tokens"] -= 100 * TOKENS_PER_STEP  # the data loader replays 100 steps of data


def test_tokens_behind_the_checkpoint_are_a_mismatch() -> None:
    r = judge(run_log(post=_shift_tokens))
    assert r.verdict == TOKENS_MISMATCH
    assert r.checks["tokens"]["difference_steps"] == pytest.approx(-100)
    assert "replayed" in r.findings[0].message


def test_tokens_are_checked_against_the_manifest_value() -> None:
    # the log's counter is consistent with itself, but the checkpoint recorded fewer tokens
    r = judge(run_log(), checkpoint_tokens=1200 * TOKENS_PER_STEP - 50 * TOKENS_PER_STEP, resume_step=1200)
    assert r.verdict == TOKENS_MISMATCH and "checkpoint's" in r.findings[0].message
    assert judge(run_log(), checkpoint_tokens=1200 * TOKENS_PER_STEP, resume_step=1200).verdict == CONTINUOUS


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        (lambda s, v: v.__setitem__("lr", lr_cosine(s - 1200)), SCHEDULE_RESET),  # warm-up restarted
        (lambda s, v: v.__setitem__("lr", lr_cosine(s) * 10), SCHEDULE_RESET),  # LR x10
        (lambda s, v: None, CONTINUOUS),  # cosine decay carrying on
        (lambda s, v: v.__setitem__("lr", lr_cosine(s) * 1.05), CONTINUOUS),  # within tolerance
    ],
)
def test_schedule_continuity(change: Callable[[int, dict[str, float]], None], verdict: str) -> None:
    assert judge(run_log(post=change)).verdict == verdict


def test_a_schedule_started_over_late_in_the_decay() -> None:
    # at step 2,900 the cosine is at a quarter of its peak; started over it is back near the peak
    r = judge(run_log(crash=3000, ckpt=2900, until=3200, post=lambda s, v: v.__setitem__("lr", lr_cosine(s - 2800))))
    assert r.verdict == SCHEDULE_RESET and r.checks["schedule"]["lr"] > 2 * r.checks["schedule"]["predicted_lr"]
    # near the peak a restart is within the tolerance: said honestly, nothing to see
    assert judge(run_log(post=lambda s, v: v.__setitem__("lr", lr_cosine(s - 1100)))).verdict == CONTINUOUS


def test_constant_lr_is_predicted_flat() -> None:
    lines = [x.replace(f"lr {lr_cosine(int(x.split('step ')[1].split(' ')[0])):.4e}", "lr 3.0000e-04") if "step " in x else x
             for x in run_log()]
    r = judge(lines)
    assert r.verdict == CONTINUOUS and r.checks["schedule"]["predicted_lr"] == pytest.approx(3e-4)


def test_slow_replacement_node_is_a_throughput_note_not_a_verdict() -> None:
    r = judge(run_log(post=lambda s, v: v.__setitem__("tps", v["tps"] * 0.6)))
    assert r.verdict == CONTINUOUS and THROUGHPUT_REGRESSION in r.note_codes
    assert r.checks["throughput"]["ratio"] == pytest.approx(0.6, abs=0.03)


def test_loss_scale_restart_is_a_note() -> None:
    r = judge(run_log(post=lambda s, v: v.__setitem__("scale", 2.0**32 if s == 1210 else 65536.0)))
    assert r.verdict == CONTINUOUS and LOSS_SCALE_RESTART in r.note_codes


def test_lost_lines_with_time_are_not_skipped_steps() -> None:
    # 100 steps of lines lost mid-run; the timestamps show the time passed
    r = judge(run_log(pre_filter=lambda s: not 600 < s < 700))
    assert r.verdict == CONTINUOUS and LOST_LOG_LINES in r.note_codes


def test_a_jump_with_no_time_for_it_is_skipped_steps() -> None:
    # no restore line; the counter jumps 1000 steps (500 s of work) across a 300 s restart
    r = judge(run_log(marker=False, first=2300, until=2600))
    assert r.verdict == SKIPPED and "never trained" in r.findings[0].message


def test_relative_counter_after_a_restore_line() -> None:
    r = judge(run_log(relative=True))
    assert r.verdict == CONTINUOUS and RELATIVE_COUNTER in r.note_codes
    assert r.first_resumed_step == 1210


def test_relative_counter_without_restore_line_is_replayed() -> None:
    r = judge(run_log(relative=True, marker=False))
    assert r.verdict != CONTINUOUS


def test_self_baseline_catches_a_sustained_shift_after_two_points() -> None:
    def shift(s: int, v: dict[str, float]) -> None:
        v["loss"] *= 1.6 if s >= 300 else 1.0

    r = judge(run_log(crash=200, ckpt=200, until=1000, every=100, post=shift))
    assert r.verdict == SPIKE and r.confidence == "low" and SELF_BASELINE in r.note_codes
    assert r.findings[0].step == 300


def test_self_baseline_does_not_alarm_on_a_smooth_small_run() -> None:
    r = judge(run_log(crash=300, ckpt=300, until=1000, every=100))
    assert r.verdict == CONTINUOUS and r.confidence == "low"


def test_adaptive_window_decides_a_complete_short_log_but_not_a_live_one() -> None:
    lines = run_log(until=1270)  # 7 points after the resume, N = 20
    assert judge(lines).verdict == CONTINUOUS and judge(lines).confidence == "medium"
    live = analyze(parse_lines(lines))
    assert live.verdict == INSUFFICIENT and not live.decided
    short = judge(run_log(until=1230))  # 3 points: the fewest a 3-in-a-row spike shows in; low confidence
    assert short.verdict == CONTINUOUS and short.confidence == "low"
    assert judge(run_log(until=1230, post=_jump)).verdict == SPIKE
    assert judge(run_log(until=1220)).verdict == INSUFFICIENT  # 2 points: too few even for a complete log


def _jump(s: int, v: dict[str, float]) -> None:
    v["loss"] *= 1.6


def _with_save(lines: list[str], save: int) -> list[str]:
    """The log with a save line for step ``save`` right after that step's line."""
    at = next(i for i, text in enumerate(lines) if f"step {save} |" in text)
    return [*lines[: at + 1], f"  successfully saved checkpoint from iteration {save:8d} to /ckpt/run", *lines[at + 1 :]]


# The restore line's step against the log's own facts: (saved before the crash, restored,
# --resume-step, expected verdict, text in a note or finding)
MARKER_STEPS = [
    (1100, 1200, None, CONTINUOUS, None),  # the last save is the one restored
    (1250, 1200, None, REPLAYED, "trained again"),  # an older checkpoint than the last saved one
    (1250, 1200, 1200, CONTINUOUS, "fall-back"),  # ... named by --resume-step: deliberate
]


@pytest.mark.parametrize(("saved", "restored", "given", "verdict", "text"), MARKER_STEPS)
def test_restore_step_against_the_last_save(saved: int, restored: int, given: int | None, verdict: str, text: str | None) -> None:
    r = judge(_with_save(run_log(ckpt=restored), saved), resume_step=given)
    assert r.verdict == verdict, (r.findings, r.notes)
    if text is not None:
        assert any(text in s for s in [*r.notes, *(f.message for f in r.findings)])


def test_restore_step_past_the_last_step_reached_is_skipped() -> None:
    # the log reached 1300; the restore line names 2300: 1000 steps (500 s) in a 300 s restart
    r = judge(run_log(ckpt=2300, until=2600))
    assert r.verdict == SKIPPED and "only reached step 1300" in r.findings[0].message
    # 1500 (100 s of steps) fits in the 300 s the restart took: the log lost its tail
    r = judge(run_log(ckpt=1500, until=1800))
    assert r.verdict == CONTINUOUS and any("lost its tail" in n for n in r.notes)


def test_restore_step_past_the_last_step_without_a_clock_is_a_note() -> None:
    """With no timestamps, a restore past the last logged step cannot be told from a log that
    lost its buffered tail (the far more common case): a note, never skipped-steps."""
    from ckptctl.core.watch.logevents import ResumeMarker
    from ckptctl.core.watch.model import Segment, TracePoint
    from ckptctl.core.watch.resume import check_marker_steps

    pre = [TracePoint(step=s, loss=2.0, line_no=s, source="log") for s in range(100, 1400, 100)]
    marker = ResumeMarker(line_no=2000, step=2300, text="Resuming training from step-00002300")
    resumed = Segment(points=(TracePoint(step=2400, loss=2.0, line_no=2001, source="log"),),
                      reason="log-marker", marker=marker, source="log")  # fmt: skip
    findings, notes = check_marker_steps(resumed, pre, None, None, 0, 100, None)
    assert findings == [] and any("no timestamps to tell" in n for n in notes), notes


def _llmc_style(*, crash: int | None, until: int, jump: float = 0.0, banner_again: bool = True) -> list[str]:
    """An llm.c-style run: a parameter table, then "step N/T | loss ..." lines; a relaunch
    prints the table again and the counter carries on (no restore line)."""
    banner = ["+----------------+------------+", "| Parameter      | Value      |", "| batch size B   | 32         |",
              "| max seq len T  | 512        |", "+----------------+------------+", "num_parameters: 124475904"]
    rng = random.Random(3)
    lines = [*banner, "val loss 7.1102"]
    for s in range(1, until + 1):
        if s % 100 == 0:
            lines.append(f"val loss {curve(s) + 0.05:.4f}")
        if crash is not None and s == crash + 1:
            lines.append("srun: error: node-[REDACTED]: task 0: Exited with exit code 1")
            if banner_again:
                lines.extend(banner)
        loss = curve(s) * (1 + rng.gauss(0, 0.005)) + (jump if crash is not None and s > crash else 0.0)
        lines.append(f"step {s:4d}/5000 | loss {loss:.6f} | norm 1.0312 | lr 3.00e-04 | 171.20 ms | 3061255 tok/s")
    return lines


# (crash, jump, banner printed again, verdict, resume found)
RESTARTS = [
    (None, 0.0, False, INSUFFICIENT, False),  # one run; periodic "val loss" lines are not a restart
    (400, 0.0, True, CONTINUOUS, True),  # relaunched, counter carries on, loss continuous
    (400, 1.5, True, SPIKE, True),  # relaunched, loss level up: judged at the restart
]


@pytest.mark.parametrize(("crash", "jump", "banner", "verdict", "found"), RESTARTS)
def test_a_restart_without_restore_line_is_found_from_the_start_up_lines(
    crash: int | None, jump: float, banner: bool, verdict: str, found: bool
) -> None:
    r = judge(_llmc_style(crash=crash, until=600, jump=jump, banner_again=banner))
    assert r.verdict == verdict, (r.explanation, r.findings)
    assert (r.first_resumed_step == 401) is found
    if found:
        assert any("start-up lines printed again" in e for e in r.explanation)
        assert r.resume_detected_by == "start-up-lines"


def _lightning_bars(*, restored: str, jump: float = 0.0) -> list[str]:
    """Lightning progress bars (epoch-relative counters, 200 batches an epoch, the last
    validation loss in the postfix from epoch 1 on), a crash in epoch 3, a restore line
    naming the checkpoint by its path (``epoch=E-step=S.ckpt``), epoch 3 again."""
    rng = random.Random(5)
    batches: dict[int, float] = {}

    def bars(epoch: int, upto: int, shift: float = 0.0) -> str:
        parts = [f"Epoch {epoch}:   0%|          | 0/200 [00:00<?, ?it/s]"]
        for n in range(10, upto + 1, 10):
            s = epoch * 200 + n
            z = rng.gauss(0, 0.01)
            # epoch 3 again: the same batches (a faithful resume), give or take a tenth
            z = batches[s] + 0.1 * z if s in batches else batches.setdefault(s, z)
            post = f"v_num=3, train_loss_step={curve(s) * (1 + z) + shift:.3f}, lr=0.01"
            if epoch:
                post += f", val_loss={curve(epoch * 200) + 0.1:.3f}, train_loss_epoch={curve(epoch * 200):.3f}"
            parts.append(f"Epoch {epoch}:  {n // 2:2d}%|#         | {n}/200 [00:{n // 10:02d}<00:30, 6.10it/s, {post}]")
        return "\r".join(parts)

    lines = []
    for epoch in range(3):
        lines.append(bars(epoch, 200))
        lines.append("Validation DataLoader 0: 100%|##########| 20/20 [00:02<00:00, 9.8it/s]")
    lines.append(bars(3, 120))
    lines.append("slurmstepd: error: *** STEP 4411.0 ON node-[REDACTED] CANCELLED DUE TO NODE FAILURE ***")
    lines.append(f"Restoring states from the checkpoint path at /scratch/ckpt/{restored}")
    lines.append(bars(3, 200, jump))
    return lines


# (checkpoint path, loss shift after the resume, verdict)
LIGHTNING_RESUMES = [
    ("epoch=2-step=600.ckpt", 0.0, CONTINUOUS),  # epoch 3 starts again at 0/200: step 600 + n
    ("epoch=2-step=600.ckpt", 1.5, SPIKE),
    ("epoch=1-step=400.ckpt", 0.0, SKIPPED),  # weights of step 400, counters from 600: 401..609 never trained
]


@pytest.mark.parametrize(("restored", "jump", "verdict"), LIGHTNING_RESUMES)
def test_epoch_relative_bars_with_a_restore_path(restored: str, jump: float, verdict: str) -> None:
    r = judge(_lightning_bars(restored=restored, jump=jump))
    assert r.verdict == verdict, (r.explanation, r.findings)
    assert r.first_resumed_step == 610


def test_start_up_warning_printed_again_every_epoch_is_no_restart() -> None:
    warning = ["/opt/py/site-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will "
               "create 16 worker processes in total.", "  warnings.warn(_create_warning_msg("]
    lines = ["Model: 124.4M parameters", *warning]
    for s in range(10, 1210, 10):
        if s % 300 == 0:
            lines.extend(warning)
        lines.append(f"step {s} | loss {curve(s):.4f}")
    r = judge(lines)
    assert r.verdict == INSUFFICIENT and r.first_resumed_step is None, r.explanation
