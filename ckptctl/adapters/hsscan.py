"""Hyperscan engine for the classify prefilter (``ckptctl.core.classify.BlockScanner``).

Python's ``re`` has no multi-literal search: the stdlib engine needs about a
dozen passes per block and levels off near 100 MB/s. Hyperscan (the
``hyperscan`` package, ``ckptctl[fast]``) compiles every keyword into one
database and finds all of them in one pass over the block, at memory speed
for this catalog. Only the keyword search moves here: the matcher still checks
each keyword with ``in`` and runs the signatures' ``re`` patterns on the
candidate lines, so the verdict is the same as with the stdlib engine (tested).

``hyperscan`` is imported inside ``HyperscanBlockScanner`` only;
``available()`` says whether it can be.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

NAME = "hyperscan"


def available() -> bool:
    """Whether the ``hyperscan`` package imports (its wheel bundles the library)."""
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def _literal(keyword: bytes) -> bytes:
    """``keyword`` as a Hyperscan expression that matches exactly its bytes."""
    return b"".join(b"\\x%02x" % b for b in keyword)


class HyperscanBlockScanner:
    """All keywords in one Hyperscan block-mode database; one ``scan`` per block.

    Every occurrence is reported (no ``HS_FLAG_SINGLEMATCH``: that would report a
    keyword once per block, and each line needs its own). The hint of a line is
    the bit mask of the keywords that start in it, so ``keywords_in`` needs no
    second search. Keywords are literals: no ``HS_FLAG_PREFILTER`` or
    ``HS_FLAG_CASELESS`` is needed (they are case-sensitive, like the ``in``
    check after them), and the start of a match is its end minus its length.
    """

    name = NAME

    def __init__(self, keywords: Sequence[bytes]) -> None:
        import hyperscan

        self._lengths = [len(kw) for kw in keywords]
        self._bits = [1 << k for k in range(len(keywords))]
        self._db: Any = None
        self._scratch: Any = None
        if keywords:
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(
                expressions=[_literal(kw) for kw in keywords],
                ids=list(range(len(keywords))),
                flags=[0] * len(keywords),
            )
            self._db = db

    def candidate_lines(self, block: bytes) -> list[tuple[int, int]]:
        if self._db is None or not block:
            return []
        hits: list[tuple[int, int]] = []
        append = hits.append

        def on_match(keyword: int, _from: int, to: int, _flags: int, _context: object) -> None:
            append((to, keyword))

        self._db.scan(block, match_event_handler=on_match)
        lengths = self._lengths
        bits = self._bits
        rfind = block.rfind
        find = block.find
        lines: dict[int, int] = {}
        line_start = 0
        line_end = -1  # [line_start, line_end]: the line of the last hit, newline included
        for to, keyword in hits:
            at = to - lengths[keyword]
            if not line_start <= at <= line_end:
                line_start = rfind(b"\n", 0, at) + 1
                line_end = find(b"\n", at)
                if line_end == -1:
                    line_end = len(block)
            lines[line_start] = lines.get(line_start, 0) | bits[keyword]
        return sorted(lines.items())

    def keywords_in(self, line: bytes, hint: int) -> Iterable[int]:
        found = []
        while hint:
            low = hint & -hint
            found.append(low.bit_length() - 1)
            hint ^= low
        return found
