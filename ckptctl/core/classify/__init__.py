"""Failure classification (RB-7 step 1): signatures, line attribution, scanning, verdict.

Pure: stdlib only, no I/O, no clock. One module per responsibility:

* ``catalog``: the signature schema (``Signature``, ``parse_catalog``, ``merge_catalogs``);
* ``attribution``: whom a line names from its shape alone (``attribute_line``);
* ``scan``: the keyword prefilter and per-line matching (``Matcher``, ``BlockScanner``);
* ``events``: per-file events with their context (torchrun tables, sections,
  name resolution, kernel message heads) (``FileScanner``);
* ``evidence``: bounded collection over all files (``EvidenceCollector``);
* ``verdict``: infra / job / preemption / unknown (``decide_verdict``);
* ``suspects``: whom a verdict points at, role and reason (``Suspect``).

``ckptctl.ops.classify`` wires these to real files. Every public name is
importable from here (``from ckptctl.core.classify import Event``).
"""

from ckptctl.core.classify.attribution import (
    SHAPES,
    LineAttribution,
    attribute_line,
    clip_text,
    is_plausible_host,
    normalize_host,
    normalize_pci,
    strip_ansi,
)
from ckptctl.core.classify.catalog import (
    CATALOG_KEYS,
    CATALOG_VERSION,
    CATEGORIES,
    CONFIDENCES,
    EVENT_GROUPS,
    MAX_EVIDENCE_CHARS,
    MAX_MATCH_CHARS,
    ROLES,
    SEVERITIES,
    SIGNATURE_KEYS,
    XID_PATTERN_TEMPLATE,
    CatalogError,
    Category,
    Confidence,
    Role,
    Severity,
    Signature,
    VerdictCategory,
    merge_catalogs,
    parse_catalog,
    parse_signature,
)
from ckptctl.core.classify.events import Event, FileScanner
from ckptctl.core.classify.evidence import Evidence, EvidenceCollector, SignatureTally
from ckptctl.core.classify.scan import (
    BlockScan,
    BlockScanner,
    LineMatch,
    Matcher,
    RawMatch,
    ReBlockScanner,
    ScannerFactory,
    plan_prefilter,
)
from ckptctl.core.classify.suspects import LINK_ACTION, Suspect, name_suspects
from ckptctl.core.classify.verdict import GpuRef, Verdict, decide_verdict, iter_events

__all__ = [
    "CATALOG_KEYS",
    "CATALOG_VERSION",
    "CATEGORIES",
    "CONFIDENCES",
    "EVENT_GROUPS",
    "LINK_ACTION",
    "MAX_EVIDENCE_CHARS",
    "MAX_MATCH_CHARS",
    "ROLES",
    "SEVERITIES",
    "SHAPES",
    "SIGNATURE_KEYS",
    "XID_PATTERN_TEMPLATE",
    "BlockScan",
    "BlockScanner",
    "CatalogError",
    "Category",
    "Confidence",
    "Event",
    "Evidence",
    "EvidenceCollector",
    "FileScanner",
    "GpuRef",
    "LineAttribution",
    "LineMatch",
    "Matcher",
    "RawMatch",
    "ReBlockScanner",
    "Role",
    "ScannerFactory",
    "Severity",
    "Signature",
    "SignatureTally",
    "Suspect",
    "Verdict",
    "VerdictCategory",
    "attribute_line",
    "clip_text",
    "decide_verdict",
    "is_plausible_host",
    "iter_events",
    "merge_catalogs",
    "name_suspects",
    "normalize_host",
    "normalize_pci",
    "parse_catalog",
    "parse_signature",
    "plan_prefilter",
    "strip_ansi",
]  # fmt: skip
