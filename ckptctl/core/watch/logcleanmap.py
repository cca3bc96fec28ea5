"""A line's cleaned text with a map back to the raw line (``logfast`` makes templates of raw lines).

Pure, stdlib only.
"""

from __future__ import annotations

import re

from ckptctl.core.watch import logtokens as lt

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b")
_TAG_RE = re.compile(r"\[([A-Za-z_]*?)(\d{1,9})\]:\s?")


def clean_map(raw: str) -> tuple[str, list[int], list[tuple[int, int]]] | None:
    """``clean_line(raw)`` text, the raw index of each of its characters, and the raw spans of the
    tags' numbers (the first is the rank); None when the two cleanings could disagree."""
    keep: list[int] = []
    pos = 0
    for ansi in _ANSI_RE.finditer(raw):
        keep.extend(range(pos, ansi.start()))
        pos = ansi.end()
    keep.extend(range(pos, len(raw)))
    text = "".join(raw[i] for i in keep)
    if "\n" in text:
        return None
    digits: list[tuple[int, int]] = []
    start = 0
    for _ in range(2 if text.startswith("[") else 0):
        m = _TAG_RE.match(text, start)
        if m is None:
            break
        a, b = keep[m.start(2)], keep[m.end(2) - 1] + 1
        if b - a != m.end(2) - m.start(2):
            return None
        digits.append((a, b))
        start = m.end()
    rest = text[start:]
    lead = len(rest) - len(rest.lstrip())
    stripped = rest.strip()
    index = keep[start + lead : start + lead + len(stripped)]
    if stripped != lt.clean_line(raw)[0]:
        return None
    return stripped, index, digits
