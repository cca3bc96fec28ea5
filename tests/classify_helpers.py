"""Helpers for the classify vocabulary tests: the built-in catalog, a verdict of a text, a line's rule."""

from __future__ import annotations

from ckptctl.core.classify.events import FileScanner
from ckptctl.core.classify.evidence import EvidenceCollector
from ckptctl.core.classify.scan import Matcher
from ckptctl.core.classify.verdict import Verdict, decide_verdict
from ckptctl.ops.classify_catalog import load_default_signatures

SIGNATURES = load_default_signatures()
MATCHER = Matcher(SIGNATURES)


def verdict_of(text: str, file: str = "job.log") -> Verdict:
    """The verdict on ``text`` read as one file named ``file``."""
    collector = EvidenceCollector()
    scanner = FileScanner(MATCHER, file=file)
    for e in scanner.feed(text.encode()):
        collector.add(e)
    collector.add_file(scanner)
    return decide_verdict(collector.evidence())


def line_verdict(line: str, sig_id: str, file: str = "job.log") -> Verdict:
    """The verdict on ``line`` alone, after checking that the rule ``sig_id`` is the one it matches first."""
    match = MATCHER.match_line(line)
    assert match is not None and match.signature.id == sig_id, (line, match and match.signature.id)
    return verdict_of(line + "\n", file)
