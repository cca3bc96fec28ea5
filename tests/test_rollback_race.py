"""rollback racing a training job (a save committing, retention purging), made deterministic.

The fuzzing pass of issue 9 saw ``ValueError: candidate ... was not inspected`` when a
rollback ran beside training retention: the rollback listed the run root twice, and a
directory that appeared between the two listings reached the planner uninspected. Each
test here changes the real run root at one exact moment of the rollback (from inside
the storage listing the inspection makes) and checks the outcome is a clear one.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from ckptctl.adapters.storage import Entry, Storage
from ckptctl.core.rollback.model import NO_FALLBACK, ROOT_CHANGED
from ckptctl.ops import rollback as ops
from ckptctl.runroot.locate import find_latest_complete


def when_listing(
    monkeypatch: pytest.MonkeyPatch, name: str, act: Callable[[], None]
) -> list[str]:
    """Run ``act`` once, just before the first listing of the directory ``name``."""
    original = Storage.list_dir
    fired: list[str] = []

    def list_dir(self: Storage, path: str) -> list[Entry]:
        if not fired and Storage.basename(path) == name:
            fired.append(path)
            act()
        return original(self, path)

    monkeypatch.setattr(Storage, "list_dir", list_dir)
    return fired


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name != ".ckptctl")


def audit_actions(root: Path) -> list[str]:
    log = root / ".ckptctl" / "audit.jsonl"
    if not log.exists():
        return []
    return [json.loads(line)["action"] for line in log.read_text().splitlines()]


def test_a_save_committing_while_rollback_inspects_is_not_planned_on_and_is_reported(
    run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """step_40 appears (a save's commit rename) while step_30 is being inspected."""
    fired = when_listing(
        monkeypatch, "step_30", lambda: shutil.copytree(run_root / "step_30", run_root / "step_40")
    )
    res = ops.rollback(str(run_root), reason="spike")
    assert fired, "the hook must have run"
    assert res.done and res.plan is not None
    # planned on the listing it made: step_40 was not there yet
    assert (res.plan.source, res.plan.fallback) == ("step_30", "step_20")
    assert any("step_40" in w and "changed while we worked" in w for w in res.warnings), res.warnings
    assert res.locate == str(run_root / "step_40")  # what locate returns now, honestly
    assert "step_30" not in names(run_root) and "step_40" in names(run_root)
    assert audit_actions(run_root) == ["quarantine"]


def test_the_newest_checkpoint_vanishing_mid_walk_refuses_and_renames_nothing(
    run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """step_30, listed as the newest, is gone when rollback comes to inspect it."""
    fired = when_listing(monkeypatch, "step_30", lambda: shutil.rmtree(run_root / "step_30"))
    res = ops.rollback(str(run_root), reason="spike")
    assert fired
    assert res.refusal is not None and res.refusal.code == ROOT_CHANGED
    assert "step_30 disappeared" in res.refusal.message
    assert not res.done and res.plan is None
    assert names(run_root) == ["step_10", "step_20"]
    assert audit_actions(run_root) == []


def test_an_older_checkpoint_purged_mid_walk_shortens_the_walk_with_a_clear_refusal(
    run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention purges step_10 while rollback walks past an incomplete step_20 to it."""
    (run_root / "step_20" / "__1_0.distcp").unlink()  # step_20 incomplete: step_10 is the fallback
    assert find_latest_complete(str(run_root), before_step=30).checkpoint.name == "step_10"  # type: ignore[union-attr]
    fired = when_listing(monkeypatch, "step_20", lambda: shutil.rmtree(run_root / "step_10"))
    res = ops.rollback(str(run_root), reason="spike")
    assert fired
    assert res.refusal is not None and res.refusal.code == NO_FALLBACK
    assert any("step_10 disappeared" in w for w in res.warnings), res.warnings
    assert names(run_root) == ["step_20", "step_30"]
    assert audit_actions(run_root) == []


def test_locate_skips_a_candidate_that_vanishes_and_names_it(
    run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fired = when_listing(monkeypatch, "step_30", lambda: shutil.rmtree(run_root / "step_30"))
    loc = find_latest_complete(str(run_root))
    assert fired
    assert loc.checkpoint is not None and loc.checkpoint.name == "step_20"
    assert loc.vanished == ["step_30"] and loc.to_json()["vanished"] == ["step_30"]


def test_undo_whose_quarantined_target_vanishes_refuses(
    run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ops.rollback(str(run_root))
    assert first.done and first.plan is not None
    aside = first.plan.destination
    fired = when_listing(monkeypatch, aside, lambda: shutil.rmtree(run_root / aside))
    res = ops.undo(str(run_root))
    assert fired
    assert res.refusal is not None and res.refusal.code == ROOT_CHANGED
    assert audit_actions(run_root) == ["quarantine"]
