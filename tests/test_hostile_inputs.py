"""Issue 9: config files and logs from the corpus through the capped fuzz worker.

The config findings are fixed where the config loader lives (the recover branch owns
core/config.py); until that branch is merged they are expected failures here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.corpus import config_cases, log_cases
from tests.fuzz.harness import Harness

_OTHER_BRANCH = {"yaml_nested_100k", "duplicate_keys", "run_root_int", "grace_inf"}


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(tmp_path_factory.mktemp("inputs"))
    yield h
    h.close()


def _params() -> list[object]:
    out: list[object] = []
    for case in config_cases():
        marks = [pytest.mark.xfail(strict=True, reason="fixed on the recover branch (core/config.py)")] \
            if case.name in _OTHER_BRANCH else []  # fmt: skip
        out.append(pytest.param(case, marks=marks, id=case.name))
    return out


@pytest.mark.parametrize("case", _params())
def test_config_case_is_a_clean_error(harness: Harness, case: object, tmp_path: Path) -> None:
    from tests.fuzz.corpus import Case

    assert isinstance(case, Case)
    path = tmp_path / "ckptctl.yaml"
    path.write_bytes(case.data)
    report = harness.run("config", path)
    assert report.get("ok"), report
    assert str(report.get("outcome", "")).startswith("error:"), (case.why, report)


@pytest.mark.parametrize("case", log_cases(), ids=lambda c: c.name)
@pytest.mark.parametrize("target", ["losslog", "classify"])
def test_log_case_reads_cleanly(harness: Harness, case: object, target: str, tmp_path: Path) -> None:
    from tests.fuzz.corpus import Case

    assert isinstance(case, Case)
    path = tmp_path / "rank0.log"
    path.write_bytes(case.data)
    report = harness.run(target, path, read_only_tree=tmp_path)
    assert report.get("ok"), (case.why, report)
    assert report["seconds"] < 15, report
