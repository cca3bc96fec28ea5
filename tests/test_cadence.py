"""``ckptctl cadence``: durations, the Young/Daly numbers (tables), a real run root, the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ckptctl.cli import output as out
from ckptctl.cli.app import app
from ckptctl.core.recover.cadence import (
    ABOVE_MTBF,
    OK,
    TOO_FREQUENT,
    TOO_RARE,
    UNKNOWN,
    CheckpointTiming,
    DurationError,
    parse_duration,
    plan_cadence,
    young_daly_interval,
)
from ckptctl.core.verify.manifest import Manifest

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90m", 5400.0), ("3h", 10800.0), ("2d", 172800.0), ("45s", 45.0), ("1.5h", 5400.0), ("3600", 3600.0), (" 2 H ", 7200.0), ("1w", 604800.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "3 hours", "-1h", "0m", "1e400", "nan", "3y"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


def ck(step: int, t: float, cost: float | None, source: str = "manifest") -> CheckpointTiming:
    return CheckpointTiming(step=step, time_s=t, save_duration_s=cost, save_duration_source=source)


# (checkpoints: (step, time, cost), failures, mtbf, expected status, expected optimum or None)
CASES: list[tuple[list[tuple[int, float, float | None]], list[float], float | None, str, float | None]] = [
    # C = 60 s, M = 3 h: tau* = sqrt(2*60*10800) = 1138.4 s; interval 1200 s is near it
    ([(1000 * i, 1200.0 * i, 60.0) for i in range(6)], [], 10800.0, OK, math.sqrt(2 * 60 * 10800)),
    # the same save cost and MTBF with checkpoints every 4 h: above the MTBF
    ([(1000 * i, 14400.0 * i, 60.0) for i in range(4)], [], 10800.0, ABOVE_MTBF, math.sqrt(2 * 60 * 10800)),
    # every 50 min against an optimum of 19 min: too rare
    ([(1000 * i, 3000.0 * i, 60.0) for i in range(4)], [], 10800.0, TOO_RARE, math.sqrt(2 * 60 * 10800)),
    # every 2 min: too frequent
    ([(100 * i, 120.0 * i, 60.0) for i in range(10)], [], 10800.0, TOO_FREQUENT, math.sqrt(2 * 60 * 10800)),
    # MTBF observed: 2 recoveries over a 20,000 s run -> M = 10,000 s, tau* = 775 s < 2000 / 2
    ([(1000 * i, 2000.0 * i, 30.0) for i in range(11)], [5000.0, 15000.0], None, TOO_RARE, math.sqrt(2 * 30 * 10000)),
    # no failures recorded and no --mtbf: unknown
    ([(1000 * i, 2000.0 * i, 30.0) for i in range(3)], [], None, UNKNOWN, None),
    # no save cost: unknown
    ([(1000 * i, 2000.0 * i, None) for i in range(3)], [], 3600.0, UNKNOWN, None),
]


@pytest.mark.parametrize(("cks", "failures", "mtbf", "status", "optimum"), CASES)
def test_plan_cadence_table(
    cks: list[tuple[int, float, float | None]], failures: list[float], mtbf: float | None, status: str, optimum: float | None
) -> None:
    r = plan_cadence([ck(*c) for c in cks], failure_times_s=failures, mtbf_s=mtbf)
    assert r.status == status
    if optimum is None:
        assert r.optimal_interval_s is None
    else:
        assert r.optimal_interval_s == pytest.approx(optimum)
        assert r.optimal_lost_work_per_failure_s == pytest.approx(optimum / 2)
    assert r.interval_s is not None and r.lost_work_per_failure_s == pytest.approx(r.interval_s / 2)


def test_the_optimum_minimises_the_overhead() -> None:
    c, m = 45.0, 7200.0
    tau = young_daly_interval(c, m)
    r = plan_cadence([ck(i, tau * i, c) for i in range(5)], mtbf_s=m)
    worse = plan_cadence([ck(i, 3 * tau * i, c) for i in range(5)], mtbf_s=m)
    assert r.overhead is not None and worse.overhead is not None and r.overhead < worse.overhead
    assert r.overhead == pytest.approx(r.optimal_overhead)


def _write_run(root: Path, *, manifests: bool) -> None:
    t0 = 1_760_000_000.0
    for i in range(5):
        d = root / f"step_{(i + 1) * 500}"
        d.mkdir(parents=True)
        for name in ("__0_0.distcp", "__1_0.distcp", ".metadata"):
            (d / name).write_bytes(b"x" * 10)
        start = t0 + i * 1800.0
        os.utime(d / "__0_0.distcp", (start, start))
        os.utime(d / "__1_0.distcp", (start + 20, start + 20))
        os.utime(d / ".metadata", (start + 40, start + 40))
        if manifests:
            m = Manifest(step=(i + 1) * 500, world_size=2, files=(), created_unix_s=start, save_duration_s=30.0)
            (d / "ckptctl.json").write_bytes(m.to_json_bytes())
    (root / "step_3000.tmp").mkdir()  # a save in progress is not a checkpoint
    state = root / ".ckptctl"
    state.mkdir()
    with (state / "audit.jsonl").open("w") as f:
        for t in (t0 + 3000.0, t0 + 6000.0):
            f.write(json.dumps({"time": _iso(t), "action": "recover", "outcome": "recovered"}) + "\n")
        f.write(json.dumps({"time": _iso(t0), "action": "rollback"}) + "\n")


def _iso(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat()


def cli(*args: str) -> Any:
    out.reset()
    return runner.invoke(app, ["cadence", *args], catch_exceptions=False)


@pytest.mark.parametrize("manifests", [True, False])
def test_cadence_of_a_run_root(tmp_path: Path, manifests: bool) -> None:
    _write_run(tmp_path, manifests=manifests)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    res = cli(str(tmp_path), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["num_checkpoints"] == 5 and doc["interval_steps"] == 500
    assert doc["save_cost_source"] == ("manifest" if manifests else "file-times")
    assert doc["save_cost_s"] == pytest.approx(30.0 if manifests else 40.0)
    assert doc["interval_s"] == pytest.approx(1800.0)
    # two recoveries over the span from the first checkpoint to the last event
    assert doc["mtbf_source"] == "audit" and doc["num_failures"] == 2
    assert doc["optimal_interval_s"] == pytest.approx(math.sqrt(2 * doc["save_cost_s"] * doc["mtbf_s"]))
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # read-only


def test_cadence_flags_and_errors(tmp_path: Path) -> None:
    _write_run(tmp_path, manifests=True)
    res = cli(str(tmp_path), "--mtbf", "20m")
    assert res.exit_code == 3 and "interval-above-mtbf" in res.stdout  # every 30 min vs failures every 20
    assert "Young/Daly optimum" in res.stdout
    bad = run_cli(str(tmp_path), "--mtbf", "soon")
    assert bad.returncode == 2 and "error: --mtbf: not a duration" in bad.stderr
    missing = run_cli(str(tmp_path / "nope"))
    assert missing.returncode == 1 and "no such run root" in missing.stderr and "Traceback" not in missing.stderr


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckptctl", "cadence", *args], capture_output=True, text=True, timeout=120, check=False
    )
