"""recover's report sections and audit records are typed; their JSON keys are frozen here.

The key lists are the ones ``ckptctl recover --json`` and the audit log carried when these
sections were plain dicts (a contract: add keys, never rename). The recoveries below
stop before any launch (a job fault; an empty run root), so they run in-process in
well under a second: the lock, the audit records and the report file are real.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ckptctl.adapters.runlock import lock_path
from ckptctl.adapters.storage import Storage
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.plan import plan_capacity
from ckptctl.core.recover.decisions import DrainCommand
from ckptctl.ops import recover_steps
from ckptctl.ops.recover import recover
from ckptctl.ops.recover_report import CapacityRecord, DrainRecord
from ckptctl.runroot.root import RunRoot
from tests.test_recover import OOM, audit_records
from tests.test_runroot_mutate import SCHEMA

DRAIN = DrainCommand(
    kind="slurm",
    hosts=("gpu-node-2",),
    argv=("scontrol", "update", "NodeName=gpu-node-2", "State=DRAIN", "Reason=xid"),
)
CMD = ["kind", "hosts", "argv"]


def test_drain_record_keys_per_case() -> None:
    shown = DrainRecord(command=DRAIN, executed=False).to_json()
    assert list(shown) == [*CMD, "executed"] and shown["executed"] is False
    assert shown["argv"] == list(DRAIN.argv) and shown["hosts"] == ["gpu-node-2"]
    ran = DrainRecord(command=DRAIN, executed=True, ok=True, returncode=0, output="").to_json()
    assert list(ran) == [*CMD, "executed", "ok", "returncode", "output"] and ran["ok"] is True
    lost = DrainRecord(command=DRAIN, executed=True, ok=False, error="scontrol: command not found")
    assert list(lost.to_json()) == [*CMD, "executed", "ok", "error"]
    assert lost.failure == "scontrol: command not found"
    assert DrainRecord(command=DRAIN, executed=True, ok=False, returncode=1, output="").failure == "exit 1"
    assert DrainRecord(command=DRAIN, executed=False).failure is None


def test_run_drain_records_a_real_command() -> None:
    """A real process: a command that fails, one that does not exist, one that succeeds."""
    fails = DrainCommand(kind="slurm", hosts=("h1",), argv=(sys.executable, "-c", "import sys; print('no'); sys.exit(3)"))
    rec = recover_steps.run_drain(fails)
    assert rec.executed and rec.ok is False and rec.returncode == 3 and rec.output == "no"
    assert rec.failure == "no"
    missing = DrainCommand(kind="slurm", hosts=("h1",), argv=("/nonexistent/scontrol-xyz",))
    assert recover_steps.run_drain(missing).to_json()["error"] == "/nonexistent/scontrol-xyz: command not found"
    ok = DrainCommand(kind="slurm", hosts=("h1",), argv=(sys.executable, "-c", "pass"))
    assert recover_steps.run_drain(ok).failure is None


def test_capacity_record_keys_per_case() -> None:
    decision = plan_capacity(2, 2, ["a", "b", "c"], ["c"], "wait")
    doc = CapacityRecord(decision=decision, hosts_command=("hosts.sh",), checks=2, waited_s=1.5).to_json()
    assert list(doc) == [
        "action", "nnodes", "num_nodes", "available_hosts", "excluded_hosts", "reason",
        "hosts_command", "checks", "waited_s",
    ]
    assert doc["hosts_command"] == ["hosts.sh"] and doc["available_hosts"] == ["a", "b"]
    fixed = CapacityRecord(decision=decision, hosts_command=None, checks=1, waited_s=0.0)
    assert fixed.to_json()["hosts_command"] is None and fixed.reason == decision.reason
    failed = CapacityRecord(decision=None, hosts_command=("sinfo",), checks=1, error="sinfo: command not found")
    assert failed.to_json() == {"hosts_command": ["sinfo"], "checks": 1, "error": "sinfo: command not found"}
    assert failed.reason == "capacity check failed: sinfo: command not found"


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _stale_lock(root: Path) -> int:
    storage, path = Storage.for_url(str(root))
    pid = _dead_pid()
    doc = {"pid": pid, "host": socket.gethostname(), "user": "bob", "started": "2026-11-20T01:00:00Z",
           "operation": "recover", "token": "theirs"}
    storage.write_bytes(lock_path(storage, path), json.dumps(doc).encode())
    return pid


def test_a_refused_recovery_breaks_a_stale_lock_and_writes_typed_records(tmp_path: Path) -> None:
    """Job fault: recover stops before any launch. The stale lock it broke, and the refusal,
    are in the audit log with the frozen keys; the recover record points at the report."""
    root = tmp_path / "run"
    root.mkdir()
    pid = _stale_lock(root)
    log = tmp_path / "oom.log"
    log.write_text(OOM)
    stamps = iter(datetime(2026, 11, 22, 10, 0, s, tzinfo=timezone.utc) for s in range(60))
    report = recover(
        RunRoot.open(str(root)), config=CkptctlConfig(), logs=[str(log)], now=lambda: next(stamps)
    )
    assert report.outcome == "stopped" and "job fault" in report.reason
    assert "a stale lock left by a dead process was broken" in report.warnings
    records = audit_records(root)
    assert [r["action"] for r in records] == ["break-lock", "recover"]
    for r in records:
        assert [k for k in r if k != "outcome" or r["action"] == "recover"] == SCHEMA[r["action"]]
    broke, done = records
    assert broke["stale_lock"]["pid"] == pid and broke["root"] == str(root)
    assert done["time"] == report.ended and done["outcome"] == "stopped" and done["job"] is None
    assert done["report"] == report.report_path and Path(done["report"]).parent == root / ".ckptctl"
    saved = json.loads(Path(done["report"]).read_text())
    assert saved == report.to_json() | {"report_path": saved["report_path"]}
    assert saved["classify"]["category"] == "job" and saved["drain"] == [] and saved["capacity"] is None
    assert not Path(lock_path(*Storage.for_url(str(root)))).exists()  # released


def test_the_run_root_is_opened_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run walks classify, capacity and locate on the one RunRoot it opened (a spy
    counts the real opens; each still happens)."""
    opened: list[str] = []
    real = Storage.open_directory.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Storage], url: str, **kw: object) -> tuple[Storage, str]:
        opened.append(url)
        return real(cls, url, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(Storage, "open_directory", classmethod(counting))
    (tmp_path / "step_10").mkdir()  # not a checkpoint: locate walks past it
    report = recover(str(tmp_path), config=CkptctlConfig(), no_logs=True, dry_run=True)
    assert report.outcome == "stopped" and "no complete checkpoint" in report.reason
    assert [s.path for s in report.skipped_checkpoints] == [os.path.join(str(tmp_path), "step_10")]
    assert report.capacity is not None and report.to_json()["capacity"]["checks"] == 1
    assert opened == [str(tmp_path)]
    assert not (tmp_path / ".ckptctl").exists()  # a dry run writes nothing


def test_job_file_keys_and_the_launch_record_agree() -> None:
    """``.ckptctl/job.json`` (read by ``ckptctl status``) is the launch record plus its owner."""
    from ckptctl.core.rollback.model import Who
    from ckptctl.runroot import audit
    from ckptctl.runroot.state import ActiveJob

    who = Who(time="2026-11-22T10:00:00Z", user="ann", host="login1", pid=42, ckptctl_version="9.9")
    launch = audit.Launch(
        who=who, backend="local", job_id="4242", script=None, detached=True,
        started="2026-11-22T10:00:01Z", resume_from="/r/step_20",
    )
    doc = ActiveJob.from_launch(launch).to_json()
    assert list(doc) == ["backend", "job_id", "script", "owner", "detached", "started", "resume_from", "log"]
    assert doc["owner"] == {"user": "ann", "host": "login1", "pid": 42}
    rec = launch.to_json()
    assert {k: rec[k] for k in doc if k != "owner"} == {k: v for k, v in doc.items() if k != "owner"}
