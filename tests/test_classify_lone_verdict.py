"""``lone_verdict``: a symptom whose own category is the verdict, at low confidence, when no cause
decides (the catalog's data, not a list of ids in the verdict's code)."""

from __future__ import annotations

import pytest

from ckptctl.core.classify.catalog import CatalogError, parse_catalog
from ckptctl.core.classify.events import FileScanner
from ckptctl.core.classify.evidence import EvidenceCollector
from ckptctl.core.classify.scan import Matcher
from ckptctl.core.classify.verdict import Verdict, decide_verdict
from tests.classify_helpers import SIGNATURES

LINE = "fabricd: link to peer gpu-n7 lost (FAB-LINK-DOWN)"


def _verdict(text: str, *, lone: bool, category: str = "infra") -> Verdict:
    entry = {"id": "fab-link-lost", "pattern": r"FAB-LINK-DOWN", "category": category, "role": "symptom",
             "confidence": "low", "description": "the fabric daemon lost a link", "lone_verdict": lone}
    matcher = Matcher(parse_catalog({"version": 1, "signatures": [entry]}, source="test.yaml"))
    collector = EvidenceCollector()
    scanner = FileScanner(matcher, file="node.log")
    for e in scanner.feed(text.encode()):
        collector.add(e)
    collector.add_file(scanner)
    return decide_verdict(collector.evidence())


@pytest.mark.parametrize("category", ["infra", "job"])
def test_a_lone_verdict_symptom_gives_its_category_at_low_confidence(category: str) -> None:
    v = _verdict(LINE + "\n", lone=True, category=category)
    assert (v.category, v.confidence) == (category, "low")
    assert v.action.startswith("Likely, not certain: the fabric daemon lost a link")


def test_without_it_the_same_symptom_stays_unknown() -> None:
    v = _verdict(LINE + "\n", lone=False)
    assert (v.category, v.confidence) == ("unknown", "low")


def test_only_a_symptom_may_carry_it() -> None:
    with pytest.raises(CatalogError, match="lone_verdict"):
        parse_catalog({"version": 1, "signatures": [{"id": "x", "pattern": "x", "category": "infra",
                                                     "lone_verdict": True}]}, source="t.yaml")
    with pytest.raises(CatalogError, match="lone_verdict"):
        parse_catalog({"version": 1, "signatures": [{"id": "x", "pattern": "x", "category": "infra",
                                                     "role": "symptom", "lone_verdict": "yes"}]}, source="t.yaml")


def test_the_built_in_catalog_marks_the_collective_libraries_system_and_remote_classes_only() -> None:
    """NCCL's system and remote error classes, and Gaudi HCCL's system/socket/libfabric class (round 9a)."""
    lone = sorted(s.id for s in SIGNATURES if s.lone_verdict)
    assert lone == ["hccl-gaudi-system", "nccl-remote-error", "nccl-system-error"]
