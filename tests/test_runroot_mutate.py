"""runroot.mutate and runroot.audit: every rename/removal of a step directory, and its record.

Local directories and fsspec's ``memory://`` (an object-store-like filesystem: no atomic
rename, so the commit marker is what hides a directory) are both real filesystems here.
"""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from ckptctl.core.names import parse_checkpoint_name
from ckptctl.core.rollback.model import AuditRecord, Who
from ckptctl.core.verify.manifest import COMMIT_MARKER_NAME
from ckptctl.runroot import audit, mutate
from ckptctl.runroot.root import RunRoot

WHO = Who(time="2026-11-21T03:12:00Z", user="u", host="h", pid=7, ckptctl_version="9.9")

# The JSON keys of each kind of record, in order, as the audit logs of earlier versions
# hold them (a contract: add keys, never rename). "outcome"/"error" are added by write().
SCHEMA = {
    "quarantine": ["time", "user", "host", "pid", "action", "from", "to", "step", "reason", "ckptctl_version", "root"],
    "break-lock": [
        "time", "user", "host", "pid", "action", "from", "to", "step", "reason", "ckptctl_version", "root",
        "stale_lock",
    ],
    "retention-delete": [
        "time", "user", "host", "pid", "action", "from", "to", "step", "reason", "ckptctl_version", "root", "actor",
    ],
    "supersede": [
        "time", "user", "host", "pid", "action", "from", "to", "step", "reason", "ckptctl_version", "root", "actor",
    ],
    "drain": ["time", "user", "host", "pid", "action", "argv", "ok", "ckptctl_version"],
    "launch": [
        "time", "user", "host", "pid", "action", "backend", "job_id", "script", "detached", "started",
        "resume_from", "log", "ckptctl_version",
    ],
    "recover": ["time", "user", "host", "pid", "action", "outcome", "reason", "report", "job", "ckptctl_version"],
}


def records() -> list[audit.AuditEntry]:
    return [
        AuditRecord(
            who=WHO, action="quarantine", from_name="step_30",
            to_name="step_30.quarantined-20261121T031200Z", step=30, reason="spike", root="/r",
        ),
        audit.BreakLock(who=WHO, root="/r", reason="stale", stale_lock={"pid": 1}),
        audit.StepRemoved(who=WHO, root="/r", name="step_10", step=10, reason="keep_last=2"),
        audit.StepSuperseded(who=WHO, root="/r", from_name="step_10", to_name="x", step=10, reason="again"),
        audit.Drain(who=WHO, argv=["scontrol", "update"], ok=True),
        audit.Launch(
            who=WHO, backend="slurm", job_id="4412", script="/logs/slurm-1.sh", detached=False,
            started=WHO.time, resume_from="/r/step_20",
        ),
        audit.Recovery(who=WHO, outcome="resumed", reason=None, report="/r/.ckptctl/recovery-1.json"),
    ]


def test_every_action_has_one_record_type_with_the_documented_keys() -> None:
    recs = records()
    assert {r.to_json()["action"] for r in recs} | {"restore"} == audit.ACTIONS
    for r in recs:
        doc = r.to_json()
        assert list(doc) == SCHEMA[doc["action"]], doc["action"]


def test_write_adds_the_outcome_to_changes_of_step_directories_only(tmp_path: Path) -> None:
    root = RunRoot.open(str(tmp_path))
    for r in records():
        audit.write(root, r)
    bad = records()[0]
    audit.write(root, bad, outcome="failed", error="connection reset")
    lines = [json.loads(x) for x in (tmp_path / ".ckptctl" / "audit.jsonl").read_text().splitlines()]
    assert [x.get("outcome") for x in lines] == ["done", "done", "done", "done", None, None, "resumed", "failed"]
    assert lines[-1]["error"] == "connection reset" and "error" not in lines[0]
    assert audit.read(root).records == lines


def test_an_action_outside_the_closed_set_is_refused(tmp_path: Path) -> None:
    root = RunRoot.open(str(tmp_path))
    odd = AuditRecord(
        who=WHO, action="delete-everything", from_name="a", to_name="b", step=None, reason=None, root="/r",
    )
    with pytest.raises(ValueError, match="not one of"):
        audit.write(root, odd)
    assert not (tmp_path / ".ckptctl" / "audit.jsonl").exists()


def _mkstep(fs: fsspec.AbstractFileSystem, base: str, name: str, *, marker: bool = True) -> None:
    fs.pipe_file(f"{base}/{name}/__0_0.distcp", b"x" * 10)
    if marker:
        fs.pipe_file(f"{base}/{name}/{COMMIT_MARKER_NAME}", b"{}")


def _actions(root: RunRoot) -> list[tuple[str, str | None, str | None]]:
    return [(r["action"], r["from"], r["to"]) for r in audit.read(root).records]


def test_hide_then_purge_locally_renames_to_a_temp_name_first(tmp_path: Path) -> None:
    for name in ("step_10", "step_20.tmp-ab12"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "shard").write_bytes(b"x")
    root = RunRoot.open(str(tmp_path))
    hidden = mutate.hide(root, "step_10", step=10, reason="beyond keep_last=1")
    cn = parse_checkpoint_name(Path(hidden).name)
    assert cn is not None and cn.is_temp and cn.step == 10  # never complete, never a candidate
    assert not (tmp_path / "step_10").exists() and Path(hidden).is_dir()
    # an already temporary directory is purged where it is
    assert mutate.hide(root, "step_20.tmp-ab12", step=20, reason="stale") == str(tmp_path / "step_20.tmp-ab12")
    mutate.purge(root, hidden)
    assert not Path(hidden).exists()
    assert _actions(root) == [("retention-delete", "step_10", None), ("retention-delete", "step_20.tmp-ab12", None)]


def test_hide_on_an_object_store_removes_the_commit_marker_first() -> None:
    fs = fsspec.filesystem("memory")
    base = "/mutate-hide"
    _mkstep(fs, base, "step_10")
    root = RunRoot.open(f"memory://{base}")
    hidden = mutate.hide(root, "step_10", step=10, reason="beyond keep_last=1")
    assert hidden == f"{base}/step_10"
    assert not fs.exists(f"{base}/step_10/{COMMIT_MARKER_NAME}")
    assert fs.exists(f"{base}/step_10/__0_0.distcp")  # uncommitted, not yet gone
    mutate.purge(root, hidden)
    assert not fs.exists(f"{base}/step_10")
    assert _actions(root) == [("retention-delete", "step_10", None)]
    fs.rm(base, recursive=True)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_supersede_moves_aside_never_deletes_and_records_it(tmp_path: Path, where: str) -> None:
    if where == "local":
        url = str(tmp_path)
        (tmp_path / "step_10").mkdir()
        (tmp_path / "step_10" / COMMIT_MARKER_NAME).write_bytes(b"{}")
    else:
        url = "memory:///mutate-supersede"
        _mkstep(fsspec.filesystem("memory"), "/mutate-supersede", "step_10")
    root = RunRoot.open(url)
    aside = mutate.supersede(root, "step_10", "tok1", step=10, reason="a new save at step 10")
    assert aside == "step_10.quarantined-superseded-tok1"
    cn = parse_checkpoint_name(aside)
    assert cn is not None and cn.is_quarantined and cn.step == 10
    names = {e.name for e in root.list()}
    assert "step_10" not in names and aside in names
    assert _actions(root) == [("supersede", "step_10", aside)]
    [rec] = audit.read(root).records
    assert rec["actor"] == audit.TRAINING_ACTOR and rec["outcome"] == "done"
    if where == "memory":
        fsspec.filesystem("memory").rm("/mutate-supersede", recursive=True)


def test_quarantine_and_restore_check_the_record_kind(tmp_path: Path) -> None:
    (tmp_path / "step_30").mkdir()
    root = RunRoot.open(str(tmp_path))
    rec = AuditRecord(
        who=WHO, action="restore", from_name="step_30",
        to_name="step_30.quarantined-20261121T031200Z", step=30, reason=None, root=root.url,
    )
    with pytest.raises(ValueError, match="not a quarantine record"):
        mutate.quarantine(root, rec)
    assert (tmp_path / "step_30").is_dir() and audit.read(root).records == []


def test_a_save_at_an_existing_step_supersedes_through_mutate(tmp_path: Path) -> None:
    """The real training library: a second run saving step 10 again moves the first aside."""
    torch = pytest.importorskip("torch")
    from ckptctl.training import Checkpointer

    model = torch.nn.Linear(2, 2)
    for _run in range(2):  # a run, then a run resumed from before step 10 that saves it again
        ckpt = Checkpointer(str(tmp_path), preemption_signals=None)
        ckpt.save(10, {"model": model})
        ckpt.close()
    names = sorted(p.name for p in tmp_path.iterdir() if p.name != ".ckptctl")
    assert len(names) == 2 and "step_10" in names
    [aside] = [n for n in names if n != "step_10"]
    assert aside.startswith("step_10.quarantined-superseded-")
    root = RunRoot.open(str(tmp_path))
    assert _actions(root) == [("supersede", "step_10", aside)]
