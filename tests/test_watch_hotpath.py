"""The fast path's shortcuts (``loghot``) read exactly what the general reader reads.

A guessed template (the one that followed the previous line's template last time) and a line
of repeated parts read by one ``findall`` give the general reader's events, on mixed input:
lines a template matches interleaved with lines it does not (other widths, other shapes, hex
words, digits of other scripts), restarts, multi-line records, a redrawn bar with a part that
goes the general way.
"""

from __future__ import annotations

import random

import pytest

from ckptctl.core.watch.losslog import LossLogParser


def _both(lines: list[str]) -> tuple[LossLogParser, list[str]]:
    """The fast parser (fed one line at a time) and its events; asserts the general reader's are the same."""
    fast = LossLogParser()
    got = [repr(e) for line in lines for e in fast.feed(line)] + [repr(e) for e in fast.flush()]
    slow = LossLogParser(fast=False)
    want = [repr(e) for e in slow.feed_lines(lines) + slow.flush()]
    assert got == want
    assert fast.unread_samples == slow.unread_samples
    assert fast.num_lines == slow.num_lines
    return fast, got


def _mixed(rng: random.Random, num: int) -> list[str]:
    lines = ["Initializing a new model from scratch"]
    step = 0
    for _ in range(num):
        step += 1
        r = rng.random()
        if r < 0.03 and step > 20:
            # a relaunch: start-up lines again, a restore line, the step goes back
            step -= rng.randrange(5, 15)
            lines.append("Initializing a new model from scratch")
            lines.append(f"Resuming training from checkpoint at step {step}")
        if r < 0.1:
            # a multi-line record: the step on one line, its loss and lr on the lines below
            lines.append(f"== step {step} ==")
            lines.append(f"  loss: {2 + 1 / step:.4f}")
            lines.append(f"  lr: {3e-4 * rng.random():.3e}")
            continue
        width = rng.choice((4, 6))  # the same words, numbers of another width: another template
        lines.append(f"iter {step}: loss {2 + 1 / step:.{width}f}, time {rng.gauss(500, 5):.2f}ms")
        if rng.random() < 0.3:
            lines.append(f"node-{rng.randrange(64):03d}:4100{rng.randrange(8)} [0] NCCL INFO comm 0x{rng.getrandbits(32):x} rank 3 nRanks 8")
        if rng.random() < 0.2:
            lines.append(f"    forward-backward ....: ({rng.gauss(480, 5):.2f}, {rng.gauss(490, 5):.2f})")
        if rng.random() < 0.05:
            lines.append(f"iter \u0661\u0662{step} | loss {3 + 1 / step:.3f}")  # a digit of another script
        if rng.random() < 0.05:
            lines.append(f"step {step}: train loss {2 + 1 / step:.4f}, val loss {2.1 + 1 / step:.4f}")
    return lines


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_guessed_templates_give_the_general_readers_events(seed: int) -> None:
    fast, got = _both(_mixed(random.Random(seed), 1500))
    assert fast._fast is not None and fast._fast.hits > 1000
    # the guesses were made: some template's successor is known
    assert any(t.next is not None for ts in fast._fast.by_key.values() for t in ts)
    assert sum("restart" in e or "restore" in e for e in got) >= 2


def test_a_template_of_a_hex_word_or_another_scripts_digit_is_never_guessed() -> None:
    lines = []
    for step in range(1, 120):
        lines.append(f"iter {step}: loss {2 + 1 / step:.4f}")
        lines.append(f"comm 0x{step * 7919:x} rank 0 iter {step}: loss {2 + 1 / step:.4f}")
        lines.append(f"iter \u0661{step}: loss {3 + 1 / step:.4f}")
    fast, _got = _both(lines)
    assert fast._fast is not None
    keys = {t.key for ts in fast._fast.by_key.values() for t in ts if t.regex.pattern.startswith(("comm", "iter \u0661"))}
    assert keys == {b""}


def _bar(epoch: int, batch: int, total: int, loss: float, fill: int) -> str:
    return f"Epoch {epoch}:  {100 * batch // total:2d}%|{'#' * fill:<10}| {batch}/{total} [00:{batch % 60:02d}<01:40, 5.91it/s, v_num=3, train_loss_step={loss:.3f}]"


@pytest.mark.parametrize("seed", [0, 1])
def test_repeated_parts_give_the_general_readers_events(seed: int) -> None:
    rng = random.Random(seed)
    lines = ["GPU available: True (cuda), used: True"]
    epoch, batch, total = 0, 0, 400
    for i in range(600):
        parts = []
        for _ in range(rng.randint(3, 8)):
            batch += 5
            if batch > total:
                epoch, batch = epoch + 1, 5
            parts.append(_bar(epoch, batch, total, 2 + rng.random(), 3))
        r = rng.random()
        if r < 0.05:
            parts[rng.randrange(len(parts))] = _bar(epoch, total + 5, total, 2.5, 3)  # N > T: the general way
        elif r < 0.1:
            parts[-1] = _bar(epoch, batch, total, 2.5, 4)  # another fill: another key, the part-by-part loop
        elif r < 0.13:
            parts[0] = parts[0].replace("5.91it/s", "15.91it/s")  # same key, wider: the loop
        lines.append("\r".join(parts))
        if i % 50 == 49:
            lines.append(f"Epoch {epoch}, global step {epoch * 80}: 'val_loss' reached 2.31 (best 2.31)")
        if i == 300:
            lines.append("Restored all states from the checkpoint at /ckpt/epoch=3-step=240.ckpt")
            epoch, batch = 3, 0
    fast, got = _both(lines)
    assert fast._fast is not None
    multis = [t.multi for ts in fast._fast.by_key.values() for t in ts if t.multi is not None]
    assert any(m.pattern != "(?!)" for m in multis)  # lines were read by one findall
    assert len(got) > 2000


def test_a_part_its_first_template_does_not_match_sends_the_line_to_the_loop() -> None:
    """Numbers before a timestamp keep their exact width: a part whose counter grew a digit has
    the same key but is no match of the template of the one-digit parts (the ``findall`` misses a
    part: the loop reads that line, each part by the template that matches it)."""
    rng = random.Random(4)
    lines = []
    for k in range(400):
        parts = []
        for i in range(rng.randint(3, 6)):
            step = 3 * k + i
            n = rng.randrange(10) if rng.random() < 0.9 else rng.randrange(10, 100)
            parts.append(f"it {n} 2024-01-01 10:{k % 60:02d}:{i:02d} step {step} loss {2 + 1 / (step + 1):.4f}")
        lines.append("\r".join(parts))
    fast, got = _both(lines)
    assert fast._fast is not None
    assert len(got) > 1000
