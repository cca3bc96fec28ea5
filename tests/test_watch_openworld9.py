"""Rules of the open-world evaluation's round 9 (issue 23, helper watch9), each on small lines written
here: a Markdown table naming the splits' losses by the split alone (``| Step | Train | Val |``,
``logtables``), its header read before the eval words in it (both read paths), a restore line naming its
position by a bare number (``Resumes from 400:``, ``logevents``), and a run's history printed again after
its restore line (``reprint``). The corpus of these families is tests/fixtures/losslogs_openworld
(``ow_notes_table_*``; tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ckptctl.core.watch.logevents import LossPoint, match_marker
from ckptctl.core.watch.logtables import table_header
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.core.watch.model import CONTINUOUS, REPLAYED, SPIKE
from ckptctl.ops.watch import watch_lines, watch_log

BOTH = pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
FIXTURES = Path(__file__).parent / "fixtures" / "losslogs_openworld"


def _points(lines: list[str], fast: bool) -> list[LossPoint]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


def _loss(step: int) -> float:
    return 1.5 + 2.0 / (1 + step / 300) + 0.01 * math.sin(step / 7)


def _table(steps: range, *, f: float = 1.0, first_new: int | None = None) -> list[str]:
    out = ["| Step | Train | Val | Session |", "|------|-------|-----|---------|"]
    for s in steps:
        g = f if first_new is not None and s >= first_new else 1.0
        out.append(f"| {s} | {_loss(s) * g:.3f} | {_loss(s) + 0.4:.3f} | {1 + s // 400} |")
    return out


def test_a_header_naming_the_splits_alone_names_their_losses() -> None:
    assert table_header("| Step | Train | Val | Gap | Session |") == ("step", "train_loss", "val_loss", "gap", "session")
    assert table_header("| Epoch | Training | Test |") == ("epoch", "training_loss", "test_loss")
    # a metric named beside the split, one split alone, no position: no loss table
    assert table_header("| Step | Train acc | Val acc |") is None
    assert table_header("| Step | Train | Notes |") is None
    assert table_header("| Session | Train | Val |") is None
    # a header that names its loss keeps its names
    assert table_header("| Step | Loss | Val |") == ("step", "loss", "val")


@BOTH
def test_the_rows_under_a_split_header_are_points(fast: bool) -> None:
    # the header holds an eval word ("Val"): it is a header all the same, not an eval section's title
    pts = _points(["### loss table", "", *_table(range(100, 1100, 100))], fast)
    assert [p.step for p in pts] == list(range(100, 1100, 100))
    assert pts[0].loss == pytest.approx(round(_loss(100), 3))


def test_a_bare_number_after_resume_from_is_the_step() -> None:
    for text, step in (("Resumes from 400:", 400), ("Resumed from 1200.", 1200), ("resuming from 5000", 5000)):
        marker = match_marker(text, text, 1, None)
        assert marker is not None and marker.kind == "restore" and marker.step == step, text
    # a number with a noun after it is no position
    assert match_marker("resuming from 12 images", "resuming from 12 images", 1, None) is None


def test_history_printed_again_after_the_restore_line_is_the_run_before() -> None:
    lines = ["## session 3", "Resuming from `checkpoint-1500`.", *_table(range(50, 2601, 50))]
    result = watch_lines(lines, stop_when_decided=False)
    assert result.verdict == CONTINUOUS
    assert any("history printed" in n for n in result.report.notes)
    jumped = ["## session 3", "Resuming from `checkpoint-1500`.", *_table(range(50, 2601, 50), f=1.6, first_new=1550)]
    assert watch_lines(jumped, stop_when_decided=False).verdict == SPIKE


def test_a_counter_below_the_checkpoint_step_stays_a_replay() -> None:
    # the rows never come back to the step the restore line named: the loop ran again (no history)
    lines = ["Initializing from ckpt/checkpoint_7000.pt", *(f"iter {s}: loss {_loss(s):.4f}" for s in range(10, 400, 10))]
    result = watch_lines(lines, stop_when_decided=False)
    assert result.verdict == REPLAYED
    assert not any("history printed" in n for n in result.report.notes)


@pytest.mark.parametrize(
    ("name", "verdict"),
    [("ow_notes_table_ok.log", CONTINUOUS), ("ow_notes_table_spike.log", SPIKE),
     ("ow_notes_table_bare_ok.log", CONTINUOUS), ("ow_notes_table_bare_spike.log", SPIKE)],
)
def test_the_notes_table_fixtures(name: str, verdict: str) -> None:
    result = watch_log(str(FIXTURES / name))
    assert result.verdict == verdict
    assert result.report.resume_step == 2000
