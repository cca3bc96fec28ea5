"""Lines of many ``\\r`` parts (progress bars) read by a line plan give the general reader's events."""

from __future__ import annotations

import random

import pytest

from ckptctl.core.watch import logparts
from ckptctl.core.watch.logparts import MAX_PLAN_BUILDS, PLAN_AFTER, make_plan
from ckptctl.core.watch.losslog import LossLogParser


def _bar(rng: random.Random, n: int, total: int) -> str:
    pct = 100 * n // total
    return f"{pct:3d}%|{'#' * (pct // 10):<10}| {n}/{total} [{n // 120:02d}:{n % 60:02d}<{(total - n) // 120}:00, {rng.gauss(2.0, 0.05):.2f}it/s]"


def _lightning(rng: random.Random, epoch: int, n: int, total: int) -> str:
    return f"Epoch {epoch}:  {100 * n // total:2d}%| {n}/{total} [00:{n % 60:02d}<01:40,  5.91it/s, v_num=3, train_loss_step={rng.uniform(1, 3):.3f}]"


def _line(rng: random.Random, state: dict[str, int]) -> list[str]:
    """One physical line (or a few): mostly progress bars of several parts, with the things that
    change how a part is read mixed in (a multi-line record open, blank and empty parts, widths
    that grow, a dict after the last redraw, a restore line)."""
    kind = rng.randrange(10)
    state["n"] += rng.choice((1, 1, 1, 7, 93))
    n, total = state["n"], 300_000
    if kind < 4:
        bars = [_bar(rng, n + i, total) for i in range(rng.choice((3, 10, 10)))]
        tail = f"{{'loss': {rng.uniform(1, 3):.4f}, 'learning_rate': {rng.uniform(1e-5, 5e-5):.6e}, 'epoch': {n / total:.2f}}}" if rng.random() < 0.5 else ""
        return ["\r".join(bars) + tail]
    if kind < 6:
        epoch = n // 5000
        parts = [_lightning(rng, epoch, n % 5000 + i, 5000) for i in range(rng.randint(2, 6))]
        if rng.random() < 0.2:
            parts.insert(rng.randrange(len(parts)), rng.choice(("", "   ")))
        return ["\r".join(parts) + rng.choice(("", "\r"))]
    if kind == 6:  # a record whose metrics follow on their own lines, with bars in between
        return [f"Step {n}", "\r".join(_bar(rng, n + i, total) for i in range(4)), f"loss: {rng.uniform(1, 3):.4f}", f"lr: {rng.uniform(1e-5, 5e-5):.3e}", ""]
    if kind == 7:
        return [f"Resuming training from checkpoint-{n} at step {n}"]
    if kind == 8:
        return [f"[rank0]: step {n}: loss {rng.uniform(1, 3):.4f}\r[rank0]: step {n + 1}: loss {rng.uniform(1, 3):.4f}"]
    return ["NCCL INFO Channel 00/32 :    0   1   2   3"]


@pytest.fixture
def plan_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans made at a key's first line read part by part (``PLAN_AFTER`` lines by default)."""
    monkeypatch.setattr(logparts, "PLAN_AFTER", 1)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.usefixtures("plan_at_once")
def test_line_plans_give_the_general_readers_events(seed: int) -> None:
    rng = random.Random(seed)
    state = {"n": rng.randrange(1, 5000)}
    lines = [x for _ in range(3000) for x in _line(rng, state)]
    for feed_one in (False, True):
        fast = LossLogParser()
        if feed_one:
            got = [e for line in lines for e in fast.feed(line)] + fast.flush()
        else:
            got = fast.feed_lines(lines) + fast.flush()
        slow = LossLogParser(fast=False)
        want = slow.feed_lines(lines) + slow.flush()
        assert [repr(e) for e in got] == [repr(e) for e in want]
        assert fast.unread_samples == slow.unread_samples
        assert fast._fast is not None
        assert fast._fast.plans, "no line plan was made"
        assert fast._fast.plan_hits > len(lines) // 10, "the plans were not used"


@pytest.mark.usefixtures("plan_at_once")
def test_a_plan_matches_each_part_by_its_own_template() -> None:
    """A plan is the parts' templates joined by ``\\r``: a line whose parts would need another split
    (a part's text moved across a ``\\r``) does not match it."""
    p = LossLogParser()
    rng = random.Random(3)
    line = "\r".join(_lightning(rng, 1, 100 + i, 5000) for i in range(3))
    for _ in range(3):
        p.feed(line)
    fast = p._fast
    assert fast is not None
    plan = next(iter(fast.plans.values()))[0]
    assert plan.regex.fullmatch(line)
    assert not plan.regex.fullmatch(line.replace("\r", " ", 1) + "\r")
    assert not plan.regex.fullmatch(line.replace("Epoch 1", "Epoch 1\r", 1))
    assert make_plan(line.split("\r"), [None, None, None]) is not None  # blank parts only: literal text


@pytest.mark.usefixtures("plan_at_once")
def test_lines_whose_parts_change_widths_each_time_stop_getting_plans() -> None:
    """A number kept at its exact width (before a timestamp) that changes width in a random part of
    each line: each line would need another plan (a regex compile a line); after
    ``MAX_PLAN_BUILDS`` for the key the line is read part by part, with the same events."""
    rng = random.Random(5)

    def line() -> str:
        return "\r".join(f"it {rng.choice((rng.randrange(10), rng.randrange(10, 100)))} 2024-01-01 10:00:00 step 7 loss 1.5" for _ in range(12))

    lines = [line() for _ in range(300)]
    fast = LossLogParser()
    got = fast.feed_lines(lines) + fast.flush()
    slow = LossLogParser(fast=False)
    assert [repr(e) for e in got] == [repr(e) for e in slow.feed_lines(lines) + slow.flush()]
    assert fast._fast is not None
    assert [made for made, _ in fast._fast.plan_state.values()] == [MAX_PLAN_BUILDS]


def test_a_plan_is_made_after_plan_after_lines_of_its_key() -> None:
    """A plan's compile costs what a few hundred lines read part by part do: a key that comes
    back fewer times gets none (Lightning's bars change key with each ``#`` of the bar)."""
    rng = random.Random(8)
    lines = ["\r".join(_lightning(rng, 1, 1000 + 3 * k + i, 5000) for i in range(3)) for k in range(PLAN_AFTER + 20)]  # (widths fixed)
    p = LossLogParser()
    for k, line in enumerate(lines):
        p.feed(line)
        assert p._fast is not None
        assert bool(p._fast.plans) == (k + 1 >= PLAN_AFTER + 1), k  # (the first line makes the templates)
    assert p._fast.plan_hits == len(lines) - PLAN_AFTER - 1
