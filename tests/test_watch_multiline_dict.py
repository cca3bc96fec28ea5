"""A dict record printed over several lines (``pprint``, ``json.dumps(indent=2)``) reads as the one-line dict."""

from __future__ import annotations

import json
import pprint
import time

import pytest

from ckptctl.core.watch.logevents import LossPoint
from ckptctl.core.watch.logspread import MAX_CHARS, MAX_LINES, opens
from ckptctl.core.watch.losslog import LossLogParser, parse_lines

BOTH = pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])


def _points(lines: list[str], fast: bool) -> list[LossPoint]:
    return [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]


def _wide(step: int, loss: float) -> dict[str, float]:
    """A record too wide for pprint's 80 columns (one key a line)."""
    return {"loss": loss, "grad_norm": 1.25 + step / 1000, "learning_rate": 2e-6 * (1 - step / 5000),
            "rewards/format_reward": 0.5, "completion_length": 312.5, "epoch": round(step / 400, 2)}


def _key(p: LossPoint) -> tuple[object, ...]:
    return (p.step, p.loss, p.epoch, sorted(p.metrics.items()), p.fmt)


@BOTH
def test_pprint_record_reads_as_the_one_line_dict(fast: bool) -> None:
    recs = [_wide(s, 2.0 - s / 1000) for s in range(10, 310, 10)]
    spread = [line for r in recs for line in pprint.pformat(r).splitlines()]
    assert len(spread) == 6 * len(recs)  # (the shape under test: one key a line)
    one_line = [str(r) for r in recs]
    got, want = _points(spread, fast), _points(one_line, fast)
    assert len(got) == len(recs)
    assert [_key(p) for p in got] == [_key(p) for p in want]
    assert [p.line_no for p in got] == list(range(1, len(spread), 6))  # a record's first line


@BOTH
def test_json_indent_record_with_its_step_and_nesting(fast: bool) -> None:
    lines = ["run started"]
    for s in range(100, 2100, 100):
        lines += json.dumps({"step": s, "train": {"loss": 3.0 - s / 1000, "lr": 3e-4}, "tokens": s * 4096}, indent=2).splitlines()
    got = _points(lines, fast)
    assert [p.step for p in got] == list(range(100, 2100, 100))
    assert [p.loss for p in got] == pytest.approx([3.0 - s / 1000 for s in range(100, 2100, 100)])
    assert all(p.metrics.get("lr") == 3e-4 for p in got)


@BOTH
def test_interleaved_lines_are_read_and_a_restore_still_counts(fast: bool) -> None:
    lines: list[str] = []
    for s in range(20, 420, 20):
        lines += ["***** Running training *****"] if s == 200 else []
        lines += ["Resuming training from checkpoint-180"] if s == 200 else []
        lines += pprint.pformat(_wide(s, 1.5)).splitlines()
        lines.append(f" {s // 4}%|#####     | {s}/800 [01:00<02:00, 1.2s/it]")
    events = parse_lines(lines, fast=fast)
    points = [e for e in events if isinstance(e, LossPoint)]
    assert len(points) == 20
    restores = [e for e in events if not isinstance(e, LossPoint) and getattr(e, "kind", None) == "restore"]
    assert [r.line_no for r in restores] == [lines.index("Resuming training from checkpoint-180") + 1]


@BOTH
def test_an_unclosed_dict_does_not_swallow_the_log(fast: bool) -> None:
    lines = ["{'loss': 9.99,", " 'grad_norm': 1.0,"]  # a record cut off (the process killed mid-print)
    lines += [str({"loss": 2.0 - s / 1000, "learning_rate": 1e-4, "epoch": s / 100}) for s in range(10, 200, 10)]
    got = _points(lines, fast)
    assert [p.loss for p in got] == pytest.approx([2.0 - s / 1000 for s in range(10, 200, 10)])
    # ... and at the end of the input, an open record is read line by line (nothing hangs, no point made up)
    tail = [*lines, "{'loss': 5.0,", " 'epoch': 3.0,"]
    assert len(_points(tail, fast)) == len(got)


@BOTH
def test_a_record_past_the_bound_is_dropped_and_reading_goes_on(fast: bool) -> None:
    keys = [f" 'metric_{i}': {i}," for i in range(MAX_LINES + 5)]
    big = ["{'loss': 7.5,", *keys, " 'epoch': 0.5}"]
    small = pprint.pformat(_wide(40, 1.25)).splitlines()
    got = _points([*big, *small], fast)
    assert [p.loss for p in got] == [1.25]
    # within the bound the same record is read
    ok = ["{'loss': 7.5,", *keys[: MAX_LINES - 3], " 'epoch': 0.5}"]
    assert [p.loss for p in _points(ok, fast)] == [7.5]
    wide = ["{'loss': 7.5,", f" 'note': '{'x' * MAX_CHARS}',", " 'epoch': 0.5}"]
    assert _points(wide, fast) == []


@BOTH
def test_hostile_input_stays_bounded_and_linear(fast: bool) -> None:
    parser = LossLogParser(fast=fast)
    t0 = time.process_time()
    parser.feed_lines(["{"] + [" 'a': 1,"] * 200_000)
    parser.feed_lines(["{'a': {'b': ["] * 20_000)
    assert len(parser.spread.lines) <= MAX_LINES + 1
    parser.flush()
    assert not parser.spread.open
    assert time.process_time() - t0 < 30


def test_what_opens_a_record() -> None:
    assert opens("{'loss': 0.0,") and opens("{") and opens("metrics = {") and opens('INFO trainer: {"step": 10,')
    assert not opens("{'loss': 0.0}") and not opens("if (x) { y = 1;") and not opens("step {step:3d} loss {loss:.3f}")
    assert not opens("{'loss': 0.0")  # (no comma: a line cut short, not pprint's)
