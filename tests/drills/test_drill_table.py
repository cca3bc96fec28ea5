"""The "what happens when" table of the README and docs/launch.md is kept true by the drills.

Both documents carry the same table (after the ``what-happens-when`` marker); every row
names the drills that act it out, each drill exists in ``tests/drills/`` and is a real
test, and the situations the on-call runbook needs (issue 20) all have a row.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DRILLS = Path(__file__).resolve().parent
MARKER = "<!-- what-happens-when:"
#: The situations every copy of the table must cover (a word of its first column).
REQUIRED = ("SIGHUP", "SIGTERM", "Ctrl-C", "second `recover`", "hangs", "job ends")


def table(path: Path) -> list[list[str]]:
    """The table's rows (cells stripped), header and rule left out."""
    text = path.read_text(encoding="utf-8")
    assert MARKER in text, f"{path.name}: no what-happens-when table"
    lines = text[text.index(MARKER):].splitlines()[1:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    assert len(rows) > 2, f"{path.name}: the table is empty"
    return rows[2:]


def drill_tests() -> set[str]:
    names = set()
    for p in DRILLS.glob("test_*.py"):
        for node in ast.parse(p.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names.add(node.name)
    return names


@pytest.mark.parametrize("doc", ["README.md", "docs/launch.md"])
def test_every_row_names_drills_that_exist(doc: str) -> None:
    rows = table(REPO / doc)
    tests = drill_tests()
    for row in rows:
        named = re.findall(r"`(test_\w+)`", row[-1])
        assert named, f"{doc}: row {row[0]!r} names no drill"
        missing = [n for n in named if n not in tests]
        assert not missing, f"{doc}: row {row[0]!r} names drills that do not exist: {missing}"
    for situation in REQUIRED:
        assert any(situation in row[0] for row in rows), f"{doc}: no row for {situation!r}"


def test_the_readme_and_the_launch_doc_carry_the_same_table() -> None:
    assert table(REPO / "README.md") == table(REPO / "docs/launch.md")


def test_the_table_checker_sees_a_missing_drill(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(f"{MARKER} -->\n| when | drill |\n| --- | --- |\n| SIGHUP | `test_no_such_drill` |\n")
    (row,) = table(doc)
    assert re.findall(r"`(test_\w+)`", row[-1]) == ["test_no_such_drill"]
    assert "test_no_such_drill" not in drill_tests()


def test_every_drill_is_named_by_the_table() -> None:
    named = {n for row in table(REPO / "README.md") for n in re.findall(r"`(test_\w+)`", row[-1])}
    scenarios = {n for n in drill_tests() if not n.startswith(("test_every_", "test_the_"))}
    assert scenarios - named == set(), "drills the table does not name"
