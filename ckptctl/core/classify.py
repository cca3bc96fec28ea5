"""Failure classification: signatures, line matching, and the verdict (RB-7 step 1).

Pure: stdlib only, no I/O, no clock. The catalog arrives as an already-parsed
YAML document (``parse_catalog``), log text arrives as byte blocks
(``FileScanner.feed``), and the verdict is a function of the collected events
(``decide_verdict``). ``ckptctl.ops.classify`` wires these to real files.

The decision, in one paragraph (docs/classify.md has the long form): every log
line that matches a signature becomes an ``Event``. Signatures are *causes*
(an XID 79, a CUDA OOM, a Slurm preemption notice), *symptoms* (an NCCL
watchdog timeout, a rank killed by SIGTERM: consequences of something else) or
*context* (the fields of a torchrun failure table, which attribute the lines
around them to a host and rank). Symptoms never decide the category: with
only symptoms the verdict is ``unknown`` and says which log would settle it.
Among causes, the strongest (confidence, then severity) wins; on a tie,
infrastructure beats a job fault (a dead GPU must be drained whatever else
happened) and a job fault beats a preemption (resuming onto a bug re-crashes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, cast

Category = Literal["infra", "job", "preemption"]
VerdictCategory = Literal["infra", "job", "preemption", "unknown"]
Role = Literal["cause", "symptom", "context"]
Severity = Literal["critical", "error", "warning", "info"]
Confidence = Literal["high", "medium", "low"]

CATEGORIES: tuple[Category, ...] = ("infra", "job", "preemption")
ROLES: tuple[Role, ...] = ("cause", "symptom", "context")
SEVERITIES: tuple[Severity, ...] = ("critical", "error", "warning", "info")
CONFIDENCES: tuple[Confidence, ...] = ("high", "medium", "low")

_CONFIDENCE_RANK: dict[str, int] = {"low": 1, "medium": 2, "high": 3}
_SEVERITY_RANK: dict[str, int] = {"info": 1, "warning": 2, "error": 3, "critical": 4}
# Equal strength: a dead GPU must be drained whatever else happened (infra first);
# resuming onto a bug re-crashes, so a job fault outranks a preemption.
_CATEGORY_PRECEDENCE: dict[str, int] = {"infra": 3, "job": 2, "preemption": 1}

#: The kernel's XID line: ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...`` (older
#: drivers omit ``PCI:``). ``{code}`` is replaced by one code or by ``\d+``.
XID_PATTERN_TEMPLATE = (
    r"\bXid \((?:PCI:)?(?P<gpu>[0-9A-Fa-f]{{4,8}}:[0-9A-Fa-f]{{2}}:[0-9A-Fa-f]{{2}}"
    r"(?:\.[0-7])?)\): (?P<xid>{code})\b"
)

#: Named groups a signature pattern may use; each fills the same-named field of
#: the event. Any other named group is an error (it would be silently ignored).
EVENT_GROUPS = frozenset(
    {"host", "gpu", "gpu_index", "rank", "local_rank", "xid", "signal", "exitcode", "pid", "time"}
)
#: Extra groups only context signatures use.
_CONTEXT_GROUPS = frozenset({"field", "value"})

SIGNATURE_KEYS = frozenset(
    {
        "id",
        "pattern",
        "keywords",
        "category",
        "role",
        "severity",
        "confidence",
        "description",
        "action",
        "settle",
        "drain",
        "xid",
        "examples",
    }
)
CATALOG_KEYS = frozenset({"version", "signatures"})
CATALOG_VERSION = 1

#: Longest piece of one line that is matched: a longer line is matched in a window
#: of this size around its first keyword.
MAX_MATCH_CHARS = 64 * 1024
#: Longest evidence text kept per event (the rest is elided in the middle).
MAX_EVIDENCE_CHARS = 400


class CatalogError(ValueError):
    """A signature catalog is invalid; the message names the file, entry and key."""


# --------------------------------------------------------------------------------------
# Signatures
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Signature:
    """One recognisable log line: what it means and what to do about it."""

    id: str
    """Stable identifier shown in evidence and JSON, e.g. ``xid-79``."""
    pattern: str
    """Python regular expression matched (``search``) against one decoded log line.
    Named groups from ``EVENT_GROUPS`` (host, gpu, rank, ...) attribute the event."""
    category: Category
    """What the event points at: ``infra`` (node/GPU/fabric), ``job`` (code, OOM,
    divergence) or ``preemption`` (stopped from outside; just resume)."""
    role: Role = "cause"
    """``cause`` can decide a verdict; ``symptom`` is a consequence and never does;
    ``context`` only attributes nearby lines (torchrun failure-table fields)."""
    severity: Severity = "error"
    """How bad the event is; ranks causes of equal confidence."""
    confidence: Confidence = "medium"
    """How surely this line alone tells its category."""
    description: str = ""
    """One line: what the event means."""
    action: str = ""
    """What the on-call engineer should do (runbook wording)."""
    settle: str = ""
    """Which log would settle the question when this is the best evidence there is."""
    drain: bool = False
    """Whether the host this event names should be drained (infra causes)."""
    keywords: tuple[str, ...] = ()
    """Case-sensitive literals; every line the pattern matches contains one of them.
    They drive the fast prefilter; with none, the pattern itself is the prefilter."""
    xid: int | None = None
    """NVIDIA XID code this signature stands for (its pattern is then generated)."""
    examples: tuple[str, ...] = ()
    """Real-looking lines the pattern must match (checked by the test suite)."""


def _require_str(entry: Mapping[str, Any], key: str, where: str, *, required: bool) -> str:
    value = entry.get(key)
    if value is None:
        if required:
            raise CatalogError(f"{where}: missing required key {key!r}")
        return ""
    if not isinstance(value, str):
        raise CatalogError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _require_choice(
    entry: Mapping[str, Any], key: str, where: str, choices: Sequence[str], default: str | None
) -> str:
    value = entry.get(key, default)
    if value is None:
        raise CatalogError(f"{where}: missing required key {key!r} (one of {', '.join(choices)})")
    if value not in choices:
        raise CatalogError(f"{where}: {key!r} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _str_tuple(entry: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CatalogError(f"{where}: {key!r} must be a list of non-empty strings")
    return tuple(value)


def parse_signature(entry: Any, *, where: str) -> Signature:
    """Validate one catalog entry (a YAML mapping) into a ``Signature``."""
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: each signature must be a mapping, got {type(entry).__name__}")
    unknown = sorted(set(entry) - SIGNATURE_KEYS)
    if unknown:
        raise CatalogError(
            f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(sorted(SIGNATURE_KEYS))})"
        )
    sig_id = _require_str(entry, "id", where, required=True).strip()
    if not sig_id or any(c.isspace() for c in sig_id):
        raise CatalogError(f"{where}: 'id' must be a non-empty word, got {sig_id!r}")
    where = f"{where} ({sig_id})"
    xid_value = entry.get("xid")
    if xid_value is not None and (
        not isinstance(xid_value, int) or isinstance(xid_value, bool) or xid_value < 0
    ):
        raise CatalogError(f"{where}: 'xid' must be a non-negative integer, got {xid_value!r}")
    pattern = _require_str(entry, "pattern", where, required=xid_value is None)
    if not pattern:
        pattern = XID_PATTERN_TEMPLATE.format(code=xid_value)
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise CatalogError(f"{where}: 'pattern' is not a valid regular expression: {e}") from e
    role = cast(Role, _require_choice(entry, "role", where, ROLES, "cause"))
    allowed_groups = EVENT_GROUPS | (_CONTEXT_GROUPS if role == "context" else frozenset())
    bad_groups = sorted(set(compiled.groupindex) - allowed_groups)
    if bad_groups:
        raise CatalogError(
            f"{where}: pattern group {bad_groups[0]!r} is not one of {', '.join(sorted(allowed_groups))}"
        )
    category = cast(Category, _require_choice(entry, "category", where, CATEGORIES, None))
    keywords = _str_tuple(entry, "keywords", where)
    if not keywords and xid_value is not None:
        keywords = ("Xid",)
    drain = entry.get("drain", category == "infra" and role == "cause")
    if not isinstance(drain, bool):
        raise CatalogError(f"{where}: 'drain' must be true or false, got {drain!r}")
    return Signature(
        id=sig_id,
        pattern=pattern,
        category=category,
        role=role,
        severity=cast(Severity, _require_choice(entry, "severity", where, SEVERITIES, "error")),
        confidence=cast(
            Confidence, _require_choice(entry, "confidence", where, CONFIDENCES, "medium")
        ),
        description=_require_str(entry, "description", where, required=False).strip(),
        action=_require_str(entry, "action", where, required=False).strip(),
        settle=_require_str(entry, "settle", where, required=False).strip(),
        drain=drain,
        keywords=keywords,
        xid=xid_value,
        examples=_str_tuple(entry, "examples", where),
    )


def parse_catalog(document: Any, *, source: str) -> tuple[Signature, ...]:
    """Validate a loaded catalog document (``{version: 1, signatures: [...]}``).

    Raises ``CatalogError`` naming ``source``, the entry and the offending key.
    """
    if document is None:
        return ()
    if not isinstance(document, dict):
        raise CatalogError(f"{source}: a signature file must be a mapping with a 'signatures' list")
    unknown = sorted(set(document) - CATALOG_KEYS)
    if unknown:
        raise CatalogError(
            f"{source}: unknown top-level key {unknown[0]!r} (known keys: version, signatures)"
        )
    version = document.get("version", CATALOG_VERSION)
    if version != CATALOG_VERSION:
        raise CatalogError(f"{source}: unsupported 'version' {version!r} (this ckptctl reads 1)")
    entries = document.get("signatures") or []
    if not isinstance(entries, list):
        raise CatalogError(f"{source}: 'signatures' must be a list")
    signatures = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        sig = parse_signature(entry, where=f"{source}: signatures[{i}]")
        if sig.id in seen:
            raise CatalogError(f"{source}: signatures[{i}]: id {sig.id!r} appears twice")
        seen.add(sig.id)
        signatures.append(sig)
    return tuple(signatures)


def merge_catalogs(
    base: Sequence[Signature], extras: Iterable[Sequence[Signature]]
) -> tuple[Signature, ...]:
    """User signatures first (they take precedence); one with a built-in's id replaces it."""
    merged: list[Signature] = []
    ids: set[str] = set()
    for extra in extras:
        for sig in extra:
            if sig.id in ids:
                merged = [s for s in merged if s.id != sig.id]
            merged.append(sig)
            ids.add(sig.id)
    merged.extend(s for s in base if s.id not in ids)
    return tuple(merged)


# --------------------------------------------------------------------------------------
# Line attribution (hostname, GPU, rank from the line's own prefix)
# --------------------------------------------------------------------------------------

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_HOSTNAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
# syslog / journalctl (short, short-precise, short-iso, RFC 5424):
#   "Nov 21 03:12:44 gpu-node-17 kernel: ..."   "2026-11-21T03:12:44.1+00:00 gpu-node-17 kernel: ..."
_SYSLOG_PREFIX = re.compile(
    r"^\s*(?:<\d{1,3}>\d?\s*)?(?:" + _MONTH + r"\s+\d{1,2}\s+\d\d:\d\d:\d\d(?:\.\d+)?"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r"\s+(?P<host>" + _HOSTNAME + r")\s+[\w./@()-]+(?:\[\d+\])?:\s"
)
# NCCL's own prefix: "hostname:pid:tid [cudaDev] NCCL WARN ..."
_NCCL_PREFIX = re.compile(
    r"(?:^|[\s\]|:])(?P<host>" + _HOSTNAME + r"):\d+:\d+\s+\[(?P<gpu_index>\d+)\]\s+(?:NCCL|\S+\.cc:\d+ NCCL)"
)
# "[rank3]:..." (torch >= 2.2 prefixes C++ log lines with it), "[Rank 3]", "[PG 0 Rank 3]"
_RANK_PREFIX = re.compile(r"\[(?:rank|(?:PG \d+(?: \([^)]*\))? )?Rank )(?P<rank>\d+)\]")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_NOT_HOSTS = frozenset({"localhost", "localhost.localdomain", "kernel", "unknown", "none", "n/a"})


def normalize_host(name: str | None) -> str | None:
    """Short host name (``gpu-node-17`` for ``gpu-node-17.cluster.local``), or None.

    torchrun reports the FQDN, NCCL and syslog the short name; draining needs one
    spelling. IPv4 addresses and reverse-DNS names are kept whole.
    """
    if not name:
        return None
    name = name.strip().strip(".").rstrip(",;:")
    if not name or name.lower() in _NOT_HOSTS or name.startswith("<"):
        return None
    if _IPV4.match(name) or name.endswith(".arpa"):
        return name
    return name.split(".", 1)[0]


def normalize_pci(bus_id: str | None) -> str | None:
    """``0000:3b:00`` for ``PCI:0000:3B:00``, ``00000000:3B:00.0`` or ``0000:3b:00.0``."""
    if not bus_id:
        return None
    text = bus_id.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) != 3:
        return text
    domain, bus, device = parts
    device = device.split(".", 1)[0]
    return f"{domain[-4:].rjust(4, '0')}:{bus.rjust(2, '0')}:{device.rjust(2, '0')}"


def strip_ansi(text: str) -> str:
    return _ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


def clip_text(text: str, at: int = 0, limit: int = MAX_EVIDENCE_CHARS) -> str:
    """At most ``limit`` characters of ``text``, keeping position ``at`` in view."""
    text = text.rstrip("\r\n")
    if len(text) <= limit:
        return text
    start = max(0, min(at - limit // 4, len(text) - limit))
    piece = text[start : start + limit]
    return ("..." if start else "") + piece + ("..." if start + limit < len(text) else "")


# --------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------


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
        self._compiled = [re.compile(s.pattern) for s in self.signatures]
        by_keyword: dict[str, list[int]] = {}
        self._always: tuple[int, ...] = tuple(
            i for i, sig in enumerate(self.signatures) if not sig.keywords
        )
        for i, sig in enumerate(self.signatures):
            for kw in sig.keywords:
                by_keyword.setdefault(kw, []).append(i)
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
        self._xid_only = [
            sig.xid is not None and sig.pattern == XID_PATTERN_TEMPLATE.format(code=sig.xid)
            for sig in self.signatures
        ]

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
        for i in indices:
            if self._xid_only[i]:
                if xid_match is False:
                    xid_match = self._xid_line.search(text)
                if xid_match is None or int(cast(re.Match[str], xid_match)["xid"]) != self.signatures[i].xid:
                    continue
                m = cast(re.Match[str], xid_match)
            else:
                found = self._compiled[i].search(text)
                if found is None:
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
            match = self.match_bytes(block[start:end], hint, patterns)
            if match is not None:
                matches.append((offset, match.index, dict(match.fields), clip_text(match.text, match.at)))
        return matches, count(b"\n")

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


def _with_prefix_fields(text: str, fields: dict[str, str]) -> dict[str, str]:
    """Add host / GPU index / rank found in the line's prefix where the pattern gave none."""
    if "host" not in fields:
        m = _SYSLOG_PREFIX.match(text)
        if m:
            fields["host"] = m["host"]
            fields["host_source"] = "line"
        else:
            n = _NCCL_PREFIX.search(text)
            if n:
                fields["host"] = n["host"]
                fields["host_source"] = "line"
                fields.setdefault("gpu_index", n["gpu_index"])
    else:
        fields["host_source"] = "line"
    if "rank" not in fields:
        r = _RANK_PREFIX.search(text)
        if r:
            fields["rank"] = r["rank"]
    return fields


# --------------------------------------------------------------------------------------
# Events and per-file scanning
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """One log line that matched a signature, with where it came from and whom it names."""

    signature: Signature
    file: str
    line: int
    """1-based line number in ``file``."""
    text: str
    host: str | None = None
    host_source: str | None = None
    """How ``host`` was found: ``line`` (its prefix or text), ``torchrun table``,
    ``rank map`` (torchrun's rank->host table) or ``file name``."""
    gpu: str | None = None
    """PCI bus id, ``0000:3b:00``."""
    gpu_index: int | None = None
    """CUDA device index on the host, when the line gives one."""
    rank: int | None = None
    local_rank: int | None = None
    xid: int | None = None
    signal: str | None = None
    exitcode: int | None = None
    first_failure: bool = False
    """Inside torchrun's "Root Cause (first observed failure)" record."""
    order: int = 0
    """Position in the input (file index, then line): earlier is smaller."""

    @property
    def role(self) -> Role:
        return self.signature.role

    @property
    def category(self) -> Category:
        return self.signature.category

    @property
    def strength(self) -> tuple[int, int]:
        return (
            _CONFIDENCE_RANK[self.signature.confidence],
            _SEVERITY_RANK[self.signature.severity],
        )


_SIGNAL_NAMES = {
    1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
    9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM",
}  # fmt: skip


def _int_or_none(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def _signal_of(fields: Mapping[str, str]) -> str | None:
    sig = fields.get("signal")
    if sig:
        sig = sig.strip().upper()
        if sig.isdigit():
            return _SIGNAL_NAMES.get(int(sig), f"signal {sig}")
        return sig if sig.startswith("SIG") else f"SIG{sig}"
    code = _int_or_none(fields.get("exitcode"))
    if code is not None and code < 0:  # torchrun: negative exit code = killed by signal
        return _SIGNAL_NAMES.get(-code, f"signal {-code}")
    if code is not None and code > 128 and code - 128 in _SIGNAL_NAMES:  # shells: 128+N
        return _SIGNAL_NAMES[code - 128]
    return None


@dataclass(slots=True)
class _Record:
    """One torchrun failure-table record (``[N]:`` followed by time/host/rank/...)."""

    first_line: int
    last_line: int
    fields: dict[str, str] = field(default_factory=dict)
    is_root: bool = False


#: How far below its last field a torchrun record still attributes lines
#: (its ``traceback :`` field can hold a Python traceback of a few dozen lines).
_RECORD_REACH_LINES = 100


class FileScanner:
    """Turns the byte blocks of one log file into events (pure; the caller reads).

    Keeps the per-file state: line numbers, and the torchrun failure-table record
    the current line belongs to, so that the traceback field of a record is
    attributed to that record's host and rank.
    """

    def __init__(
        self, matcher: Matcher, *, file: str, file_index: int = 0, file_host: str | None = None
    ) -> None:
        self.matcher = matcher
        self.file = file
        self.file_host = normalize_host(file_host)
        self._file_index = file_index
        self.next_line = 1
        self.num_lines = 0
        self.num_matched_lines = 0
        """Lines that matched a signature (context lines included)."""
        self.rank_hosts: dict[int, str] = {}
        self._record: _Record | None = None
        self._pending_root = False

    def feed(self, block: bytes, *, fixed_line: int | None = None) -> list[Event]:
        """Events from one block of whole lines (the last may lack its newline).

        ``fixed_line`` pins every line of the block to one line number (a JSON
        error file's message, which sits on one line of the file).
        """
        return self.feed_scan(self.matcher.scan_block(block), fixed_line=fixed_line)

    def feed_scan(self, scan: BlockScan, *, fixed_line: int | None = None) -> list[Event]:
        """``feed`` for a block already matched by ``Matcher.scan_block`` (maybe elsewhere)."""
        matches, newlines = scan
        events: list[Event] = []
        for offset, index, fields, text in matches:
            line_no = self.next_line + offset if fixed_line is None else fixed_line
            event = self._event_for(self.matcher.signatures[index], dict(fields), text, line_no)
            if event is not None:
                events.append(event)
        if fixed_line is None:
            self.next_line += newlines
            self.num_lines += newlines
        else:
            self.num_lines = max(self.num_lines, fixed_line)
        return events

    def _event_for(self, sig: Signature, fields: dict[str, str], text: str, line_no: int) -> Event | None:
        self.num_matched_lines += 1
        if sig.role == "context":
            self._observe_context(sig, fields, line_no)
            return None
        record = self._record
        # A line belongs to the record above it if it is close and names no other
        # rank ("[rank9]:..." after the table is rank 9's, not the record's).
        in_record = (
            record is not None
            and line_no - record.last_line <= _RECORD_REACH_LINES
            and fields.get("rank", record.fields.get("rank")) == record.fields.get("rank")
        )
        if record is not None and in_record:
            for key in ("host", "rank", "local_rank", "exitcode"):
                if key not in fields and key in record.fields:
                    fields[key] = record.fields[key]
                    if key == "host":
                        fields["host_source"] = "torchrun table"
        host = normalize_host(fields.get("host"))
        host_source = fields.get("host_source") if host else None
        if host is None and self.file_host is not None:
            host, host_source = self.file_host, "file name"
        xid = _int_or_none(fields.get("xid"))
        return Event(
            signature=sig,
            file=self.file,
            line=line_no,
            text=text,
            host=host,
            host_source=host_source,
            gpu=normalize_pci(fields.get("gpu")),
            gpu_index=_int_or_none(fields.get("gpu_index")),
            rank=_int_or_none(fields.get("rank")),
            local_rank=_int_or_none(fields.get("local_rank")),
            xid=xid if xid is not None else sig.xid,
            signal=_signal_of(fields),
            exitcode=_int_or_none(fields.get("exitcode")),
            first_failure=bool(record is not None and in_record and record.is_root),
            order=self._file_index * 10_000_000_000 + line_no,
        )

    def _observe_context(self, sig: Signature, fields: dict[str, str], line_no: int) -> None:
        name = fields.get("field")
        if name is None:
            # A header ("Root Cause (first observed failure):"): the next record is the root.
            self._pending_root = True
            return
        value = fields.get("value", "").strip()
        record = self._record
        starts_new = (
            record is None
            or name in record.fields
            or line_no - record.last_line > 8  # fields of one record are adjacent
        )
        if starts_new:
            record = _Record(first_line=line_no, last_line=line_no, is_root=self._pending_root)
            self._pending_root = False
            self._record = record
        assert record is not None
        record.last_line = line_no
        record.fields[name] = value
        for key in ("host", "rank", "local_rank", "exitcode", "pid"):
            if fields.get(key):
                record.fields[key] = fields[key]
        rank = _int_or_none(record.fields.get("rank"))
        host = normalize_host(record.fields.get("host"))
        if rank is not None and host is not None:
            self.rank_hosts[rank] = host


# --------------------------------------------------------------------------------------
# Collecting (bounded memory on any input size)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SignatureTally:
    """How often one signature matched, and where."""

    signature: Signature
    count: int
    hosts: tuple[str, ...]
    num_hosts: int
    """Distinct hosts (``hosts`` may be truncated)."""
    samples: tuple[Event, ...]
    """The first events, in input order (bounded)."""
    num_ranks: int = 0
    """Distinct ranks named (counted up to the collector's bound)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """Everything the verdict needs, already bounded in size."""

    tallies: tuple[SignatureTally, ...]
    rank_hosts: Mapping[int, str]
    num_files: int = 0
    num_lines: int = 0


class EvidenceCollector:
    """Accumulates events with bounded memory: counts, host sets and the first samples.

    A multi-GB log can hold millions of NCCL timeout lines; the verdict needs their
    count and hosts, and a few of them as evidence.
    """

    def __init__(self, *, max_samples: int = 20, max_hosts: int = 10_000) -> None:
        self.max_samples = max_samples
        self.max_hosts = max_hosts
        self._count: dict[str, int] = {}
        self._samples: dict[str, list[Event]] = {}
        self._hosts: dict[str, dict[str, None]] = {}
        self._unattributed_ranks: dict[str, set[int]] = {}
        self._ranks: dict[str, set[int]] = {}
        self._signatures: dict[str, Signature] = {}
        self.rank_hosts: dict[int, str] = {}
        self.num_files = 0
        self.num_lines = 0

    def add(self, event: Event) -> None:
        sid = event.signature.id
        self._signatures[sid] = event.signature
        self._count[sid] = self._count.get(sid, 0) + 1
        samples = self._samples.setdefault(sid, [])
        if len(samples) < self.max_samples:
            samples.append(event)
        if event.rank is not None:
            ranks = self._ranks.setdefault(sid, set())
            if len(ranks) < self.max_hosts:
                ranks.add(event.rank)
        if event.host is not None:
            hosts = self._hosts.setdefault(sid, {})
            if len(hosts) < self.max_hosts:
                hosts[event.host] = None
        elif event.rank is not None:
            ranks = self._unattributed_ranks.setdefault(sid, set())
            if len(ranks) < self.max_hosts:
                ranks.add(event.rank)

    def add_file(self, scanner: FileScanner) -> None:
        """Record a finished file: its line count and its torchrun rank->host table."""
        self.num_files += 1
        self.num_lines += scanner.num_lines
        for rank, host in scanner.rank_hosts.items():
            if len(self.rank_hosts) < 1_000_000:
                self.rank_hosts.setdefault(rank, host)

    def evidence(self) -> Evidence:
        """Freeze what was collected; lines that named only a rank get its host now."""
        tallies = []
        for sid, count in self._count.items():
            hosts = dict(self._hosts.get(sid, {}))
            for rank in sorted(self._unattributed_ranks.get(sid, ())):
                host = self.rank_hosts.get(rank)
                if host is not None and len(hosts) < self.max_hosts:
                    hosts[host] = None
            samples = tuple(_attribute_rank(e, self.rank_hosts) for e in self._samples[sid])
            tallies.append(
                SignatureTally(
                    signature=self._signatures[sid],
                    count=count,
                    hosts=tuple(sorted(hosts)),
                    num_hosts=len(hosts),
                    samples=samples,
                    num_ranks=len(self._ranks.get(sid, ())),
                )
            )
        tallies.sort(key=lambda t: t.samples[0].order if t.samples else 0)
        return Evidence(
            tallies=tuple(tallies),
            rank_hosts=dict(self.rank_hosts),
            num_files=self.num_files,
            num_lines=self.num_lines,
        )


def _attribute_rank(event: Event, rank_hosts: Mapping[int, str]) -> Event:
    if event.host is None and event.rank is not None and event.rank in rank_hosts:
        return replace(event, host=rank_hosts[event.rank], host_source="rank map")
    return event


# --------------------------------------------------------------------------------------
# The verdict
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuRef:
    """A GPU named by the evidence: its host and PCI bus id and/or CUDA index."""

    host: str | None
    pci_bus_id: str | None
    index: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """RB-7 step 1's answer: what failed, how sure, what to do, and why."""

    category: VerdictCategory
    confidence: Confidence
    action: str
    """The runbook action: drain hosts and resume / fix the job / just resume / collect logs."""
    root_cause: Event | None
    """The event judged to have started it (None for ``unknown``)."""
    causes: tuple[Event, ...]
    """Cause events of the verdict's category (samples), root cause first."""
    other_causes: tuple[Event, ...]
    """Cause events of other categories: outweighed, but worth a look."""
    symptoms: tuple[Event, ...]
    """Consequences (samples): timeouts, killed ranks, aborted communicators."""
    hosts: tuple[str, ...]
    """Hosts to drain before resuming (infra verdicts only)."""
    suspect_hosts: tuple[str, ...]
    """Hosts the evidence points at without proof (e.g. torchrun's first failed rank)."""
    gpus: tuple[GpuRef, ...]
    reasons: tuple[str, ...]
    """How the decision was reached, one sentence each."""
    what_would_settle_it: tuple[str, ...]
    """Logs that would make an ``unknown`` or weak verdict certain."""


_LOWER_CONFIDENCE: dict[str, Confidence] = {"high": "medium", "medium": "low", "low": "low"}
_HIGHER_CONFIDENCE: dict[str, Confidence] = {"low": "medium", "medium": "high", "high": "high"}


class _SafeFormat(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "?"


def _fill(template: str, event: Event) -> str:
    """Fill ``{host}``, ``{rank}``, ``{gpu}``, ... in a signature's action or settle text."""
    if not template:
        return ""
    values = _SafeFormat(
        host=event.host or f"the host that wrote {event.file}",
        file=event.file,
        line=str(event.line),
        rank="the failed rank" if event.rank is None else f"rank {event.rank}",
        gpu=event.gpu or ("the GPU" if event.gpu_index is None else f"GPU {event.gpu_index}"),
        signal=event.signal or "a signal",
        xid="?" if event.xid is None else str(event.xid),
    )
    try:
        return template.format_map(values)
    except (ValueError, IndexError, AttributeError):
        return template


def _most_informative(events: Iterable[Event]) -> Event:
    """The sample that says the most: torchrun's first failure, then one naming its host and rank."""
    return min(
        events,
        key=lambda e: (not e.first_failure, e.host is None, e.rank is None, e.order),
    )


def _where(event: Event) -> str:
    parts = []
    if event.host:
        parts.append(event.host)
    if event.rank is not None:
        parts.append(f"rank {event.rank}")
    if event.gpu:
        parts.append(f"GPU {event.gpu}")
    elif event.gpu_index is not None:
        parts.append(f"GPU {event.gpu_index}")
    return " ".join(parts) if parts else f"{event.file}:{event.line}"


def _label(sig: Signature) -> str:
    return sig.description or sig.id


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def decide_verdict(evidence: Evidence, *, max_samples: int = 5) -> Verdict:
    """Decide infra / job / preemption / unknown from collected evidence.

    1. Only causes decide. No cause: ``unknown``, naming the logs that would settle it.
    2. The strongest cause (confidence, then severity) wins; equal strength: infra,
       then job, then preemption.
    3. Confidence is the winner's; one level up when two different signatures of
       the winning category agree, one level down when another category has a
       cause at least as confident.
    4. Hosts to drain: the hosts named by the winning infra causes that ask for a
       drain and are as confident as the best of them.
    """
    tallies = evidence.tallies
    cause_tallies = [t for t in tallies if t.signature.role == "cause"]
    symptom_tallies = [t for t in tallies if t.signature.role == "symptom"]
    symptoms = tuple(e for t in symptom_tallies for e in t.samples[:max_samples])
    symptom_reasons = tuple(
        f"{_plural(t.count, 'line')} of {_label(t.signature)}"
        + (f" from {_plural(t.num_ranks, 'rank')}" if t.num_ranks > 1 else "")
        + (f" on {_plural(t.num_hosts, 'known host')}" if t.num_hosts else "")
        + " (a consequence, not a cause)"
        for t in symptom_tallies
    )
    first_failures = [e for t in tallies for e in t.samples if e.first_failure and e.host]
    suspects_from_symptoms = _unique(e.host for e in first_failures)

    if not cause_tallies:
        return _unknown_verdict(evidence, symptom_tallies, symptoms, symptom_reasons, suspects_from_symptoms)

    def best(ts: Sequence[SignatureTally]) -> tuple[int, int]:
        return max(_strength(t.signature) for t in ts)

    by_category: dict[str, list[SignatureTally]] = {}
    for t in cause_tallies:
        by_category.setdefault(t.signature.category, []).append(t)
    ranked = sorted(
        by_category,
        key=lambda c: (best(by_category[c]), _CATEGORY_PRECEDENCE[c]),
        reverse=True,
    )
    winner = cast(Category, ranked[0])
    win_tallies = by_category[winner]
    win_strength = best(win_tallies)

    reasons: list[str] = []
    confidence: Confidence = cast(Confidence, _confidence_name(win_strength[0]))
    strongest = [t for t in win_tallies if _strength(t.signature) == win_strength]
    # Corroboration: two different signatures of the winning category, at least
    # medium confidence, naming the same host (or, in host-less logs, no host).
    agreeing: dict[str | None, set[str]] = {}
    for t in win_tallies:
        if _strength(t.signature)[0] >= 2:
            for h in t.hosts or (None,):
                agreeing.setdefault(h, set()).add(t.signature.id)
    corroborated = max(agreeing.items(), key=lambda kv: len(kv[1]), default=(None, set()))
    if len(corroborated[1]) >= 2 and confidence != "high":
        confidence = _HIGHER_CONFIDENCE[confidence]
        reasons.append(
            f"{len(corroborated[1])} different {winner} signatures agree"
            + (f" on {corroborated[0]}" if corroborated[0] else "")
            + f" ({', '.join(sorted(corroborated[1]))})"
        )
    rivals = [c for c in ranked[1:] if best(by_category[c])[0] >= win_strength[0]]
    if rivals:
        confidence = _LOWER_CONFIDENCE[confidence]
        reasons.append(
            "also found a "
            + " and a ".join(rivals)
            + " cause as confident as the winner; compare their timestamps"
        )

    # Among equals: torchrun's first observed failure, then a line that names its
    # host (the one to act on), then the earliest.
    root_tally = min(
        strongest,
        key=lambda t: (not any(e.first_failure for e in t.samples), not t.hosts, t.samples[0].order),
    )
    root = min(root_tally.samples, key=lambda e: (not e.first_failure, e.host is None, e.order))
    causes = (root, *[
        e
        for t in sorted(win_tallies, key=lambda t: (_strength(t.signature), -t.samples[0].order), reverse=True)
        for e in t.samples[:max_samples]
        if e is not root
    ])
    other_causes = tuple(
        e for c in ranked[1:] for t in by_category[c] for e in t.samples[:max_samples]
    )

    hosts: tuple[str, ...] = ()
    gpus: tuple[GpuRef, ...] = ()
    settle: list[str] = []
    if winner == "infra":
        drain_tallies = [
            t for t in win_tallies if t.signature.drain and _strength(t.signature)[0] == win_strength[0]
        ]
        hosts = _unique(h for t in drain_tallies for h in t.hosts)
        gpus = _unique_gpus(e for t in drain_tallies for e in t.samples)
        if drain_tallies and not hosts:
            if root.signature.settle:
                settle.append(_fill(root.signature.settle, root))
            else:
                files = _unique(e.file for t in drain_tallies for e in t.samples)
                settle.append(
                    "the hostname of the machine that wrote "
                    + ", ".join(files)
                    + ": its lines carry none (pass journalctl output, which prefixes it, "
                    "or name the file after the host, e.g. dmesg-<host>.log)"
                )
    # Hosts named by infra causes that are not drained (weaker or fabric-wide evidence).
    suspect_hosts = (
        tuple(h for h in _unique(h for t in win_tallies for h in t.hosts) if h not in hosts)
        if winner == "infra"
        else ()
    )

    root_sig = root.signature
    reasons.insert(
        0,
        f"root cause: {_label(root_sig)} at {_where(root)} ({root.file}:{root.line}); "
        f"signature {root_sig.id} is {'an' if winner == 'infra' else 'a'} {winner} cause "
        f"with {root_sig.confidence} confidence",
    )
    reasons.extend(symptom_reasons)
    for c in ranked[1:]:
        for t in by_category[c]:
            reasons.append(
                f"outweighed: {_plural(t.count, 'line')} of {_label(t.signature)} ({c}, "
                f"{t.signature.confidence} confidence)"
            )
    if confidence != "high" and root_sig.settle:
        settle.append(_fill(root_sig.settle, root))
    if rivals:
        contenders = [root, *(by_category[c][0].samples[0] for c in rivals)]
        settle.append(
            "the timestamps of "
            + " and ".join(f"{e.file}:{e.line}" for e in contenders)
            + ": the earlier event is the root cause"
        )

    action = _action(winner, root, hosts, gpus, confidence)
    return Verdict(
        category=winner,
        confidence=confidence,
        action=action,
        root_cause=root,
        causes=tuple(causes),
        other_causes=other_causes,
        symptoms=symptoms,
        hosts=hosts,
        suspect_hosts=suspect_hosts,
        gpus=gpus,
        reasons=tuple(reasons),
        what_would_settle_it=_unique(s for s in settle if s),
    )


def _strength(sig: Signature) -> tuple[int, int]:
    return (_CONFIDENCE_RANK[sig.confidence], _SEVERITY_RANK[sig.severity])


def _confidence_name(rank: int) -> str:
    return {3: "high", 2: "medium", 1: "low"}[rank]


def _unique(items: Iterable[str | None]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item:
            seen.setdefault(item, None)
    return tuple(seen)


def _unique_gpus(events: Iterable[Event]) -> tuple[GpuRef, ...]:
    """GPUs named by ``events``; a bare CUDA index is dropped when the same host's
    GPU is also named by PCI bus id (the kernel's name is the one to act on)."""
    events = list(events)
    hosts_with_pci = {e.host for e in events if e.gpu is not None}
    seen: dict[tuple[str | None, str | None, int | None], GpuRef] = {}
    for e in events:
        if e.gpu is None and (e.gpu_index is None or e.host in hosts_with_pci):
            continue
        key = (e.host, e.gpu, None if e.gpu else e.gpu_index)
        seen.setdefault(key, GpuRef(host=e.host, pci_bus_id=e.gpu, index=key[2]))
    return tuple(seen.values())


def _action(
    category: Category, root: Event, hosts: Sequence[str], gpus: Sequence[GpuRef], confidence: str
) -> str:
    specific = _fill(root.signature.action, root)
    if category == "infra":
        if hosts:
            gpu_text = ", ".join(
                f"{g.host + ' ' if g.host and len(hosts) > 1 else ''}"
                + (g.pci_bus_id if g.pci_bus_id else f"cuda:{g.index}")
                for g in gpus
            )
            label = "GPU" if len(gpus) == 1 else "GPUs"
            head = f"Drain {', '.join(hosts)}" + (f" ({label} {gpu_text})" if gpu_text else "")
            head += " and resume from the last complete checkpoint on healthy nodes."
        elif root.signature.drain:
            head = (
                "Drain the failed host (the evidence does not name it: see what would settle it) "
                "and resume from the last complete checkpoint on healthy nodes."
            )
        else:
            head = "Fix the infrastructure problem below, then resume from the last complete checkpoint."
    elif category == "job":
        head = (
            "Do not resume as is: the job itself failed, and resuming onto the same bug "
            "re-crashes. Fix it first."
        )
    else:
        head = "Just resume from the last complete checkpoint: the job was stopped from outside."
    if confidence == "low":
        head = "Likely, not certain: " + head[0].lower() + head[1:]
    return f"{head} {specific}".strip()


_GENERIC_SETTLE = (
    "the kernel log of every host (journalctl -k -o short-iso, or dmesg -T) for NVIDIA XID, "
    "ECC, PCIe and OOM-killer lines",
    "the stderr of every rank (the earliest error is usually the cause)",
    "the scheduler's record of the job (sacct -j JOB -o JobID,State,ExitCode,NodeList, "
    "or kubectl get events / kubectl describe pod) for preemption, time limit or node failure",
)


def _unknown_verdict(
    evidence: Evidence,
    symptom_tallies: Sequence[SignatureTally],
    symptoms: tuple[Event, ...],
    symptom_reasons: tuple[str, ...],
    suspects: tuple[str, ...],
) -> Verdict:
    settle: list[str] = []
    for t in sorted(symptom_tallies, key=lambda t: not any(e.first_failure for e in t.samples)):
        if t.signature.settle:
            settle.append(_fill(t.signature.settle, _most_informative(t.samples)))
    settle.extend(_GENERIC_SETTLE)
    if symptom_tallies:
        reasons = (
            "only consequences were found (no root-cause signature): classifying them "
            "would be a guess",
            *symptom_reasons,
        )
        action = (
            "Do not act on this yet: the logs show that the job died but not why. "
            "Collect the logs below and classify again."
        )
    else:
        reasons = (
            f"no known failure signature in {_plural(evidence.num_lines, 'line')} of "
            f"{_plural(evidence.num_files, 'file')}",
        )
        action = (
            "Nothing recognisable: collect the logs below and classify again "
            "(or add a signature with --signatures)."
        )
    symptom_hosts = _unique(h for t in symptom_tallies for h in t.hosts if len(t.hosts) <= 2)
    return Verdict(
        category="unknown",
        confidence="low",
        action=action,
        root_cause=None,
        causes=(),
        other_causes=(),
        symptoms=symptoms,
        hosts=(),
        suspect_hosts=_unique([*suspects, *symptom_hosts]),
        gpus=(),
        reasons=reasons,
        what_would_settle_it=_unique(settle),
    )


def iter_events(verdict: Verdict) -> Iterator[Event]:
    """Root cause, other causes of its category, outweighed causes, then symptoms."""
    seen: set[int] = set()
    for e in (*verdict.causes, *verdict.other_causes, *verdict.symptoms):
        if id(e) not in seen:
            seen.add(id(e))
            yield e
