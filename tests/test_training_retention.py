"""Retention: the pure policy as a table, then the deleter on a real run root with incomplete dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptctl.core.rollback.retention import RetentionCandidate, RetentionPolicy, plan_retention


def c(name: str, *, complete: bool = False, in_flight: bool = False) -> RetentionCandidate:
    step = int(name.split("_")[1].split(".")[0])
    return RetentionCandidate(
        name=name, step=step, is_complete=complete, is_temp=".tmp-" in name, is_in_flight=in_flight
    )


CASES = [
    pytest.param(
        [c("step_10", complete=True), c("step_20", complete=True), c("step_30", complete=True)],
        2,
        [False, True, True],
        id="keep-newest-two",
    ),
    pytest.param(
        [c("step_30", complete=True), c("step_10", complete=True), c("step_20", complete=True)],
        1,
        [True, False, False],
        id="order-of-input-does-not-matter",
    ),
    pytest.param(
        # incomplete dirs never count toward K: the two complete ones survive K=2
        [
            c("step_10", complete=True),
            c("step_20", complete=True),
            c("step_30"),
            c("step_40"),
            c("step_50.tmp-aa"),
        ],
        2,
        [True, True, True, True, True],
        id="incomplete-do-not-count",
    ),
    pytest.param(
        # stale temporaries (at or before the newest complete step) go; newer ones stay
        [c("step_5.tmp-aa"), c("step_10.tmp-bb"), c("step_10", complete=True), c("step_15.tmp-cc")],
        3,
        [False, False, True, True],
        id="stale-temp-removed",
    ),
    pytest.param(
        [c("step_5.tmp-aa", in_flight=True), c("step_10", complete=True)],
        1,
        [True, True],
        id="in-flight-kept-even-if-stale",
    ),
    pytest.param(
        # the newest complete checkpoint is kept even when newer dirs are broken
        [c("step_10", complete=True), c("step_20"), c("step_30.tmp-x")],
        1,
        [True, True, True],
        id="newest-complete-always-kept",
    ),
    pytest.param([], 1, [], id="empty"),
    pytest.param(
        [c("step_3.tmp-a"), c("step_4")], 1, [True, True], id="no-complete-keeps-everything"
    ),
]


@pytest.mark.parametrize(("candidates", "keep_last", "expected"), CASES)
def test_plan_retention_table(
    candidates: list[RetentionCandidate], keep_last: int, expected: list[bool]
) -> None:
    assert plan_retention(candidates, RetentionPolicy(keep_last=keep_last)) == expected


def test_stale_temp_kept_when_cleanup_disabled() -> None:
    cands = [c("step_5.tmp-aa"), c("step_10", complete=True)]
    assert plan_retention(cands, RetentionPolicy(keep_last=1, remove_stale_temp=False)) == [
        True,
        True,
    ]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_keep_last_must_be_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="keep_last"):
        RetentionPolicy(keep_last=bad)  # type: ignore[arg-type]


def test_keep_last_on_a_real_root_with_incomplete_dirs(tmp_path: Path) -> None:
    """Real saves (1 process) into a root that already holds leftovers of crashed saves."""
    torch = pytest.importorskip("torch")
    from ckptctl.training import Checkpointer

    root = tmp_path / "run"
    root.mkdir()
    # Leftovers: a temp dir older than what will be saved last, one newer than everything,
    # a final-named dir with no commit (incomplete), a quarantined one and a foreign one.
    leftovers = [
        "step_12.tmp-dead01",
        "step_99.tmp-dead02",
        "step_15",
        "step_1.quarantined-x",
        "notes",
    ]
    for name in leftovers:
        (root / name).mkdir()
        (root / name / "junk").write_bytes(b"x")
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = Checkpointer(str(root), keep_last=2, preemption_signals=None)
    for step in (10, 20, 30, 40, 50, 60):
        ckpt.save(step, {"model": model, "optimizer": opt})
    ckpt.close()
    names = sorted(p.name for p in root.iterdir() if p.name != ".ckptctl")
    # complete: step_50, step_60 (K=2). step_15 is incomplete: kept, and not counted toward K.
    # The stale temp step_12.tmp-* is gone; the newer temp, the quarantined and the foreign
    # dirs are untouched.
    assert names == sorted(
        ["step_50", "step_60", "step_15", "step_99.tmp-dead02", "step_1.quarantined-x", "notes"]
    )
    records = [
        json.loads(line) for line in (root / ".ckptctl" / "audit.jsonl").read_text().splitlines()
    ]
    deleted = sorted(r["from"] for r in records if r["action"] == "retention-delete")
    assert deleted == sorted(["step_10", "step_20", "step_30", "step_40", "step_12.tmp-dead01"])


def _steps_root(tmp_path: Path, steps: list[int]) -> Path:
    root = tmp_path / "run"
    for step in steps:
        (root / f"step_{step}").mkdir(parents=True)
        (root / f"step_{step}" / "shard").write_bytes(b"x")
    return root


def test_retention_takes_the_run_root_lock_and_releases_it(tmp_path: Path) -> None:
    from ckptctl.adapters.runlock import lock_path, read_lock
    from ckptctl.adapters.storage import Storage
    from ckptctl.training.retention import apply_retention

    root = _steps_root(tmp_path, [10, 20, 30])
    seen_holders: list[str | None] = []

    def is_complete(url: str) -> bool:
        # called while the pass decides: the lock must be ours then
        storage, path = Storage.for_url(str(root))
        holder = read_lock(storage, path)
        seen_holders.append(holder.operation if holder else None)
        return True

    result = apply_retention(str(root), RetentionPolicy(keep_last=1), is_complete=is_complete)
    assert result.skipped is None and sorted(result.deleted) == ["step_10", "step_20"]
    assert seen_holders and set(seen_holders) == {"retention"}
    storage, path = Storage.for_url(str(root))
    assert not Path(lock_path(storage, path)).exists()
    assert sorted(p.name for p in root.iterdir() if p.name != ".ckptctl") == ["step_30"]


def test_retention_skips_while_another_operation_holds_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckptctl.adapters.runlock import INHERITED_TOKEN_ENV, run_lock
    from ckptctl.adapters.storage import Storage
    from ckptctl.training.retention import apply_retention

    root = _steps_root(tmp_path, [10, 20, 30])
    storage, path = Storage.for_url(str(root))
    monkeypatch.delenv(INHERITED_TOKEN_ENV, raising=False)
    with run_lock(storage, path, operation="rollback") as held:
        result = apply_retention(
            str(root), RetentionPolicy(keep_last=1), is_complete=lambda url: True
        )
        assert result.deleted == [] and result.kept == []
        assert result.skipped is not None and "rollback by" in result.skipped
        assert sorted(p.name for p in root.iterdir() if p.name != ".ckptctl") == [
            "step_10",
            "step_20",
            "step_30",
        ]
        # a job launched by `ckptctl recover` gets recover's token: its retention proceeds
        monkeypatch.setenv(INHERITED_TOKEN_ENV, held.info.token)
        result = apply_retention(
            str(root), RetentionPolicy(keep_last=1), is_complete=lambda url: True
        )
        assert result.skipped is None and sorted(result.deleted) == ["step_10", "step_20"]
        # a stale or foreign token does not count
        monkeypatch.setenv(INHERITED_TOKEN_ENV, "not-the-holders-token")
        (root / "step_40").mkdir()
        result = apply_retention(
            str(root), RetentionPolicy(keep_last=1), is_complete=lambda url: True
        )
        assert result.skipped is not None and result.deleted == []
    # released: the next pass catches up
    monkeypatch.delenv(INHERITED_TOKEN_ENV)
    result = apply_retention(str(root), RetentionPolicy(keep_last=1), is_complete=lambda url: True)
    assert result.skipped is None and result.deleted == ["step_30"]
    assert sorted(p.name for p in root.iterdir() if p.name != ".ckptctl") == ["step_40"]


def test_a_hidden_directory_left_by_a_killed_purge_is_removed_by_the_next_pass(
    tmp_path: Path,
) -> None:
    from ckptctl.training.retention import apply_retention

    root = _steps_root(tmp_path, [20, 30])
    # what a kill between the rename and the rmtree leaves behind
    (root / "step_10.tmp-deleting-0a1b2c3d").mkdir()
    (root / "step_10.tmp-deleting-0a1b2c3d" / "shard").write_bytes(b"x")
    result = apply_retention(str(root), RetentionPolicy(keep_last=2), is_complete=lambda url: True)
    assert result.deleted == ["step_10.tmp-deleting-0a1b2c3d"]
    assert sorted(p.name for p in root.iterdir() if p.name != ".ckptctl") == ["step_20", "step_30"]
