"""The signature catalog's schema: what one recognisable log line means (pure).

A catalog is data (YAML shipped in ``ckptctl/signatures/``, extensible by the
user); this module validates an already-parsed document into ``Signature``
values. No I/O: ``ckptctl.ops.classify`` reads the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

Category = Literal["infra", "job", "preemption"]
VerdictCategory = Literal["infra", "job", "preemption", "unknown"]
Role = Literal["cause", "symptom", "context", "benign"]
Severity = Literal["critical", "error", "warning", "info"]
Confidence = Literal["high", "medium", "low"]

CATEGORIES: tuple[Category, ...] = ("infra", "job", "preemption")
ROLES: tuple[Role, ...] = ("cause", "symptom", "context", "benign")
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
    r"(?:\.[0-7])?)\): (?P<xid>{code})\b(?:, pid=[^,]{{0,40}}, name=(?P<program>[^,\s]{{1,64}}))?"
)

_XID_LINE = re.compile(XID_PATTERN_TEMPLATE.format(code=r"\d+"))

#: Named groups a signature pattern may use; each fills the same-named field of
#: the event. Any other named group is an error (it would be silently ignored).
EVENT_GROUPS = frozenset(
    {
        "host", "gpu", "gpu_index", "rank", "local_rank", "xid", "signal", "exitcode", "pid",
        "time", "peer", "pod", "cause_xid", "code", "seq", "op", "numel", "pg", "program",
    }
)  # fmt: skip
#: Extra groups only context signatures use. ``host_command``: the line echoes a command
#: whose output, the next line, is the machine's name (``$ hostname``); ``mention``: the
#: line's prefix names a host of its file, not of the lines below (NCCL's init banner).
_CONTEXT_GROUPS = frozenset({"field", "value", "peer_host", "host_command", "mention"})

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
        "code",
        "source",
        "xid_report",
        "state_report",
        "fallback",
        "lone_verdict",
        "explains",
        "examples",
    }
)
CATALOG_KEYS = frozenset({"version", "source", "signatures"})
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
    ``context`` only attributes nearby lines (torchrun failure-table fields);
    ``benign`` is recognised and means nothing failed (a pending reason, a healthy
    state): it makes no event, and shields the line from later entries."""
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
    codes: tuple[str, ...] = ()
    """Members of a finite vocabulary this entry stands for (Slurm reasons, LSF
    ``TERM_*``, Kubernetes reasons...): the pattern's ``code`` group must be one of
    them. Entries of one vocabulary share one pattern (compiled and matched once
    per line), as XID entries share the kernel's XID line."""
    source: str = ""
    """Where the wording was read: the producer's repository and file, or its documentation."""
    fallback: bool = False
    """A catch-all (the generic Python exception): it decides only when no other cause
    of its category explains the failure; otherwise its lines are consequences."""
    xid_report: bool = False
    """The line reports an NVIDIA XID by code in another tool's words (the device plugin,
    DCGM): the code's own catalog entry decides, as for the kernel's line."""
    state_report: bool = False
    """The line is a query tool's reading of a device's state (nvidia-smi / NVML's
    "GPU is lost"), not an event the driver, kernel or job logged: it says the device
    is bad now, not that it ended the job. With nothing else in the input (no failure
    of the job, no kernel event) the verdict it decides is low confidence."""
    lone_verdict: bool = False
    """A symptom whose own category is the verdict, at low confidence, when no cause in the
    input decides one (NCCL's ncclSystemError / ncclRemoteError: NCCL's own result class says
    "a system call" or "the network or a remote process", nothing more)."""
    explains: tuple[str, ...] = ()
    """Ids of causes whose lines this one explains when they follow it closely in the same
    file (``EXPLAINS_WITHIN`` lines): those lines are then its consequences (a traceback
    through CPython's semaphore creation explains the "No space left on device" under it:
    /dev/shm, not a disk)."""
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
        # Generated from the template (known valid): one compile serves every XID entry.
        pattern = XID_PATTERN_TEMPLATE.format(code=xid_value)
        groups = set(_XID_LINE.groupindex)
    else:
        try:
            groups = set(re.compile(pattern).groupindex)
        except re.error as e:
            raise CatalogError(f"{where}: 'pattern' is not a valid regular expression: {e}") from e
    role = cast(Role, _require_choice(entry, "role", where, ROLES, "cause"))
    allowed_groups = EVENT_GROUPS | (_CONTEXT_GROUPS if role == "context" else frozenset())
    bad_groups = sorted(groups - allowed_groups)
    if bad_groups:
        raise CatalogError(
            f"{where}: pattern group {bad_groups[0]!r} is not one of {', '.join(sorted(allowed_groups))}"
        )
    category = cast(Category, _require_choice(entry, "category", where, CATEGORIES, None))
    codes = _str_tuple(entry, "code", where)
    if codes and "code" not in groups:
        raise CatalogError(f"{where}: 'code' needs a pattern with a (?P<code>...) group")
    keywords = _str_tuple(entry, "keywords", where)
    if not keywords and xid_value is not None:
        keywords = ("Xid",)
    if not keywords and codes:
        keywords = codes  # each member is a literal of every line it matches
    xid_report = entry.get("xid_report", False)
    if not isinstance(xid_report, bool) or (xid_report and "xid" not in groups):
        raise CatalogError(f"{where}: 'xid_report' must be true or false, with a (?P<xid>...) group")
    state_report = entry.get("state_report", False)
    if not isinstance(state_report, bool):
        raise CatalogError(f"{where}: 'state_report' must be true or false, got {state_report!r}")
    fallback = entry.get("fallback", False)
    if not isinstance(fallback, bool):
        raise CatalogError(f"{where}: 'fallback' must be true or false, got {fallback!r}")
    lone_verdict = entry.get("lone_verdict", False)
    if not isinstance(lone_verdict, bool) or (lone_verdict and role != "symptom"):
        raise CatalogError(f"{where}: 'lone_verdict' must be true or false, and true only for a symptom")
    explains = _str_tuple(entry, "explains", where)
    if explains and role != "cause":
        raise CatalogError(f"{where}: 'explains' is for a cause (it names the causes it explains)")
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
        codes=codes,
        xid_report=xid_report,
        state_report=state_report,
        fallback=fallback,
        lone_verdict=lone_verdict,
        explains=explains,
        source=_require_str(entry, "source", where, required=False).strip(),
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
            f"{source}: unknown top-level key {unknown[0]!r} (known keys: version, source, signatures)"
        )
    version = document.get("version", CATALOG_VERSION)
    if version != CATALOG_VERSION:
        raise CatalogError(f"{source}: unsupported 'version' {version!r} (this ckptctl reads 1)")
    entries = document.get("signatures") or []
    if not isinstance(entries, list):
        raise CatalogError(f"{source}: 'signatures' must be a list")
    # A file-level `source:` is where every entry's wording was read unless the entry names
    # its own (a whole vocabulary read from one table, as xids.yaml is).
    file_source = _require_str(document, "source", source, required=False).strip()
    signatures = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        sig = parse_signature(entry, where=f"{source}: signatures[{i}]")
        if sig.id in seen:
            raise CatalogError(f"{source}: signatures[{i}]: id {sig.id!r} appears twice")
        seen.add(sig.id)
        signatures.append(sig if sig.source or not file_source else replace(sig, source=file_source))
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


