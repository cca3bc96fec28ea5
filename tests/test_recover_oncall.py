"""Issue 20's fast checks (no torchrun): one job per run root with a real stand-in process
recorded in ``job.json``, ``--replace``, stale and unknown records, a dry run that goes on
past a live check that fails, and output to a pipe that has gone away. The drills
(``tests/drills/``) play the same rules with real jobs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.test_recover import CKPTCTL, _env, audit_records, golden_scene, launch_logs, run_recover


def _record(root: Path, job_id: str, *, host: str | None = None, backend: str = "local") -> None:
    doc = {
        "backend": backend,
        "job_id": job_id,
        "script": None,
        "owner": {"user": "alice", "host": host or socket.gethostname(), "pid": 1},
        "detached": True,
        "started": "2026-11-21T03:12:00Z",
        "resume_from": str(root / "step_30"),
        "log": None,
        "attempt": 1,
    }
    (root / ".ckptctl").mkdir(exist_ok=True)
    (root / ".ckptctl" / "job.json").write_text(json.dumps(doc))


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session of its own, as a detached job is (its pid is its group)."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_live_job_refuses_recover_and_launch_and_replace_stops_it(
    tmp_path: Path, golden: dict[int, Path], sleeper: subprocess.Popen[bytes]
) -> None:
    s = golden_scene(tmp_path, golden)
    _record(s.root, str(sleeper.pid))
    refused = run_recover("--config", str(s.config), "--no-logs", "--json", cwd=s.dir, timeout=120)
    assert refused.returncode == 4 and refused.stdout == "", refused.stderr
    (err,) = [ln for ln in refused.stderr.splitlines() if ln.startswith("error:")]
    assert f"run root has a live job: local job {sleeper.pid} (attempt 1, from step_30)" in err and "alice" in err
    assert f"hint: stop it (kill -TERM -{sleeper.pid}) or pass --replace" in refused.stderr
    launch = subprocess.run([CKPTCTL, "launch", "--config", str(s.config)], capture_output=True, text=True,
                            cwd=s.dir, env=_env(), timeout=120)
    assert launch.returncode == 4 and f"local job {sleeper.pid}" in launch.stderr, launch.stderr
    assert audit_records(s.root) == [] and launch_logs(s.root) == [] and sleeper.poll() is None
    dry = run_recover("--config", str(s.config), "--no-logs", "--dry-run", "--json", cwd=s.dir, timeout=120)
    assert any(w.startswith("a real run would be refused now: run root has a live job")
               for w in json.loads(dry.stdout)["warnings"])

    # --replace: the job gets SIGTERM (its group), is waited for, audited, its record closed
    done = run_recover("--config", str(s.config), "--no-logs", "--on-unknown", "stop", "--replace", "--json",
                       cwd=s.dir, timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    assert sleeper.wait(timeout=30) == -signal.SIGTERM
    stop, rec = audit_records(s.root)
    assert (stop["action"], stop["job_id"], rec["action"]) == ("stop-job", str(sleeper.pid), "recover")
    assert stop["state"] == "RUNNING -> ENDED" and stop["job"]["owner"]["user"] == "alice"
    job = json.loads((s.root / ".ckptctl" / "job.json").read_text())
    assert job["ended"] and job["end_reason"].startswith("--replace: stopped to start a new job")


def test_a_stale_record_is_superseded_and_audited(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    gone = subprocess.Popen(["true"])
    gone.wait()
    _record(s.root, str(gone.pid))
    proc = run_recover("--config", str(s.config), "--no-logs", "--on-unknown", "stop", "--json", cwd=s.dir, timeout=120)
    assert proc.returncode == 3, proc.stderr[-2000:]
    sup, rec = audit_records(s.root)
    assert sup["action"] == "supersede-job" and sup["job_id"] == str(gone.pid) and sup["state"] == "ENDED"
    assert rec["action"] == "recover" and rec["outcome"] == "stopped"
    doc = json.loads(proc.stdout)
    assert any(t["stage"] == "replace" and t["message"].startswith("superseded the record of local job")
               for t in doc["timeline"])
    assert json.loads((s.root / ".ckptctl" / "job.json").read_text())["end_reason"].startswith("superseded:")


def test_a_job_whose_end_cannot_be_seen_is_never_assumed_dead(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    _record(s.root, "4242", host="login-9.example")
    proc = run_recover("--config", str(s.config), "--no-logs", "--json", cwd=s.dir, timeout=120)
    assert proc.returncode == 4, proc.stderr
    assert "cannot see the end of: local job 4242" in proc.stderr and "started on login-9.example" in proc.stderr
    assert "if it is truly gone, remove" in proc.stderr and "job.json" in proc.stderr
    replaced = run_recover("--config", str(s.config), "--no-logs", "--replace", "--json", cwd=s.dir, timeout=120)
    assert replaced.returncode == 4 and "--replace could not stop local job 4242" in replaced.stderr, replaced.stderr
    assert [r["action"] for r in audit_records(s.root)] == []


def test_a_dry_run_shows_the_batch_script_when_sinfo_cannot_answer(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    doc = yaml.safe_load(s.config.read_text())
    doc["launch"]["backend"] = "slurm"
    s.config.write_text(yaml.safe_dump(doc))
    # A config sinfo cannot use (an empty file fails at once; a missing one costs a minute of
    # configless DNS lookups before the same failure).
    (tmp_path / "unusable-slurm.conf").write_text("")
    env = _env(SLURM_CONF=str(tmp_path / "unusable-slurm.conf"))
    proc = run_recover("--config", str(s.config), "--no-logs", "--dry-run", "--json", cwd=s.dir, env=env, timeout=120)
    assert proc.returncode == 3, proc.stderr
    out = json.loads(proc.stdout)
    assert out["outcome"] == "dry-run" and out["could_not_check"][0]["stage"] == "capacity"
    assert "could not check: capacity: capacity check failed" in out["reason"]
    assert "#SBATCH" in out["launch_plan"]["slurm"]["script"] and out["checkpoint"]["step"] == 30
    human = run_recover("--config", str(s.config), "--no-logs", "--dry-run", cwd=s.dir, env=env, timeout=120)
    assert human.returncode == 3 and "batch script (sbatch" in human.stdout and "#SBATCH --requeue" in human.stdout
    assert "[capacity] could not check:" in human.stderr
    assert not (s.root / ".ckptctl").exists(), "a dry run wrote to the run root"


def test_output_to_a_pipe_that_went_away_is_dropped_not_fatal(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    proc = subprocess.Popen([CKPTCTL, "recover", "--config", str(s.config), "--no-logs", "--dry-run"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=s.dir, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head` that has already left: every write to stdout is EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err


def test_the_supervisor_outlives_its_foreground(tmp_path: Path, golden: dict[int, Path]) -> None:
    """SIGKILL to the foreground (nothing can be forwarded): the supervisor, in its own session,
    finishes the recovery and writes its report; the run root is left unlocked."""
    s = golden_scene(tmp_path, golden)
    (s.dir / "oom.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    release = tmp_path / "release"
    fg = subprocess.Popen([CKPTCTL, "recover", "--config", str(s.config), "--logs", "oom.log", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=s.dir,
                          env=_env(CKPTCTL_TEST_HOLD_LOCK_UNTIL=str(release)))
    lock = s.root / ".ckptctl" / "lock"
    deadline = time.monotonic() + 60
    while not lock.exists():
        assert fg.poll() is None and time.monotonic() < deadline, fg.communicate()
        time.sleep(0.05)
    holder = json.loads(lock.read_text())["pid"]
    fg.kill()
    fg.communicate()
    release.touch()
    while lock.exists() or not list((s.root / ".ckptctl").glob("recovery-*.json")):
        assert time.monotonic() < deadline + 60, "the supervisor did not finish"
        time.sleep(0.1)
    (rec,) = audit_records(s.root)
    assert rec["action"] == "recover" and rec["outcome"] == "stopped" and rec["pid"] == holder
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(holder, 0)
            time.sleep(0.1)
