"""A logging prefix naming the logger (Python's basic format ``INFO:name:``, Hydra's
``[time][name][INFO]``) does not make a line an evaluation line when the logger's name holds an
evaluation word (a project called ``mi-test``); the line's own words still do."""

from __future__ import annotations

import pytest

from ckptctl.core.watch.logevents import LossPoint
from ckptctl.core.watch.logkeys import without_logger
from ckptctl.core.watch.losslog import parse_lines


def _points(lines: list[str], *, fast: bool) -> list[LossPoint]:
    # 300 lines: enough for the fast path to build and use its line templates
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


TRAIN = {
    "basic": "INFO:mi-test:step {i} loss {loss:.4f} lr 1e-4",
    "basic-dotted": "WARNING:eval-harness.runner:step {i} loss {loss:.4f}",
    "hydra": "[2024-03-01 10:{m:02d}:{s:02d},000][val-sweep][INFO] - step {i} loss {loss:.4f}",
}
EVAL = {
    "basic": "INFO:__main__:validation step {i} loss {loss:.4f}",
    "hydra": "[2024-03-01 10:{m:02d}:{s:02d},000][train][INFO] - eval step {i} loss {loss:.4f}",
}


def _lines(template: str, n: int = 300) -> list[str]:
    return [template.format(i=i, loss=3.0 - i * 0.001, m=i // 60 % 60, s=i % 60) for i in range(1, n + 1)]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("name", sorted(TRAIN))
def test_a_logger_named_with_an_evaluation_word_keeps_training_lines(name: str, fast: bool) -> None:
    points = _points(_lines(TRAIN[name]), fast=fast)
    assert [p.step for p in points] == list(range(1, 301))
    assert points[-1].loss == pytest.approx(2.7)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("name", sorted(EVAL))
def test_the_lines_own_evaluation_word_still_counts(name: str, fast: bool) -> None:
    assert _points(_lines(EVAL[name]), fast=fast) == []


@pytest.mark.parametrize(
    ("text", "own"),
    [
        ("INFO:mi-test:step 1 loss 2", "step 1 loss 2"),
        ("[2024-03-01 10:00:00,000][a.b-c][DEBUG] - x", " - x"),
        ("INFO: step 1 loss 2", "INFO: step 1 loss 2"),  # no logger name: nothing to leave out
        ("test:INFO:step 1", "test:INFO:step 1"),  # not the basic format's order
        ("[val][step 3] loss 2", "[val][step 3] loss 2"),  # brackets with no level
    ],
)
def test_only_a_logging_prefix_is_left_out(text: str, own: str) -> None:
    assert without_logger(text) == own
