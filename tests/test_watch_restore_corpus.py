"""The restore-fault corpus (``tests/fixtures/losslogs_restore/``, ``bench/make_restore_fixtures.py``):
real torchrun resumes of examples/train.py, each labelled with its construction before any
tool read it. Every fault is caught or reported, no clean resume is flagged.

``bench/watch_accuracy.py`` prints the figures; this keeps them from slipping.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptctl.core.watch.model import PARTIAL_RESTORE, WatchConfig, verdict_class
from ckptctl.ops.watch import watch_log

CORPUS = Path(__file__).resolve().parent / "fixtures" / "losslogs_restore"
LABELS: dict[str, dict[str, object]] = json.loads((CORPUS / "labels.json").read_text())
PRESENT = sorted(n for n in LABELS if (CORPUS / n).is_file())


def test_every_labelled_log_is_there() -> None:
    assert sorted(LABELS) == PRESENT
    faults = {v["fault"] for v in LABELS.values()}
    assert faults == {None, "optimizer-dropped", "data-reset", "data-reset-second-resume"}


@pytest.mark.parametrize("name", PRESENT)
def test_each_log_is_judged_as_its_construction(name: str) -> None:
    fault = LABELS[name]["fault"]
    r = watch_log(str(CORPUS / name))
    cov = r.report.checks.get("restore_coverage")
    assert cov is not None, "every resume of ckptctl.training logs its coverage line"
    if fault is None:
        assert r.verdict == "continuous"
        assert PARTIAL_RESTORE not in r.report.note_codes and cov["complete"] is True
        assert r.report.checks["data_position"]["ok"] is True
    elif fault in ("data-reset", "data-reset-second-resume"):
        assert r.verdict == "data-position-mismatch" and verdict_class(r.verdict) == "bad"
        assert cov["complete"] is True  # every key was restored: the loader was reset after the load
    else:
        # the optimizer left out by an allowance: reported by the coverage line, not a verdict
        assert PARTIAL_RESTORE in r.report.note_codes
        assert cov["complete"] is False and cov["allowance_named"] is True and cov["allowed_unexpected"] > 0
        assert cov["allowed_groups"] == ["optimizer"]
        assert r.report.checks["data_position"]["ok"] is True


@pytest.mark.parametrize("name", [n for n in PRESENT if LABELS[n]["fault"] == "optimizer-dropped"])
def test_a_dropped_optimizer_is_diverged_when_the_run_is_declared_deterministic(name: str) -> None:
    r = watch_log(str(CORPUS / name), config=WatchConfig(expect_identical=True))
    assert r.verdict == "diverged"


@pytest.mark.parametrize("name", [n for n in PRESENT if LABELS[n]["fault"] is None])
def test_a_clean_resume_is_not_diverged_when_declared_deterministic(name: str) -> None:
    r = watch_log(str(CORPUS / name), config=WatchConfig(expect_identical=True))
    assert r.verdict == "continuous"


@pytest.mark.parametrize("name", [n for n in PRESENT if str(LABELS[n]["fault"]).startswith("data-reset")])
def test_a_data_reset_declared_by_design_is_a_note(name: str) -> None:
    """``data_may_restart`` (a loader that is not resumable by design): the reset is reported, not bad."""
    from ckptctl.core.watch.model import DATA_RESTARTED

    r = watch_log(str(CORPUS / name), config=WatchConfig(data_may_restart=True))
    assert verdict_class(r.verdict) != "bad" and DATA_RESTARTED in r.report.note_codes
