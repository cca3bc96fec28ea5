"""Rules of the open-world evaluation's round 4 (issue 23, helper watch23d: real resumes with both
sides in the text), each on small lines written here. The corpus of these families is
tests/fixtures/losslogs_openworld (``ow_resume_cli_*``; tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import math

import pytest

from ckptctl.core.watch.logevents import match_marker
from ckptctl.core.watch.model import CONTINUOUS, REPLAYED, SPIKE
from ckptctl.ops.watch import watch_lines


@pytest.mark.parametrize(
    "line",
    [
        "      !python train.py --steps 5050 --ckpt checkpoint.pt --save checkpoint_5050.pt --log-interval 5",
        "$ python run_clm.py --resume_from_checkpoint out/checkpoint-500 --output_dir out",
        "torchrun --nproc_per_node 8 train.py --load ckpt/iter_0003000 --save=ckpt",
        "python train.py --restore-file checkpoint_last.pt",
    ],
)
def test_a_command_line_option_is_no_save_or_restore(line: str) -> None:
    assert match_marker(line, line, 1, None) is None


@pytest.mark.parametrize(
    ("line", "kind", "step"),
    [
        ("Saved checkpoint: checkpoint_step_5000.pt", "save", 5000),
        ("* auto-resumed from step 5000", "restore", 5000),  # (a hyphen inside a word is no option)
        ("Checkpoint loaded. Resuming training from step 5000.", "restore", 5000),
        ("Resuming from step 5001 | loss 2.0870", "restore", 5001),
    ],
)
def test_save_and_restore_words_still_count(line: str, kind: str, step: int) -> None:
    marker = match_marker(line, line, 1, None)
    assert marker is not None and (marker.kind, marker.step) == (kind, step)


def _run(first: int, *, jump: float = 0.0, cli: bool = True) -> list[str]:
    def line(step: int, f: float = 1.0) -> str:
        return f"step {step} | loss {(2.0 + 3.0 * math.exp(-step / 800) + 0.02 * math.sin(step)) * f:.4f} | lr 0.000030"

    # (the save line after step 3000's line says the checkpoint holds step 3000)
    out = [line(s) for s in range(0, 3001, 100)] + ["Saved checkpoint: checkpoint_step_3000.pt"]
    if cli:
        out.append("!python train.py --steps 3200 --ckpt checkpoint.pt --save checkpoint_3200.pt")
    out += ["Checkpoint loaded from checkpoint.pt", f"Resuming from step {first} | loss 2.0870"]
    out.append(line(first, 1.01 + jump))  # (a step logged again has another value: no redraw)
    out += [line(s, 1 + jump) for s in range(3010, 3201, 10)]
    return out


def test_a_restore_line_naming_the_first_step_after_the_last_one_logged() -> None:
    result = watch_lines(_run(3001), stop_when_decided=False)
    assert result.verdict == CONTINUOUS
    assert (result.report.resume_step, result.report.first_resumed_step) == (3000, 3001)
    assert watch_lines(_run(3001, jump=0.6), stop_when_decided=False).verdict == SPIKE


def test_the_step_the_log_reached_named_and_logged_again_is_a_replay() -> None:
    result = watch_lines(_run(3000, cli=False), stop_when_decided=False)
    assert result.verdict == REPLAYED
    assert result.report.resume_step == 3000


def test_a_first_step_named_past_a_gap_keeps_its_number() -> None:
    # the log stopped at 2900 (its tail lost), the line names 3001 and the run starts there: the
    # line's step stands (no "one short" to say it names the next step)
    lines = [ln for ln in _run(3001) if not ln.startswith("step 3000 ")]
    result = watch_lines(lines, stop_when_decided=False)
    assert result.report.resume_step == 3001
