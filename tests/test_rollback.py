"""rollback / undo on real DCP checkpoints: local disk, the CLI, concurrent processes, S3 (moto server)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ckptctl.adapters.runlock import HOLD_ENV
from ckptctl.cli import output
from ckptctl.cli.app import app
from ckptctl.core.names import stamp_of, unquarantine_name
from ckptctl.core.rollback.model import (
    NAME_TAKEN,
    NO_FALLBACK,
    NOTHING_TO_ROLL_BACK,
    NOTHING_TO_UNDO,
)
from ckptctl.ops import rollback as ops
from ckptctl.runroot.locate import find_latest_complete
from tests.conftest import REPO, upload_tree
from tests.damage import flip_bit, tensor_data_offset, truncate

CKPTCTL = str(Path(sys.executable).parent / "ckptctl")
FIXED = datetime(2026, 11, 21, 3, 12, 0, tzinfo=timezone.utc)


# -- helpers ---------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory under root -> content hash ('dir' for directories)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def by_original_name(files: dict[str, str]) -> list[tuple[str, str]]:
    """Checkpoint files keyed by their ORIGINAL checkpoint name (quarantine tag stripped),
    as a sorted multiset: equal before and after means no byte was lost or changed."""
    out = []
    for rel, digest in files.items():
        head, _, rest = rel.partition("/")
        if head == ".ckptctl" or digest == "dir":
            continue
        out.append((f"{unquarantine_name(head) or head}/{rest}", digest))
    return sorted(out)


def located(root: str | Path) -> str | None:
    ckpt = find_latest_complete(str(root)).checkpoint
    return ckpt.name if ckpt else None


def audit_records(root: Path) -> list[dict[str, object]]:
    log = root / ".ckptctl" / "audit.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def quarantined(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if stamp_of(p.name))


def cli(*args: str) -> tuple[int, str, str]:
    """Run the Typer app in-process (CliRunner); returns (exit code, stdout, stderr)."""
    output.reset()
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    output.reset()
    return result.exit_code, result.stdout, result.stderr


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1")
    env.pop("CKPTCTL_DEBUG", None)
    env.pop(HOLD_ENV, None)
    env.update(extra or {})
    return env


def start_racing(argv: list[str], n: int, env: dict[str, str]) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        for _ in range(n)
    ]


def first_to_exit(procs: list[subprocess.Popen[str]], timeout_s: float = 60) -> subprocess.Popen[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                return p
        time.sleep(0.02)
    raise AssertionError("no process finished: both inside the lock?")


def finish(p: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=60)
    return p.returncode, out, err


# -- local disk: the use case ------------------------------------------------------------------


def test_rollback_and_undo_round_trip(run_root: Path) -> None:
    before = snapshot(run_root)
    assert located(run_root) == "step_30"

    res = ops.rollback(str(run_root), reason="loss spike at step 31")
    assert res.done and not res.refused and res.plan is not None
    assert (res.plan.source, res.plan.fallback) == ("step_30", "step_20")
    assert res.locate == str(run_root / "step_20")
    assert located(run_root) == "step_20"
    assert not (run_root / "step_30").exists()
    [qname] = quarantined(run_root)
    assert qname == res.plan.destination and qname.startswith("step_30.quarantined-")
    assert not (run_root / ".ckptctl" / "lock").exists(), "lock released"
    assert res.lock is not None and res.lock.method == "exclusive-create"

    [rec] = audit_records(run_root)
    assert rec["action"] == "quarantine" and rec["outcome"] == "done"
    assert (rec["from"], rec["to"], rec["step"]) == ("step_30", qname, 30)
    assert rec["reason"] == "loss spike at step 31"
    assert rec["pid"] == os.getpid() and rec["host"] == socket.gethostname()
    assert rec["user"] and rec["ckptctl_version"]
    datetime.strptime(str(rec["time"]), "%Y-%m-%dT%H:%M:%SZ")

    res = ops.undo(str(run_root), reason="false alarm")
    assert res.done and res.plan is not None
    assert (res.plan.source, res.plan.destination) == (qname, "step_30")
    assert res.plan.source_status == "complete", "content judged as if unquarantined"
    assert res.plan.next_locate == "step_30" and res.warnings == [], "prediction matched reality"
    assert res.locate == str(run_root / "step_30")
    assert located(run_root) == "step_30"
    recs = audit_records(run_root)
    assert [r["action"] for r in recs] == ["quarantine", "restore"]
    assert recs[1]["reason"] == "false alarm" and recs[1]["from"] == qname and recs[1]["to"] == "step_30"

    after = snapshot(run_root)
    assert {k: v for k, v in after.items() if not k.startswith(".ckptctl")} == before


def test_successive_rollbacks_then_refusal_then_undo_in_reverse(run_root: Path) -> None:
    original = by_original_name(snapshot(run_root))
    assert ops.rollback(str(run_root)).locate == str(run_root / "step_20")
    assert ops.rollback(str(run_root)).locate == str(run_root / "step_10")
    state = snapshot(run_root)

    res = ops.rollback(str(run_root), reason="one more")
    assert res.refusal is not None and res.refusal.code == NO_FALLBACK
    assert "no complete checkpoint older than step 10" in res.refusal.message
    assert not res.done and res.locate == str(run_root / "step_10")
    assert snapshot(run_root) == state, "a refusal renames nothing and logs nothing"
    assert len(audit_records(run_root)) == 2

    assert ops.undo(str(run_root)).locate == str(run_root / "step_20")
    assert ops.undo(str(run_root)).locate == str(run_root / "step_30")
    res = ops.undo(str(run_root))
    assert res.refusal is not None and res.refusal.code == NOTHING_TO_UNDO
    assert by_original_name(snapshot(run_root)) == original


def test_step_option_and_undo_by_step(run_root: Path) -> None:
    res = ops.rollback(str(run_root), step=20, reason="bad data between 10 and 20")
    assert res.done and res.plan is not None and res.plan.source == "step_20"
    assert res.locate == str(run_root / "step_30"), "a newer complete checkpoint still wins"
    assert any("step_30 is newer than step_20" in w for w in res.warnings)
    assert ops.rollback(str(run_root)).locate == str(run_root / "step_10")
    # two quarantined now; --undo --step 20 picks step 20 even though step 30 is more recent
    res = ops.undo(str(run_root), step=20)
    assert res.plan is not None and res.plan.destination == "step_20"
    assert res.locate == str(run_root / "step_20")
    assert quarantined(run_root)[0].startswith("step_30.quarantined-")


def test_refuses_when_no_earlier_complete_checkpoint(run_root: Path) -> None:
    (run_root / "step_20" / ".metadata").unlink()
    truncate(run_root / "step_10" / "__1_0.distcp", 0.5)
    before = snapshot(run_root)
    res = ops.rollback(str(run_root), reason="spike")
    assert res.refusal is not None and res.refusal.code == NO_FALLBACK
    assert "refusing to roll back step_30" in res.refusal.message
    assert res.locate == str(run_root / "step_30")
    after = snapshot(run_root)
    assert {k: v for k, v in after.items() if not k.startswith(".ckptctl")} == before
    assert audit_records(run_root) == [] and not (run_root / ".ckptctl" / "lock").exists()

    code, out, err = cli("rollback", str(run_root))
    assert code == 3
    assert out == ""
    assert "error: refusing to roll back step_30" in err and "hint:" in err
    assert located(run_root) == "step_30"


def test_dry_run_changes_nothing_and_shows_the_plan_a_real_run_applies(run_root: Path) -> None:
    before = snapshot(run_root)
    dry = ops.rollback(str(run_root), reason="r", dry_run=True, now=lambda: FIXED)
    assert snapshot(run_root) == before
    assert not (run_root / ".ckptctl").exists()
    assert dry.plan is not None and not dry.done and dry.lock is None
    assert dry.locate == str(run_root / "step_20")

    code, out, _err = cli("rollback", str(run_root), "--dry-run", "--json", "--reason", "r")
    assert code == 0
    doc = json.loads(out)
    assert doc["dry_run"] is True and doc["done"] is False
    assert doc["plan"]["source"]["name"] == "step_30"
    assert doc["plan"]["next_locate"]["path"] == str(run_root / "step_20")
    assert snapshot(run_root) == before

    real = ops.rollback(str(run_root), reason="r", now=lambda: FIXED)
    assert real.plan == dry.plan, "dry and real runs cannot drift apart"
    assert real.plan.to_json() == dry.plan.to_json()
    assert (run_root / f"step_30.quarantined-{FIXED:%Y%m%dT%H%M%SZ}").is_dir()
    [rec] = audit_records(run_root)
    assert {k: v for k, v in rec.items() if k != "outcome"} == dry.plan.record.to_json()


def test_deep_fallback_skips_a_bit_flip_a_quick_check_cannot_see(run_root: Path) -> None:
    shard, off = tensor_data_offset(run_root / "step_20")
    flip_bit(run_root / "step_20" / shard, off)
    quick = ops.rollback(str(run_root), dry_run=True)
    assert quick.plan is not None and quick.plan.fallback == "step_20"

    res = ops.rollback(str(run_root), deep=True, reason="spike")
    assert res.plan is not None and res.plan.fallback == "step_10"
    # the printed path is the deeply verified one; a plain locate would pick step_20
    assert res.locate == str(run_root / "step_10")
    assert located(run_root) == "step_20"
    assert any("failed the --deep check" in w for w in res.warnings), res.warnings


def test_a_leftover_quarantined_copy_is_harmless(run_root: Path) -> None:
    """What an object-store rename interrupted between copy and delete leaves behind."""
    leftover = "step_30.quarantined-20261120T000000Z"
    shutil.copytree(run_root / "step_30", run_root / leftover)
    assert located(run_root) == "step_30", "a quarantined name is never complete"
    res = ops.rollback(str(run_root))
    assert res.done and res.plan is not None and res.plan.source == "step_30"
    assert any("was quarantined before" in w for w in res.warnings)
    assert located(run_root) == "step_20"
    assert len(quarantined(run_root)) == 2


def test_a_rename_that_fails_after_the_copy_is_logged_and_leaves_both_copies(
    run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: the object-store rename dies between copy and delete."""
    from ckptctl.adapters.storage import Storage
    from ckptctl.errors import StorageError

    def copy_then_die(self: Storage, src: str, dst: str) -> None:
        shutil.copytree(src, dst)
        raise StorageError(f"{src}: rename failed: connection reset")

    original = by_original_name(snapshot(run_root))
    with monkeypatch.context() as m:
        m.setattr(Storage, "rename", copy_then_die)
        with pytest.raises(StorageError, match=r"could not rename step_30 to step_30\.quarantined-"):
            ops.rollback(str(run_root), reason="spike")
    [rec] = audit_records(run_root)
    assert rec["outcome"] == "failed" and "connection reset" in str(rec["error"])
    assert located(run_root) == "step_30", "both copies exist; the quarantined one is never complete"
    assert not (run_root / ".ckptctl" / "lock").exists(), "the lock is released on failure"
    # rerunning finishes the job; the leftover copy stays (harmless) and is noted
    res = ops.rollback(str(run_root), reason="spike")
    assert res.done and located(run_root) == "step_20"
    assert any("was quarantined before" in w for w in res.warnings)
    assert [r["outcome"] for r in audit_records(run_root)] == ["failed", "done"]
    assert set(by_original_name(snapshot(run_root))) == set(original)


def test_undo_refuses_when_the_original_name_is_taken(run_root: Path) -> None:
    ops.rollback(str(run_root))
    shutil.copytree(run_root / "step_20", run_root / "step_30")  # training saved step 30 again
    before = snapshot(run_root)
    res = ops.undo(str(run_root))
    assert res.refusal is not None and res.refusal.code == NAME_TAKEN
    assert "step_30 exists" in res.refusal.message
    assert snapshot(run_root) == before
    code, out, err = cli("rollback", "--undo", str(run_root))
    assert code == 3 and out == "" and "cannot restore" in err


def test_pointer_file_naming_the_quarantined_checkpoint_is_flagged(run_root: Path) -> None:
    (run_root / "latest").write_text("step_30\n")  # torchtitan/DeepSpeed-style pointer
    res = ops.rollback(str(run_root))
    assert res.done
    assert any("pointer file latest still names 'step_30'" in w and "step_20" in w for w in res.warnings)
    assert (run_root / "latest").read_text() == "step_30\n", "framework files are never edited"


def test_a_checkpoint_directory_is_not_a_run_root_and_gets_no_lock(run_root: Path) -> None:
    ckpt = run_root / "step_30"
    before = snapshot(ckpt)
    res = ops.rollback(str(ckpt))
    assert res.refusal is not None and res.refusal.code == NOTHING_TO_ROLL_BACK
    assert res.lock is None
    assert snapshot(ckpt) == before, "nothing written into the checkpoint"
    res = ops.undo(str(ckpt))
    assert res.refusal is not None and res.refusal.code == NOTHING_TO_UNDO
    assert snapshot(ckpt) == before


def test_undo_dry_run_changes_nothing(run_root: Path) -> None:
    ops.rollback(str(run_root))
    before = snapshot(run_root)
    res = ops.undo(str(run_root), dry_run=True)
    assert res.plan is not None and res.plan.action == "restore" and not res.done
    assert res.locate == str(run_root / "step_30")
    assert snapshot(run_root) == before
    code, out, err = cli("rollback", "--undo", "--dry-run", str(run_root))
    assert code == 0 and out == f"{run_root / 'step_30'}\n" and "dry run: nothing changed" in err
    assert snapshot(run_root) == before


def test_rollback_path_never_imports_torch(run_root: Path) -> None:
    code = (
        "import sys\n"
        "from ckptctl.cli.app import main\n"
        "for argv in (['rollback', ROOT], ['rollback', '--undo', ROOT], ['audit', ROOT]):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), (argv, e.code)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    ).replace("ROOT", repr(str(run_root)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env())
    assert proc.returncode == 0, proc.stderr


def test_missing_root_is_a_one_line_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [CKPTCTL, "rollback", str(tmp_path / "nope")], capture_output=True, text=True, env=cli_env(), timeout=60
    )
    assert proc.returncode == 1
    assert "no such directory" in proc.stderr and "Traceback" not in proc.stderr


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_rollback_prints_only_the_new_locate_path(run_root: Path) -> None:
    code, out, err = cli("rollback", str(run_root), "--reason", "loss spike")
    assert code == 0
    assert out == f"{run_root / 'step_20'}\n"
    assert "quarantine step_30 -> step_30.quarantined-" in err
    assert "reason: loss spike" in err and "undo with" in err
    code, out, _ = cli("locate", str(run_root))
    assert out == f"{run_root / 'step_20'}\n"

    code, out, err = cli("rollback", "--undo", "--json", str(run_root))
    assert code == 0
    doc = json.loads(out)
    assert doc["operation"] == "undo" and doc["done"] is True and doc["refused"] is None
    assert doc["plan"]["action"] == "restore" and doc["plan"]["destination"]["name"] == "step_30"
    assert doc["locate"] == str(run_root / "step_30")
    assert doc["lock"]["method"] == "exclusive-create"
    assert doc["audit_log"] == str(run_root / ".ckptctl" / "audit.jsonl")

    code, out, err = cli("audit", str(run_root))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert "quarantine  step_30 -> step_30.quarantined-" in lines[0] and "reason: loss spike" in lines[0]
    assert " restore  step_30.quarantined-" in lines[1]
    code, out, _ = cli("audit", "--json", str(run_root))
    assert [r["action"] for r in json.loads(out)["records"]] == ["quarantine", "restore"]


def test_cli_refusal_json_and_usage_errors(run_root: Path) -> None:
    code, out, err = cli("rollback", "--step", "10", "--json", str(run_root))
    assert code == 3
    doc = json.loads(out)
    assert doc["refused"]["code"] == "no-fallback" and doc["plan"] is None and doc["done"] is False
    assert "error:" in err

    code, out, err = cli("rollback", "--undo", "--deep", str(run_root))
    assert code == 2 and "--deep" in err
    code, out, err = cli("rollback", "--step", "-1", str(run_root))
    assert code == 2
    code, out, err = cli("rollback", "--step", "25", str(run_root))
    assert code == 3 and "no checkpoint at step 25" in err
    assert quarantined(run_root) == []


def test_cli_audit_on_a_root_never_touched(run_root: Path) -> None:
    code, out, err = cli("audit", str(run_root))
    assert code == 0 and out == "" and "no audit log" in err
    assert not (run_root / ".ckptctl").exists()


# -- concurrency: real processes ------------------------------------------------------------


def test_two_concurrent_rollbacks_one_wins_the_other_is_refused(run_root: Path) -> None:
    original = by_original_name(snapshot(run_root))
    release = run_root.parent / "release"
    # the winner waits inside the lock until `release` exists: the overlap is certain
    procs = start_racing(
        [CKPTCTL, "rollback", str(run_root), "--reason", "race"], 2, cli_env({HOLD_ENV: str(release)})
    )
    loser = first_to_exit(procs)
    code, out, err = finish(loser)
    assert code == 4, (code, out, err)
    winner = procs[1 - procs.index(loser)]
    assert winner.poll() is None, "the winner is still inside the lock"
    assert out == ""
    assert "error: run root is locked: rollback by" in err and f"(pid {winner.pid})" in err
    assert "since" in err and "hint:" in err and "Traceback" not in err
    release.touch()
    code, out, err = finish(winner)
    assert code == 0, err
    assert out == f"{run_root / 'step_20'}\n"
    assert len(quarantined(run_root)) == 1 and quarantined(run_root)[0].startswith("step_30.")
    assert located(run_root) == "step_20"
    assert by_original_name(snapshot(run_root)) == original, "no byte lost"
    assert len(audit_records(run_root)) == 1
    assert not (run_root / ".ckptctl" / "lock").exists()


def test_many_parallel_rollbacks_never_lose_or_double_up(run_root: Path) -> None:
    """No hook: four processes at once. Each either wins the lock (and quarantines the
    then-newest), is refused by the lock (4), or finds nothing left to fall back to (3)."""
    original = by_original_name(snapshot(run_root))
    results = [finish(p) for p in start_racing([CKPTCTL, "rollback", str(run_root)], 4, cli_env())]
    wins = [r for r in results if r[0] == 0]
    assert all(r[0] in (0, 3, 4) for r in results), results
    assert 1 <= len(wins) <= 2, results  # three checkpoints: at most two rollbacks
    for code, _out, err in results:
        if code == 4:
            assert "run root is locked" in err
        if code == 3:
            assert "no complete checkpoint older than step 10" in err
    assert len(quarantined(run_root)) == len(wins) == len(audit_records(run_root))
    assert sorted(q.split(".")[0] for q in quarantined(run_root)) == ["step_20", "step_30"][2 - len(wins) :]
    assert by_original_name(snapshot(run_root)) == original
    assert not (run_root / ".ckptctl" / "lock").exists()


def test_stale_lock_of_a_dead_process_is_broken_and_logged(run_root: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run_root / ".ckptctl").mkdir()
    (run_root / ".ckptctl" / "lock").write_text(
        json.dumps(
            {
                "pid": dead.pid,
                "host": socket.gethostname(),
                "user": "someone",
                "started": "2026-11-20T01:00:00Z",
                "operation": "recover",
                "token": "old",
            }
        )
    )
    code, out, err = cli("rollback", str(run_root))
    assert code == 0 and out == f"{run_root / 'step_20'}\n"
    assert f"removed a stale lock: recover by someone on {socket.gethostname()} (pid {dead.pid})" in err
    recs = audit_records(run_root)
    assert [r["action"] for r in recs] == ["break-lock", "quarantine"]
    assert recs[0]["stale_lock"]["pid"] == dead.pid  # type: ignore[index]


def test_lock_from_another_host_is_refused_with_a_hint(run_root: Path) -> None:
    (run_root / ".ckptctl").mkdir()
    lock = run_root / ".ckptctl" / "lock"
    lock.write_text(
        json.dumps(
            {
                "pid": 1,
                "host": "node-17",
                "user": "alice",
                "started": "2026-11-20T01:00:00Z",
                "operation": "recover",
                "token": "t",
            }
        )
    )
    proc = subprocess.run(
        [CKPTCTL, "rollback", str(run_root)], capture_output=True, text=True, env=cli_env(), timeout=60
    )
    assert proc.returncode == 4
    assert "run root is locked: recover by alice on node-17 (pid 1) since 2026-11-20T01:00:00Z" in proc.stderr
    assert f"rm {lock}" in proc.stderr
    assert lock.exists() and quarantined(run_root) == []
    # dry run still plans, and says a real run would be refused
    res = ops.rollback(str(run_root), dry_run=True)
    assert res.plan is not None and any("a real run would be refused" in w for w in res.warnings)


# -- S3: the real moto server over HTTP ----------------------------------------------------------


def _s3_files(s3_server: str, prefix: str) -> list[tuple[str, str]]:
    import s3fs

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    out = {}
    for key in fs.find(prefix):
        rel = key[len(prefix) + 1 :]
        out[rel] = hashlib.sha256(fs.cat_file(key)).hexdigest()
    return by_original_name(out)


def test_s3_rollback_undo_round_trip_via_ops(
    run_root: Path, s3_server: str, s3_env: dict[str, str], s3_bucket: str
) -> None:
    url = f"s3://{s3_bucket}/run"
    upload_tree(s3_server, run_root, url)
    original = _s3_files(s3_server, f"{s3_bucket}/run")
    assert located(url) == "step_30"

    res = ops.rollback(url, reason="s3 spike")
    assert res.done and res.locate == f"{url}/step_20"
    assert res.lock is not None and res.lock.method == "conditional-put"
    assert located(url) == "step_20"
    log = ops.read_audit(url)
    assert log.exists and [r["action"] for r in log.records] == ["quarantine"]
    assert log.records[0]["reason"] == "s3 spike" and log.records[0]["root"] == url
    assert _s3_files(s3_server, f"{s3_bucket}/run") == original

    res = ops.undo(url)
    assert res.done and res.locate == f"{url}/step_30"
    assert located(url) == "step_30"
    assert [r["action"] for r in ops.read_audit(url).records] == ["quarantine", "restore"]
    assert _s3_files(s3_server, f"{s3_bucket}/run") == original


def test_s3_cli_concurrent_rollbacks_and_undo(
    run_root: Path, s3_server: str, s3_env: dict[str, str], s3_bucket: str
) -> None:
    url = f"s3://{s3_bucket}/run"
    upload_tree(s3_server, run_root, url)
    original = _s3_files(s3_server, f"{s3_bucket}/run")
    release = run_root.parent / "release"
    procs = start_racing(
        [CKPTCTL, "rollback", "--json", url, "--reason", "spike"], 2, cli_env({**s3_env, HOLD_ENV: str(release)})
    )
    loser = first_to_exit(procs, timeout_s=90)
    code, out, err = finish(loser)
    assert code == 4, (code, out, err)
    assert "run root is locked: rollback by" in err and f"s3://{s3_bucket}/run/.ckptctl/lock" in err
    release.touch()
    code, out, err = finish(procs[1 - procs.index(loser)])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["done"] and doc["locate"] == f"{url}/step_20"
    assert doc["lock"]["method"] == "conditional-put"
    assert located(url) == "step_20"

    undo = subprocess.run(
        [CKPTCTL, "rollback", "--undo", url], capture_output=True, text=True, env=cli_env(s3_env), timeout=90
    )
    assert undo.returncode == 0, undo.stderr
    assert undo.stdout == f"{url}/step_30\n"
    assert [r["action"] for r in ops.read_audit(url).records] == ["quarantine", "restore"]
    assert _s3_files(s3_server, f"{s3_bucket}/run") == original
