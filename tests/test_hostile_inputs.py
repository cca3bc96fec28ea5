"""Issue 9: config files and logs from the corpus through the capped fuzz worker.

Every config case (100k-deep YAML, duplicate keys, `run_root: 5`, `stop_grace_s: .inf`, ...)
must end in one clean `error:` line, never a traceback or a hang.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.corpus import config_cases, log_cases
from tests.fuzz.harness import Harness


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(tmp_path_factory.mktemp("inputs"))
    yield h
    h.close()


def _params() -> list[object]:
    out: list[object] = []
    for case in config_cases():
        out.append(pytest.param(case, id=case.name))
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
