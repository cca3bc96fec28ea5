"""Batch readers (``logbatch``) and guessed repeated-part lines (``loghot.guess_repeated``) read
exactly what the general reader reads.

A progress bar redrawn with ``\\r`` in one shape is read by one generated loop over the parts'
groups; it stops where a part's recipe gives no point (N > T, a record open, the format lock
not yet taken), and the part-by-part reading goes on from there. The lines here mix those cases
with epochs that change mid-line, NaN losses, repeated and fresh numbers, widths that grow, blank
parts, multi-line records and restore lines.
"""

from __future__ import annotations

import math
import random

import pytest

from ckptctl.core.watch import logbatch
from ckptctl.core.watch.logbatch import batch_source, group_forms
from ckptctl.core.watch.losslog import LossLogParser
from tests.test_watch_hotpath import _both  # (fast and general readers: the same events)


def _bar(epoch: int, n: int, total: int, loss: float | str, rate: str = "5.91") -> str:
    pct = 100 * n // total
    return f"Epoch {epoch}:  {pct:2d}%| {n}/{total} [00:{n % 60:02d}<01:40,  {rate}it/s, v_num=3, train_loss_step={loss}]"


def _lines(seed: int, num: int) -> list[str]:
    rng = random.Random(seed)
    lines = ["GPU available: True (cuda), used: True"]
    epoch, n, total = 0, 0, 400
    for i in range(num):
        parts = []
        for _ in range(rng.randint(3, 7)):
            n += rng.choice((1, 5, 5, 20))
            if n > total:
                epoch, n = epoch + 1, rng.randrange(1, 5)
            loss: float | str = round(rng.uniform(1, 3), rng.choice((2, 3, 3, 4)))
            if rng.random() < 0.02:
                loss = "nan"
            parts.append(_bar(epoch, n, total, f"{loss:.3f}" if isinstance(loss, float) else loss, rng.choice(("5.91", "5.91", "6.02"))))
        r = rng.random()
        if r < 0.04:
            parts[rng.randrange(len(parts))] = _bar(epoch, total + 7, total, 2.5)  # N > T: that part goes the general way
        elif r < 0.07:
            parts.insert(rng.randrange(len(parts)), "   ")  # a blank part
        elif r < 0.1:
            parts[-1] = parts[-1].replace("5.91it/s", "15.91it/s")  # same key, another width
        lines.append("\r".join(parts))
        if r > 0.97:
            lines += [f"Step {epoch * total + n}", f"loss: {rng.uniform(1, 3):.4f}", "lr: 3.000e-04", ""]  # a record over lines
        if i == num // 2:
            lines.append(f"Restored all states from the checkpoint at /ckpt/epoch={epoch}-step={n}.ckpt")
            n = max(1, n - 40)
    return lines


@pytest.mark.parametrize("seed", range(3))
def test_bars_read_by_batch_readers_give_the_general_readers_events(seed: int) -> None:
    fast, got = _both(_lines(seed, 700))
    assert fast._fast is not None
    batches = [t.batch for ts in fast._fast.by_key.values() for t in ts if t.batch is not None]
    assert batches, "no batch reader was made"
    assert fast._fast.prev_rep is not None, "no line was read by its guessed repeated template"
    assert sum("nan" in e for e in got) > 0 and len(got) > 2000


def test_a_batch_reader_is_the_recipe_in_a_loop() -> None:
    """The record-open and format-lock checks once before the loop; a part whose recipe gives
    None or False ends the loop there (the caller reads it again)."""
    p = LossLogParser()
    line = "\r".join(_bar(2, 100 + i, 400, f"{2 + i / 10:.3f}") for i in range(4))
    for _ in range(3):
        p.feed(line)
    assert p._fast is not None
    t = next(t for ts in p._fast.by_key.values() for t in ts if t.read is not None)
    src = batch_source(t.source, t.regex.groups, set(range(t.regex.groups)))
    assert src is not None
    assert src.count("P.pending") == 1 and "P.lock(" not in src and "return None" not in src
    assert "for g0, g1" in src and "break" in src and "append(_new(" in src
    assert batch_source(t.source.replace("not P.lock(_fmt)", "not P.lock(_fmt, True)"), t.regex.groups) is None
    assert batch_source(t.source, 1) is None


def test_group_forms_are_the_capturing_groups_in_order() -> None:
    assert group_forms(r"a(x(?:y)(z))[(]\((q)") == ["x(?:y)(z)", "z", "q"]
    assert group_forms(r"(nan|[0-9]{1,3})[)]") == ["nan|[0-9]{1,3}"]


def test_the_float_memo_stays_bounded() -> None:
    """Every part a fresh loss: the memo of number texts is emptied when full."""
    rng = random.Random(1)
    lines = []
    n = 0
    for _ in range(900):
        parts = []
        for _ in range(5):
            n = n % 390 + 1
            parts.append(_bar(1, n, 400, f"{rng.uniform(1, 3):.6f}"))
        lines.append("\r".join(parts))
    fast, got = _both(lines)
    assert fast._fast is not None
    assert 0 < len(fast._fast.floats) <= logbatch.MEMO
    assert len(got) == 4500
    assert all(not math.isnan(float(v)) for v in fast._fast.floats.values())
