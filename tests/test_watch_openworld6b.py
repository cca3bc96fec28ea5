"""Rules of the open-world evaluation's round 6b (issue 23, helper watch6b: LLM fine-tuning and RL
producers), each on small lines written here: a step printed bare at the head of a pipe-separated
record (``leadstep``), a table printed inside box-drawing borders with clock cells (``logtables``).
The corpus of these families is tests/fixtures/losslogs_openworld (``ow_bare_step_pipes_*``,
``ow_box_table_clock_cells_*``; tests/test_watch_sources.py scores it)."""

from __future__ import annotations

import math

import pytest

from ckptctl.core.watch.leadstep import leading_step
from ckptctl.core.watch.logevents import LossPoint
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.core.watch.model import CONTINUOUS, REPLAYED, SPIKE
from ckptctl.ops.watch import watch_lines


def _points(lines: list[str], fast: bool) -> list[tuple[int | None, float]]:
    return [(e.step, e.loss) for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


@pytest.mark.parametrize(
    ("body", "step"),
    [
        ("40 | loss 6.6250 | lr 3.0e-04 | 13644.27ms", 40),
        ("   7|train_loss 2.5", 7),
        ("2024 loss 2.5", None),  # no cell separator: a year, a count, anything
        ("12.5 | loss 2.0", None),  # no integer
        ("step 40 | loss 2.0", None),
        ("40 | 2.0 | 3.0", None),  # no key after the first cell
    ],
)
def test_the_leading_step_needs_a_bare_integer_cell(body: str, step: int | None) -> None:
    assert leading_step(body) == step


@pytest.mark.parametrize("fast", [True, False])
def test_a_bare_head_cell_is_the_step_of_a_record_with_none(fast: bool) -> None:
    lines = [f"{s} | loss {5.0 - s / 100:.4f} | lr 3.0e-04 | {400 + s % 7:.2f}ms" for s in range(0, 200, 10)]
    assert _points(lines, fast) == [(s, round(5.0 - s / 100, 4)) for s in range(0, 200, 10)]


@pytest.mark.parametrize("fast", [True, False])
def test_a_record_that_names_its_step_keeps_it(fast: bool) -> None:
    # the head cell is a rank or a line count here: the named step wins
    lines = [f"3 | step {s} | loss {4.0 - s / 1000:.4f}" for s in range(100, 2000, 100)]
    assert [p[0] for p in _points(lines, fast)] == list(range(100, 2000, 100))


def _pipes(jump: float, first: int) -> list[str]:
    def line(s: int, f: float = 1.0) -> str:
        loss = (1.5 + 2.0 * (s / 300 + 1.5) ** -0.6 + 0.02 * math.sin(s / 7)) * f
        return f"{s} | loss {loss:.4f} | lr 2.50e-04 | {380 + s % 11:.2f}ms"

    out = [line(s) for s in range(0, 2001, 25)]
    out += ["Traceback (most recent call last):", "RuntimeError: NCCL communicator was aborted", "resuming from ckpt_1500.pt"]
    out += [line(s, 1 + jump * math.exp(-(s - first) / 300)) for s in range(first, 3001, 25)]
    return out


@pytest.mark.parametrize(("jump", "first", "verdict"), [(0.0, 1525, CONTINUOUS), (0.5, 1525, SPIKE), (0.0, 1025, REPLAYED)])
def test_bare_step_records_across_a_resume(jump: float, first: int, verdict: str) -> None:
    result = watch_lines(_pipes(jump, first), stop_when_decided=False)
    assert result.verdict == verdict


_HEAD = "\u2502step  loss    lr       elapsed  remaining\u2502"


def _box_row(s: int, loss: float, *, closed: bool = True) -> str:
    return f"\u2502{s:<5d} {loss:.4f}  2.0e-05  0:{s // 60:02d}:{s % 60:02d}  1:{59 - s // 60:02d}:00" + ("\u2502" if closed else "")


@pytest.mark.parametrize("fast", [True, False])
def test_a_boxed_table_with_clock_cells_is_read(fast: bool) -> None:
    rows = [_box_row(s, 3.0 - s / 1000) for s in range(10, 400, 10)]
    rows.append(_box_row(400, 2.6, closed=False))  # a row left open: the panel was cut
    assert _points([_HEAD, *rows], fast) == [(s, round(3.0 - s / 1000, 4)) for s in range(10, 401, 10)]


@pytest.mark.parametrize("fast", [True, False])
def test_a_clock_cell_is_no_number_but_a_word_still_ends_the_row(fast: bool) -> None:
    rows = [_box_row(s, 3.0 - s / 1000) for s in range(10, 200, 10)]
    rows.insert(5, "\u2502eval  done    -        0:00:10  1:00:00\u2502")  # a word where the step goes: no row
    assert [p[0] for p in _points([_HEAD, *rows], fast)] == list(range(10, 200, 10))


@pytest.mark.parametrize(("jump", "verdict"), [(0.0, CONTINUOUS), (0.5, SPIKE)])
def test_a_boxed_table_across_a_relaunch(jump: float, verdict: str) -> None:
    def loss(s: int, f: float = 1.0) -> float:
        return (0.8 + 2.0 * (s / 200 + 1.5) ** -0.6 + 0.015 * math.sin(s / 9)) * f

    lines = [_HEAD, *(_box_row(s, loss(s)) for s in range(10, 1200, 10))]
    lines += ["Resuming training from checkpoint-1000", _HEAD]
    lines += [_box_row(s, loss(s, 1 + jump * math.exp(-(s - 1000) / 150))) for s in range(1010, 2400, 10)]
    assert watch_lines(lines, stop_when_decided=False).verdict == verdict
