"""core.names owns ckptctl's own directory names: each one parses back to what it means."""

from __future__ import annotations

import pytest

from ckptctl.core import names


@pytest.mark.parametrize(
    ("name", "step", "is_temp", "is_quarantined"),
    [
        (names.step_dir_name(120), 120, False, False),
        (names.temp_dir_name(120, "ab12cd34"), 120, True, False),
        (names.deleting_name("step_120", "0a1b2c3d"), 120, True, False),
        (names.superseded_name("step_120", "ab12cd34"), 120, False, True),
        (names.quarantine_name("step_120", "20261121T031200Z"), 120, False, True),
    ],
)
def test_every_name_ckptctl_writes_parses_back(name: str, step: int, is_temp: bool, is_quarantined: bool) -> None:
    cn = names.parse_checkpoint_name(name)
    assert cn is not None and cn.framework == "ckptctl"
    assert (cn.step, cn.is_temp, cn.is_quarantined) == (step, is_temp, is_quarantined)
    assert cn.is_candidate is (not is_temp and not is_quarantined)


@pytest.mark.parametrize(
    ("name", "own"),
    [
        ("step_120", names.OwnName(step=120, is_temp=False)),
        ("step_120.tmp-ab12cd34", names.OwnName(step=120, is_temp=True)),
        ("step_120.tmp-deleting-0a1b2c3d", names.OwnName(step=120, is_temp=True)),
        # what retention must never touch: other frameworks, quarantined, odd tails
        ("step-120", None),
        ("global_step120", None),
        ("step_120.quarantined-20261121T031200Z", None),
        ("step_120_backup", None),
        ("step_120.tmp-", None),
        (".ckptctl", None),
    ],
)
def test_parse_own_name(name: str, own: names.OwnName | None) -> None:
    assert names.parse_own_name(name) == own


def test_stamps_and_the_state_dir() -> None:
    q = names.quarantine_name("step_30", "20261121T031200Z-2")
    assert names.stamp_of(q) == "20261121T031200Z-2" and names.unquarantine_name(q) == "step_30"
    assert names.stamp_of("step_30") == "" and names.unquarantine_name("step_30") is None
    assert names.parse_checkpoint_name(names.STATE_DIR_NAME) is None


def test_rollback_stamps_and_superseded_names() -> None:
    q = names.quarantine_name("step_30", "20261121T031200Z")
    assert names.rollback_stamp(q) == ("20261121T031200Z", 1) and not names.is_superseded(q)
    assert names.rollback_stamp(names.quarantine_name("step_30", "20261121T031200Z-12")) == ("20261121T031200Z", 12)
    s = names.superseded_name("step_30", "ab12cd34")
    assert names.rollback_stamp(s) is None and names.is_superseded(s)
    for other in ("step_30", "step_30.tmp-ab12", "step_30.quarantined-yesterday"):
        assert names.rollback_stamp(other) is None and not names.is_superseded(other)
