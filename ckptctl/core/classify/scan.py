"""The scan engine: a byte-level keyword prefilter and per-line signature matching (pure).

``Matcher`` compiles an ordered catalog: ``candidate_lines`` finds the lines of a
block that may hold a signature (through a ``BlockScanner``: the stdlib
``ReBlockScanner`` here, Hyperscan in ``ckptctl.adapters.hsscan``), and
``match_bytes`` tries, in catalog order, only the signatures whose keywords the
line holds; the first that matches wins, and the line's shape
(``attribute_line``) fills the host/rank/GPU/peer its pattern did not name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ckptctl.core.classify.attribution import (
    attribute_line,
    clip_text,
    is_plausible_host,
    strip_ansi,
)
from ckptctl.core.classify.catalog import MAX_MATCH_CHARS, XID_PATTERN_TEMPLATE, Signature
from ckptctl.core.classify.envelope import escaped_forms, join_hard_wrapped, looks_enveloped, unwrap


@dataclass(frozen=True, slots=True)
class LineMatch:
    """A signature matched one line; ``fields`` holds its named groups and prefix attributes."""

    signature: Signature
    fields: Mapping[str, str]
    at: int
    """Character offset of the match in the line (keeps the evidence clip around it)."""
    text: str
    """The decoded line (ANSI colour codes removed)."""
    index: int = -1
    """Position of ``signature`` in the matcher's catalog."""


def _trie_pattern(words: Iterable[bytes]) -> bytes:
    """A regex alternation of ``words`` factored by common prefixes (one branch per byte)."""
    root: dict[int | None, Any] = {}
    for word in words:
        node = root
        for byte in word:
            node = node.setdefault(byte, {})
        node[None] = {}

    def build(node: dict[int | None, Any]) -> bytes:
        branches = [re.escape(bytes([b])) + build(child) for b, child in sorted(
            ((k, v) for k, v in node.items() if k is not None), key=lambda kv: kv[0]
        )]
        if not branches:
            return b""
        optional = None in node
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        if optional:
            return b"(?:" + body + b")?" if len(branches) == 1 else body + b"?"
        return body

    return build(root)


#: Shortest anchor cut from a keyword (shorter keywords are used whole).
_MIN_ANCHOR_BYTES = 4


def _byte_freq() -> dict[int, float]:
    """Approximate share of each byte in text logs (numbers, English words, padding)."""
    freq: dict[str, float] = {" ": 0.14, "e": 0.06, "t": 0.045}
    for chars, share in (
        ("aoinsr", 0.04), ("lcdumh", 0.025), ("pfgbwy", 0.015), ("kv", 0.007), ("xjqz", 0.003),
        ("0123456789", 0.03), (".:/-_,", 0.02), ("[]()\"", 0.01), ("=", 0.008), ("|'", 0.004),
        ("INFO", 0.01), ("ERATCS", 0.008), ("DGLMPUW", 0.004), ("X", 0.001),
    ):
        for c in chars:
            freq[c] = share
    return {ord(c): f for c, f in freq.items()}


_BYTE_FREQ = _byte_freq()


def _byte_cost(byte: int) -> float:
    """Relative cost of a prefilter pass for anchors starting with ``byte``.

    ``re`` finds a one-byte literal prefix with ``memchr`` and tries the alternation
    at each occurrence: a pass keyed on a rare byte ("X", "K") runs near memory
    speed, one on "e" or a space crawls. (Two-byte keys were tried: ``re`` scans
    for them more slowly than ``memchr`` and they did not pay off.)
    """
    return 1.0 + 200.0 * _BYTE_FREQ.get(byte, 0.002)


def plan_prefilter(keywords: Sequence[bytes]) -> dict[int, list[tuple[bytes, int]]]:
    """Anchors grouped by first byte: few groups, on rare bytes (one pass per group).

    Every occurrence of a keyword contains each of its suffixes, so a keyword can
    be looked for by any suffix of at least ``_MIN_ANCHOR_BYTES`` (more candidate
    lines, each verified later). A greedy set cover picks the first bytes that
    anchor the most keywords per unit of cost. Returns ``{byte: [(anchor,
    keyword index), ...]}``. Measured on the benchmark log (bench/bench_classify.py):
    76 signatures need 11 passes, about 100 MB/s, where one pass per keyword's
    own first byte needed 41 (15 MB/s).
    """
    options: list[dict[int, int]] = []
    for kw in keywords:
        need = min(len(kw), _MIN_ANCHOR_BYTES)
        opts: dict[int, int] = {}
        for i in range(len(kw) - need + 1):
            opts.setdefault(kw[i], i)  # earliest position: the longest anchor
        options.append(opts)
    uncovered = set(range(len(keywords)))
    chosen: set[int] = set()
    while uncovered:
        counts: dict[int, int] = {}
        for i in uncovered:
            for b in options[i]:
                counts[b] = counts.get(b, 0) + 1
        best = max(counts, key=lambda b: (counts[b] / _byte_cost(b), -b))
        chosen.add(best)
        uncovered = {i for i in uncovered if best not in options[i]}
    # Greedy cover keeps passes that later choices made redundant (an early pass on "s"
    # whose keywords all have an anchor on passes chosen after it): drop them, costliest
    # first, while every keyword keeps an anchor on a remaining pass.
    for b in sorted(chosen, key=lambda b: (-_byte_cost(b), b)):
        rest = chosen - {b}
        if all(not (opts.keys() & {b}) or opts.keys() & rest for opts in options):
            chosen = rest
    groups: dict[int, list[tuple[bytes, int]]] = {}
    for index, (kw, opts) in enumerate(zip(keywords, options, strict=True)):
        # The passes are chosen; the longest anchor among them is the most specific
        # (fewer lines to verify) and costs the pass little more.
        b = min((b for b in opts if b in chosen), key=lambda b: (opts[b], _byte_cost(b)))
        groups.setdefault(b, []).append((kw[opts[b] :], index))
    return groups


class BlockScanner(Protocol):
    """Multi-literal search over a block of whole lines: the prefilter's engine.

    Made by a ``ScannerFactory`` from the catalog's keywords (byte strings, case
    sensitive); a keyword's index in that list is its id. Call order: for each
    block, ``candidate_lines`` once, then ``keywords_in`` for lines it returned.
    Both may over-report (the matcher verifies every keyword with ``in``), never
    under-report, so the verdict cannot depend on the engine.
    """

    name: str
    """Engine name shown in the result (``re``, ``hyperscan``)."""

    def candidate_lines(self, block: bytes) -> list[tuple[int, int]]:
        """``(line start, hint)`` in block order, for at least every line of
        ``block`` in which a keyword starts (a keyword may end with the newline)."""
        ...

    def keywords_in(self, line: bytes, hint: int) -> Iterable[int]:
        """Ids of the keywords that may occur in ``line`` (one returned by
        ``candidate_lines`` with ``hint``, or a window of it): at least those that do."""
        ...


#: Builds a ``BlockScanner`` for a list of keywords.
ScannerFactory = Callable[[Sequence[bytes]], BlockScanner]


class ReBlockScanner:
    """The stdlib engine: a few ``re`` passes per block, keyed on rare bytes.

    Python's ``re`` scans fast only for a literal first byte (``memchr``), and
    each pass over a block costs about as much as any other, so keywords are
    anchored on a few rare bytes (``plan_prefilter``), one prefix-factored
    alternation per byte, each run over the whole block. The hint is the mask of
    passes that hit the line; ``keywords_in`` searches the line again with those.
    """

    name = "re"

    def __init__(self, keywords: Sequence[bytes]) -> None:
        planned = plan_prefilter(keywords)
        #: One pass per group: the anchor regex, and for each anchor it can match the
        #: keywords to verify (those whose anchor is a prefix of it: the trie matches
        #: the longest anchor at a position).
        self._groups: list[tuple[re.Pattern[bytes], dict[bytes, tuple[int, ...]]]] = []
        for _, members in sorted(planned.items()):
            regex = re.compile(_trie_pattern(anchor for anchor, _ in members))
            verify = {
                anchor: tuple(k for other, k in members if anchor.startswith(other))
                for anchor, _ in members
            }
            self._groups.append((regex, verify))

    @property
    def num_passes(self) -> int:
        return len(self._groups)

    def candidate_lines(self, block: bytes) -> list[tuple[int, int]]:
        lines: dict[int, int] = {}
        rfind = block.rfind
        find = block.find
        for bit, (rx, _) in enumerate(self._groups):
            flag = 1 << bit
            search = rx.search
            m = search(block)
            while m is not None:
                start = rfind(b"\n", 0, m.start()) + 1
                lines[start] = lines.get(start, 0) | flag
                end = find(b"\n", m.start())
                if end == -1:
                    break
                m = search(block, end + 1)
        return sorted(lines.items())

    def keywords_in(self, line: bytes, hint: int) -> Iterable[int]:
        found: set[int] = set()
        bit = 0
        while hint:
            if hint & 1:
                rx, verify = self._groups[bit]
                m = rx.search(line)
                while m is not None:
                    found.update(verify.get(m.group(), ()))
                    # Restart one byte on: anchors of a group may overlap.
                    m = rx.search(line, m.start() + 1)
            hint >>= 1
            bit += 1
        return found


class Matcher:
    """Compiled form of an ordered catalog: a byte-level prefilter plus per-line matching.

    ``candidate_lines`` finds the lines of a block that contain any keyword (with
    the ``BlockScanner`` given, by default the stdlib ``ReBlockScanner``) or in
    which a keyword-less signature's pattern matches (one ``re`` pass each, the
    same whatever the engine). ``match_bytes`` then tries, in catalog order, only
    the signatures whose keywords occur in the line (checked here, so every
    engine gives the same result) and the keyword-less ones whose pass hit the
    line; the first that matches wins.
    """

    def __init__(self, signatures: Sequence[Signature], scanner: ScannerFactory | None = None) -> None:
        self.signatures = tuple(signatures)
        self._xid_only = [
            sig.xid is not None and sig.pattern == XID_PATTERN_TEMPLATE.format(code=sig.xid)
            for sig in self.signatures
        ]
        # XID-only signatures share one compiled XID line (below): no pattern of their own.
        # Entries of one vocabulary share their pattern: compiled once, matched once a line.
        by_pattern: dict[str, int] = {}
        patterns: list[re.Pattern[str]] = []
        self._pattern_index: list[int] = []
        for sig, xid_only in zip(self.signatures, self._xid_only, strict=True):
            if xid_only:
                self._pattern_index.append(-1)
                continue
            if sig.pattern not in by_pattern:
                by_pattern[sig.pattern] = len(patterns)
                patterns.append(re.compile(sig.pattern))
            self._pattern_index.append(by_pattern[sig.pattern])
        self._patterns = tuple(patterns)
        self._codes: list[frozenset[str] | None] = [
            frozenset(sig.codes) if sig.codes else None for sig in self.signatures
        ]
        #: The signature of each XID code (the first in catalog order), for lines that
        #: name an earlier XID as their cause.
        self.xid_signatures: dict[int, int] = {}
        for i, sig in enumerate(self.signatures):
            if sig.xid is not None:
                self.xid_signatures.setdefault(sig.xid, i)
        by_keyword: dict[str, list[int]] = {}
        self._always: tuple[int, ...] = tuple(
            i for i, sig in enumerate(self.signatures) if not sig.keywords
        )
        for i, sig in enumerate(self.signatures):
            for kw in sig.keywords:
                # A keyword is also looked for as a JSON string or an HTML page spells it
                # (a log line inside a JSON envelope: "Error\n" is written "Error\\n").
                for form in (kw, *escaped_forms(kw)):
                    if i not in by_keyword.setdefault(form, []):
                        by_keyword[form].append(i)
        self._keywords: tuple[bytes, ...] = tuple(kw.encode() for kw in by_keyword)
        self._keyword_signatures: tuple[tuple[int, ...], ...] = tuple(
            tuple(v) for v in by_keyword.values()
        )
        self.scanner: BlockScanner = (scanner or ReBlockScanner)(self._keywords)
        #: Keyword-less signatures are their own (slow) prefilter: one pass each.
        self._pattern_passes: list[re.Pattern[bytes]] = []
        for i in self._always:
            try:
                fallback = re.compile(self.signatures[i].pattern.encode(), re.MULTILINE)
            except (re.error, UnicodeEncodeError):
                fallback = re.compile(b"^", re.MULTILINE)  # unusable on bytes: every line
            self._pattern_passes.append(fallback)
        self._all_patterns = (1 << len(self._always)) - 1
        self._xid_line = re.compile(XID_PATTERN_TEMPLATE.format(code=r"\d+"))
        #: Context signatures that echo a command printing the machine's name
        #: (``$ hostname``): the line after theirs is the host.
        self._host_commands = frozenset(
            i for i, sig in enumerate(self.signatures)
            if sig.role == "context" and "(?P<host_command>" in sig.pattern
        )  # fmt: skip

    @property
    def engine(self) -> str:
        """Name of the keyword search engine (``re``, ``hyperscan``)."""
        return self.scanner.name

    def candidate_lines(self, block: bytes) -> list[tuple[int, int, int]]:
        """``(line start, keyword hint, pattern hits)`` for each candidate line of ``block``.

        In block order. The hint is the scanner's (see ``BlockScanner``); pattern
        hits is the mask of keyword-less signatures (in ``_always`` order) whose
        pass matched in the line.
        """
        lines = self.scanner.candidate_lines(block)
        if not self._pattern_passes:
            return [(start, hint, 0) for start, hint in lines]
        merged: dict[int, list[int]] = {start: [hint, 0] for start, hint in lines}
        rfind = block.rfind
        find = block.find
        for bit, rx in enumerate(self._pattern_passes):
            flag = 1 << bit
            m = rx.search(block)
            while m is not None:
                start = rfind(b"\n", 0, m.start()) + 1
                merged.setdefault(start, [0, 0])[1] |= flag
                end = find(b"\n", m.start())
                if end == -1:
                    break
                m = rx.search(block, end + 1)
        return [(start, v[0], v[1]) for start, v in sorted(merged.items())]

    def match_line(self, text: str) -> LineMatch | None:
        """The first signature (catalog order) matching this line, with its fields."""
        return self.match_bytes(text.encode("utf-8", errors="replace"), text=text)

    def match_bytes(
        self, line: bytes, hint: int | None = None, patterns: int | None = None, *, text: str | None = None
    ) -> LineMatch | None:
        """``match_line`` on the raw bytes of a line; decodes only when a keyword is in it.

        ``hint``: the scanner's hint for the line (default: look for every
        keyword); ``patterns``: mask of the keyword-less signatures to try
        (default: all).
        """
        indices = self._signatures_for(line, hint, self._all_patterns if patterns is None else patterns)
        if not indices:
            return None
        if text is None:
            text = strip_ansi(line.decode("utf-8", errors="replace"))
        xid_match: re.Match[str] | bool | None = False
        searched: dict[int, re.Match[str] | None] = {}
        for i in indices:
            if self._xid_only[i]:
                if xid_match is False:
                    xid_match = self._xid_line.search(text)
                if xid_match is None or int(cast(re.Match[str], xid_match)["xid"]) != self.signatures[i].xid:
                    continue
                m = cast(re.Match[str], xid_match)
            else:
                p = self._pattern_index[i]
                if p in searched:
                    found = searched[p]
                else:
                    found = searched[p] = self._patterns[p].search(text)
                if found is None:
                    continue
                codes = self._codes[i]
                if codes is not None and found["code"] not in codes:
                    continue
                m = found
            fields = {k: v for k, v in m.groupdict().items() if v is not None}
            return LineMatch(self.signatures[i], _with_prefix_fields(text, fields), m.start(), text, i)
        return None

    def scan_block(self, block: bytes) -> BlockScan:
        """The matching lines of a block of whole lines, and its newline count.

        Stateless and made of plain values, so worker processes can run it on
        blocks of one file while the parent keeps the per-file state in order.
        """
        joined = join_hard_wrapped(block)
        if joined is None:
            return self._scan_lines(block), block.count(b"\n")
        # A paste cut at a fixed width: match the joined lines, numbered as the first
        # piece of each.
        data, first_piece = joined
        last = len(first_piece) - 1
        matches = [
            (first_piece[min(off, last)], index, fields, text) for off, index, fields, text in self._scan_lines(data)
        ]
        return matches, block.count(b"\n")

    def _scan_lines(self, block: bytes) -> list[RawMatch]:
        """``scan_block``'s matches (offsets count the newlines of ``block``)."""
        matches: list[RawMatch] = []
        pos = 0
        offset = 0
        count = block.count
        for start, hint, patterns in self.candidate_lines(block):
            offset += count(b"\n", pos, start)
            pos = start
            end = block.find(b"\n", start)
            # Keep the newline: keywords such as "Error\n" (a bare exception name that
            # ends a traceback) include it.
            end = len(block) if end == -1 else end + 1
            if end - start > MAX_MATCH_CHARS:
                # An overlong line: match a window around its first keyword or
                # keyword-less pattern match.
                at = self._first_hit(block[start:end], hint, patterns)
                start = max(start, start + at - MAX_MATCH_CHARS // 2)
                end = min(end, start + MAX_MATCH_CHARS)
            line = block[start:end]
            match = self.match_bytes(line, hint, patterns)
            if looks_enveloped(line):
                inner = self.match_enveloped(line, match)
                if inner is not None:
                    matches.extend((offset, m.index, dict(m.fields), clip_text(m.text, m.at)) for m in inner)
                    continue
            if match is not None:
                fields = dict(match.fields)
                if match.index in self._host_commands:
                    host = command_output_host(block, end)
                    if host is not None:
                        fields["host"] = host
                matches.append((offset, match.index, fields, clip_text(match.text, match.at)))
        return matches

    def match_enveloped(self, line: bytes, raw: LineMatch | None) -> list[LineMatch] | None:
        """Matches of the lines inside ``line``'s envelopes (``envelope.unwrap``), each with
        the names the envelope gives (host, pod, rank) where its own shape gave none; None
        when ``line`` has no envelope or nothing inside it matches. A single inner line
        competes with the raw line's match (``raw``): the earlier signature in catalog
        order wins, the raw line on a tie."""
        unwrapped = unwrap(strip_ansi(line.decode("utf-8", errors="replace")))
        if unwrapped is None:
            return None
        found: list[LineMatch] = []
        for inner in unwrapped.lines:
            data = inner.encode("utf-8", errors="replace")
            for _, hint in self.scanner.candidate_lines(data + b"\n")[:1]:
                m = self.match_bytes(data + b"\n", hint, 0, text=inner)
                if m is not None:
                    found.append(m)
        inner_shape: dict[str, str] = {}
        if raw is not None and (not found or (len(unwrapped.lines) == 1 and raw.index < found[0].index)):
            # The raw line's signature wins; the inner line's shape still names whom it is about.
            found = [raw]
            if len(unwrapped.lines) == 1:
                inner_shape = _with_prefix_fields(unwrapped.lines[0], {})
        if not found:
            return None
        out = []
        for m in found:
            fields = dict(m.fields)
            for key, value in inner_shape.items():
                fields.setdefault(key, value)
            for key, value in unwrapped.fields.items():
                if key in ("host", "pod"):
                    # The machine and pod the platform collected the line from: weaker than
                    # what the line and its neighbours say (events.FileScanner places them).
                    if key == "pod" or is_plausible_host(value):
                        fields.setdefault("envelope_" + key, value)
                else:
                    fields.setdefault(key, value)
            out.append(LineMatch(m.signature, fields, m.at, m.text, m.index))
        return out

    def _first_hit(self, line: bytes, hint: int, patterns: int) -> int:
        """Offset of the first keyword (or keyword-less pattern match) in ``line``; 0 if none."""
        hits = [i for k in self.scanner.keywords_in(line, hint) if (i := line.find(self._keywords[k])) >= 0]
        for bit, rx in enumerate(self._pattern_passes):
            if patterns >> bit & 1 and (m := rx.search(line)) is not None:
                hits.append(m.start())
        return min(hits, default=0)

    def _signatures_for(self, line: bytes, hint: int | None, patterns: int) -> list[int]:
        """Catalog indices of the signatures to try on ``line``, in order: those with
        a keyword in it, and the keyword-less ones in ``patterns``."""
        indices: set[int] = set()
        bit = 0
        while patterns:
            if patterns & 1:
                indices.add(self._always[bit])
            patterns >>= 1
            bit += 1
        keywords = self._keywords
        candidates: Iterable[int] = (
            range(len(keywords)) if hint is None else self.scanner.keywords_in(line, hint)
        )
        for k in candidates:
            if keywords[k] in line:
                indices.update(self._keyword_signatures[k])
        return sorted(indices)


#: One matching line of a block: (newlines before it in the block, signature index,
#: fields, evidence text).
RawMatch = tuple[int, int, dict[str, str], str]
#: ``Matcher.scan_block``'s result: the matches and the block's newline count.
BlockScan = tuple[list[RawMatch], int]


#: A command's output that is one machine name and nothing else.
_HOST_OUTPUT = re.compile(rb"[ \t]*([A-Za-z0-9][A-Za-z0-9_.-]{0,252})[ \t\r]*")


def command_output_host(block: bytes, start: int) -> str | None:
    """The machine name printed on the line of ``block`` that starts at ``start`` (the
    output of ``hostname`` echoed on the line before), or None when that line is not
    one plausible host name (or lies in the next block: the rule then does not fire)."""
    end = block.find(b"\n", start, start + 300)
    if end == -1:
        end = len(block) if len(block) - start < 300 else start
    m = _HOST_OUTPUT.fullmatch(block, start, end)
    if m is None:
        return None
    name = m.group(1).decode("ascii").rstrip(".")
    return name if is_plausible_host(name) else None


def _with_prefix_fields(text: str, fields: dict[str, str]) -> dict[str, str]:
    """Add what the line's shape names (``attribute_line``) where the pattern gave nothing."""
    if "host" in fields:
        fields["host_source"] = "line"
    for key, value in attribute_line(text).fields().items():
        if key not in fields:
            fields[key] = value
            if key == "host":
                fields["host_source"] = "line"
    return fields
