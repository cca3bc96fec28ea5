"""`recover` never makes things worse (issue 14 point 3): explicit inputs, one run root,
every checkpoint of a bad attempt quarantined, only `continuous` is `recovered`; the job
survives the operator's terminal (SIGHUP) and `--detach` leaves a healthy job running."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.test_recover import (
    CKPTCTL,
    _env,
    audit_records,
    golden_scene,
    logged_steps,
    recover_json,
    snapshot,
)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def _raw(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CKPTCTL, "recover", *args], capture_output=True, text=True, cwd=cwd, env=_env(), timeout=120)


def test_a_bare_recover_prints_the_plan_and_exits_2(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    (s.dir / "ckptctl.yaml").write_text(s.config.read_text())  # found implicitly in the working directory
    before = snapshot(tmp_path)
    bare = _raw(cwd=s.dir)
    assert bare.returncode == 2, bare.stderr
    assert "outcome: plan-only" in bare.stdout
    assert "config: ckptctl.yaml" in bare.stdout, "the plan names the config file it read"
    assert f"run root: {s.root} (from the config)" in bare.stdout
    assert "missing: --logs FILE" in bare.stdout
    errors = [ln for ln in bare.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "--no-logs" in errors[0]
    js = _raw("--json", cwd=s.dir)
    doc = json.loads(js.stdout)
    assert js.returncode == 2 and doc["outcome"] == "plan-only" and doc["exit_code"] == 2
    assert doc["plan"]["config_file"] == "ckptctl.yaml" and doc["config_file"] == "ckptctl.yaml"
    assert [st["stage"] for st in doc["plan"]["steps"]][:2] == ["classify", "triage"]
    # no root at all: the plan says so too
    (s.dir / "ckptctl.yaml").write_text("launch: {script: x.py}\n")
    noroot = _raw("--no-logs", cwd=s.dir)
    assert noroot.returncode == 2 and "missing: a run root" in noroot.stdout
    # nothing was started or written
    assert {k: v for k, v in snapshot(tmp_path).items() if k != "ckptctl.yaml"} == {
        k: v for k, v in before.items() if k != "ckptctl.yaml"
    }


@pytest.mark.parametrize("where", ["argument", "script_args"])
def test_disagreeing_run_roots_exit_2_naming_both(tmp_path: Path, golden: dict[int, Path], where: str) -> None:
    s = golden_scene(tmp_path, golden)
    other = tmp_path / "run2"
    other.mkdir()
    args = ["--config", str(s.config), "--no-logs"]
    if where == "argument":
        args = [str(other), *args]
    else:
        doc = yaml.safe_load(s.config.read_text())
        doc["launch"]["script_args"] += ["--ckpt-root", str(other)]
        s.config.write_text(yaml.safe_dump(doc))
    proc = _raw(*args, "--dry-run", cwd=s.dir)
    assert proc.returncode == 2, proc.stderr
    (err,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert str(other) in err and str(s.root) in err and "two run roots" in err
    assert not (s.root / ".ckptctl").exists() and not (other / ".ckptctl").exists()


@pytest.mark.slow
def test_every_checkpoint_a_bad_attempt_wrote_is_quarantined_and_locate_agrees(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    """Every resume spikes; each attempt is stopped by the watch (SIGTERM) and writes an
    emergency checkpoint; the last attempt's one must be quarantined too."""
    s = golden_scene(tmp_path, golden, "--spike-from-step", "0", "--emergency-save", "--step-sleep-s", "0.3")
    code, doc, err = recover_json("--config", str(s.config), "--no-logs", "--baseline", "baseline.log",
                                  "--max-attempts", "2", cwd=s.dir)
    assert code == 3 and doc["outcome"] == "stopped", err[-4000:]
    assert "no attempts are left (2)" in doc["reason"] and "quarantined" in doc["reason"]
    first, second = doc["attempts"]
    assert (first["checkpoint_step"], second["checkpoint_step"]) == (30, 20)
    assert first["watch_verdict"] == second["watch_verdict"] == "spike"
    # each attempt's emergency checkpoint exists (quarantined) and is named in its attempt record
    for a, resumed in ((first, 30), (second, 20)):
        text = Path(a["log"]).read_text()
        m = re.search(r"ckptctl-train preempted signal=SIGTERM step=(\d+) checkpoint=(\S+)", text)
        assert m, text[-2000:]
        emergency = int(m.group(1))
        assert Path(m.group(2)).name == f"step_{emergency}"
        assert resumed < emergency <= max(logged_steps(text))
        assert sorted(a["quarantined"]) == sorted([f"step_{emergency}", f"step_{resumed}"])
    names = sorted(p.name for p in s.root.iterdir() if p.name != ".ckptctl")
    assert [n for n in names if ".quarantined-" not in n] == ["step_10"]
    # `locate` agrees with the report
    located = subprocess.run([CKPTCTL, "locate", str(s.root)], capture_output=True, text=True, env=_env(), timeout=60)
    assert located.returncode == 0 and located.stdout.strip() == str(s.root / "step_10")
    assert doc["locate_after"] == str(s.root / "step_10")
    assert [r["action"] for r in audit_records(s.root)].count("quarantine") == 4


@pytest.mark.slow
def test_insufficient_data_is_resumed_not_verified(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden, "--steps", "32")  # two steps after the resume: nothing to judge
    code, doc, err = recover_json("--config", str(s.config), "--no-logs", "--baseline", "baseline.log", cwd=s.dir)
    assert code == 5, err[-3000:]
    assert doc["outcome"] == "resumed-unverified" and doc["exit_code"] == 5
    assert doc["reason"] == "resumed from step 30, not verified: the loss watch said insufficient-data"
    (att,) = doc["attempts"]
    assert att["exit_code"] == 0 and att["watch_verdict"] == "insufficient-data"
    assert att["watch"]["verdict"] == "insufficient-data" and "schema" in att["watch"]  # the watch's JSON, whole
    assert doc["incident"]["verdicts"] == ["insufficient-data"]
    # RB-7's last check rides along: the run root's cadence, measured read-only at the end
    assert doc["cadence"]["schema"] and doc["cadence"]["num_checkpoints"] >= 1, doc["cadence"]


@pytest.mark.slow
def test_a_short_run_that_ended_is_judged_on_its_whole_log(tmp_path: Path, golden: dict[int, Path]) -> None:
    """Eight steps after the resume, fewer than `watch_steps`, but the job ended: its log is whole,
    so the watch decides on what it has instead of waiting for points that will never come."""
    s = golden_scene(tmp_path, golden, "--steps", "38")
    code, doc, err = recover_json("--config", str(s.config), "--no-logs", "--baseline", "baseline.log", cwd=s.dir)
    (att,) = doc["attempts"]
    assert att["exit_code"] == 0 and att["watch_verdict"] == "continuous", (att["watch"], err[-3000:])
    assert code == 0 and doc["outcome"] == "recovered"


@pytest.mark.slow
def test_a_lost_terminal_does_not_stop_a_healthy_resume(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden, "--steps", "70", "--step-sleep-s", "0.15")
    proc = subprocess.Popen(
        [CKPTCTL, "recover", "--config", str(s.config), "--no-logs", "--baseline", "baseline.log", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=s.dir, env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    logs = s.root / ".ckptctl" / "logs"
    deadline = time.monotonic() + 90
    while not any("ckptctl-train step=33 " in p.read_text() for p in logs.glob("launch-*.log")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGHUP)  # the ssh session dropped
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    doc = json.loads(out)
    (att,) = doc["attempts"]
    assert doc["outcome"] == "recovered" and att["exit_code"] == 0 and att["interrupted_by"] is None
    assert "ckptctl-train done step=70" in Path(att["log"]).read_text()


@pytest.mark.slow
def test_detach_returns_after_the_verdict_and_leaves_the_job_running(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden, "--steps", "2000", "--step-sleep-s", "0.1")
    code, doc, err = recover_json("--config", str(s.config), "--no-logs", "--baseline", "baseline.log", "--detach", cwd=s.dir)
    pid = int(doc["attempts"][0]["job"]["job_id"]) if doc.get("attempts") else None
    try:
        assert code == 0 and doc["outcome"] == "recovered", err[-3000:]
        (att,) = doc["attempts"]
        assert att["still_running"] is True and att["exit_code"] is None and att["watch_verdict"] == "continuous"
        assert pid is not None
        assert _running(pid), "the job must outlive recover"
        assert os.getsid(pid) == pid, "the job runs in a session of its own"
        job = json.loads((s.root / ".ckptctl" / "job.json").read_text())
        assert job["job_id"] == str(pid) and job["detached"] is True and job["owner"]["pid"] > 0
        log = Path(att["log"])
        size = log.stat().st_size
        time.sleep(1.5)
        assert log.stat().st_size > size, "the job's log keeps going"
        st = subprocess.run([CKPTCTL, "status", str(s.root), "--json"], capture_output=True, text=True, env=_env(), timeout=60)
        status = json.loads(st.stdout)
        assert status["job"]["now"]["state"] == "RUNNING" and status["last_recovery"]["watch_verdict"] == "continuous"
        assert not (s.root / ".ckptctl" / "lock").exists()
    finally:
        if pid is not None:
            # torchrun stops its workers on SIGTERM and then exits; our own job, by its pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            end = time.monotonic() + 60
            while time.monotonic() < end and _running(pid):
                time.sleep(0.2)


def test_status_and_incidents_read_the_recoveries_and_write_nothing(tmp_path: Path, golden: dict[int, Path]) -> None:
    from tests.test_recover import OOM

    s = golden_scene(tmp_path, golden)
    empty = subprocess.run([CKPTCTL, "status", str(s.root)], capture_output=True, text=True, env=_env(), timeout=60)
    assert empty.returncode == 0 and "job: none recorded" in empty.stdout and "last recovery: none" in empty.stdout
    (s.dir / "oom.log").write_text(OOM)
    code, doc, err = recover_json("--config", str(s.config), "--logs", "oom.log", cwd=s.dir)
    assert code == 3 and doc["incident"]["category"] == "job" and doc["incident"]["time_lost_s"] is None, err
    before = snapshot(s.root)
    st = json.loads(subprocess.run([CKPTCTL, "status", str(s.root), "--json"], capture_output=True, text=True,
                                   env=_env(), timeout=60).stdout)
    assert st["job"] is None and st["last_recovery"]["outcome"] == "stopped"
    assert st["last_recovery"]["report"] == doc["report_path"]
    inc = subprocess.run([CKPTCTL, "incidents", str(s.root), "--json"], capture_output=True, text=True, env=_env(), timeout=60)
    ledger = json.loads(inc.stdout)
    assert ledger["num_incidents"] == 1 and ledger["incidents"][0]["category"] == "job"
    assert ledger["incidents"][0]["outcome"] == "stopped" and ledger["mtbf_failures"] == 1
    # one failure since the oldest checkpoint: the MTBF `cadence` says too (one definition)
    cad = subprocess.run([CKPTCTL, "cadence", str(s.root), "--json"], capture_output=True, text=True, env=_env(), timeout=60)
    assert json.loads(cad.stdout)["mtbf_s"] == ledger["mtbf_s"] is not None
    human = subprocess.run([CKPTCTL, "incidents", str(s.root)], capture_output=True, text=True, env=_env(), timeout=60)
    assert human.returncode == 0 and "INCIDENTS" in human.stdout and "job -> stopped" in human.stdout
    assert snapshot(s.root) == before, "status and incidents are read-only"
