"""Every built-in signature says where its wording was read (issue 22: "the source of each
family recorded next to it"), a catalog file may name one source for all its entries, and
classify's JSON evidence carries it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ckptctl.cli.app import app
from ckptctl.core.classify.catalog import CatalogError, parse_catalog
from ckptctl.ops.classify_catalog import load_default_signatures

ENTRY = {"id": "x", "category": "job", "pattern": "boom", "description": "d", "action": "a"}


def test_every_builtin_signature_names_its_source() -> None:
    missing = [s.id for s in load_default_signatures() if not s.source.strip()]
    assert missing == []


def test_file_level_source_is_the_default_and_an_entry_keeps_its_own() -> None:
    doc = {"version": 1, "source": "the table", "signatures": [dict(ENTRY), {**ENTRY, "id": "y", "source": "own"}]}
    x, y = parse_catalog(doc, source="t.yaml")
    assert (x.source, y.source) == ("the table", "own")


def test_file_level_source_must_be_a_string() -> None:
    with pytest.raises(CatalogError, match="'source' must be a string"):
        parse_catalog({"version": 1, "source": 3, "signatures": [ENTRY]}, source="t.yaml")


def test_xid_entries_inherit_the_catalog_source() -> None:
    xid79 = next(s for s in load_default_signatures() if s.id == "xid-79")
    assert "xid-errors" in xid79.source


def test_classify_json_evidence_names_the_signature_source(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "dmesg.log"
    log.write_text(
        "Mar 02 04:11:09 gpu-node-05 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=7719, name=python, "
        "GPU has fallen off the bus.\n"
    )
    r = CliRunner().invoke(app, ["classify", "--json", str(log)])
    doc = json.loads(r.stdout)
    sources = {e["signature"]: e["signature_source"] for e in doc["evidence"]}
    assert "xid-errors" in sources["xid-79"]
