"""The fast path's cheaper forms read exactly what the general reader reads.

Line templates match digits as ``[0-9]`` (a digit of another script goes the general way),
escape only the characters a pattern reads as syntax, share one compiled recipe per source,
and read a digit-free evaluation header (``EVAL``) without the general reader.
"""

from __future__ import annotations

from ckptctl.core.watch.logrecipe import EVAL
from ckptctl.core.watch.losslog import LossLogParser


def _both(lines: list[str]) -> tuple[LossLogParser, list[str]]:
    """The fast parser (fed one line at a time) and its events; asserts the general reader's are the same."""
    fast = LossLogParser()
    got = [repr(e) for line in lines for e in fast.feed(line)] + [repr(e) for e in fast.flush()]
    slow = LossLogParser(fast=False)
    want = [repr(e) for e in slow.feed_lines(lines) + slow.flush()]
    assert got == want
    assert fast.unread_samples == slow.unread_samples
    return fast, got


def _kinds(p: LossLogParser) -> list[int]:
    assert p._fast is not None
    return [t.kind for ts in p._fast.by_key.values() for t in ts]


def test_an_evaluation_header_without_digits_is_read_by_its_template() -> None:
    lines: list[str] = []
    for step in range(1, 200):
        lines.append(f"step {step} | loss {2 + 1 / step:.4f} | lr 3.0e-04")
        if step % 20 == 0:
            lines.append("***** Running Evaluation *****")
            lines.append(f"  Num examples = {step * 10}")
            lines.append(f"eval | step {step} | val loss {2.5 + 1 / step:.4f}")
        if step % 30 == 0:
            # a record left open (a step, its loss on the next line) when the header comes
            lines.append(f"== step {step}000 ==")
            lines.append("***** Running Evaluation *****")
            lines.append(f"loss: {2.2 + 1 / step:.4f}")
    fast, got = _both(lines)
    assert EVAL in _kinds(fast)
    assert sum(" loss=" in e for e in got) > 150


def test_an_evaluation_header_as_a_part_of_a_redrawn_line() -> None:
    lines = []
    for step in range(1, 120):
        bar = f"{step}/500 [00:{step % 60:02d}<01:00, 2.01it/s]"
        tail = "***** Running Evaluation *****" if step % 7 == 0 else f"{{'loss': {2 + 1 / step:.4f}, 'epoch': {step / 500:.2f}}}"
        lines.append("\r".join([bar, bar, tail]))
    fast, got = _both(lines)
    assert EVAL in _kinds(fast)
    assert len(got) > 80


def test_digits_of_other_scripts_go_the_general_way() -> None:
    lines = []
    for step in range(1, 60):
        lines.append(f"step {step} | loss {2 + 1 / step:.4f}")
        # Arabic-Indic digits where the template had ASCII ones, and as text of their own
        lines.append(f"step {step} | loss \u0662.{step % 10}\u0663 | note \u0664\u0665")
        lines.append(f"iteration \u0661\u0662{step} | loss {3 + 1 / step:.3f}")
    fast, got = _both(lines)
    assert fast._fast is not None and fast._fast.hits > 40
    assert len(got) >= 59


def test_syntax_characters_in_a_line_are_literals_of_its_template() -> None:
    lines = []
    for step in range(1, 80):
        lines.append(
            f"[train] (rank 0) step={step} * loss: {2 + 1 / step:.4f} + [aux] | lr^2 $ {3e-4 / step:.3e} ? "
            f"a\\b # c-d & e~f tps: {15_000 + step * 7:,}"
        )
        lines.append(f"warning: [x] (y) <z> * + ? | ^ $ \\ # - & ~ {step}")
    fast, got = _both(lines)
    assert fast._fast is not None and fast._fast.hits > 120
    assert len(fast.recipe_code) <= 2  # one recipe per source, not one per template (the tps grows a digit)
    assert len(got) == 79 and all("LossPoint(" in e for e in got)
