"""The record tells the truth (issue 21 point 4), with real processes: `recover` (real torchrun,
the stand-in trainer on the golden DCP run root), `status`, `incidents`, `audit`.

* steps recomputed = the last step the failed run logged or reached (its logs, the
  checkpoint directories it left) minus the checkpoint resumed from, whatever the
  watch window;
* a recovery killed after it launched its job is still an incident (``unrecorded``),
  recognised from its lock and audit records by `incidents`, `status` and the next
  `recover`; one that holds the lock now is ``in-progress``;
* `status` keeps the lock, the current job and its verification, and the last finished
  recovery apart;
* `audit` names hosts, job ids and outcomes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.scripts.resume_job import baseline_lines
from tests.test_recover import (
    CKPTCTL,
    PREEMPTED,
    _env,
    audit_records,
    golden_scene,
    recover_json,
)

pytestmark = pytest.mark.slow


def ckptctl(*args: str, json_out: bool = True) -> Any:
    proc = subprocess.run([CKPTCTL, *args, *(["--json"] if json_out else [])], capture_output=True, text=True,
                          env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout) if json_out else proc.stdout


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def _stop_job(pid: int) -> None:
    """End a job this test's recover started (torchrun in a session of its own), by its pid."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    end = time.monotonic() + 60
    while time.monotonic() < end and _running(pid):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _wait(what: str, check: Any, timeout_s: float, proc: subprocess.Popen[str] | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"recover ended while waiting for {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _set_job(config: Path, *, steps: int, watch_steps: int) -> None:
    doc = yaml.safe_load(config.read_text())
    doc["launch"]["script_args"] = ["--steps", str(steps), "--step-sleep-s", "0.2"]
    doc["recover"]["watch_steps"] = watch_steps
    config.write_text(yaml.safe_dump(doc))


def test_steps_recomputed_are_what_the_failed_run_reached_not_the_watch_window(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    """The failed run logged steps 1..73 and had begun saving step 75 (step_75.tmp-*); the newest
    complete checkpoint is step_30 and the watch reads 10 steps: 45 steps are recomputed."""
    s = golden_scene(tmp_path, golden)
    (s.dir / "train.log").write_text("\n".join(baseline_lines(73)) + "\n" + PREEMPTED)
    shutil.copytree(s.root / "step_30", s.root / "step_75.tmp-5f3a9c")  # the save the preemption cut
    code, doc, err = recover_json("--config", str(s.config), "--logs", "train.log", cwd=s.dir)
    assert code == 0 and doc["outcome"] == "recovered", err[-3000:]
    inc = doc["incident"]
    assert (inc["crash_step"], inc["checkpoint_step"], inc["steps_recomputed"]) == (75, 30, 45)
    ledger = ckptctl("incidents", str(s.root))
    (row,) = ledger["incidents"]
    assert row["steps_recomputed"] == 45 and ledger["steps_recomputed"] == 45 and row["source"] == "report"
    human = ckptctl("incidents", str(s.root), json_out=False)
    assert "45 step(s) recomputed (reached 75, resumed from 30)" in human
    # without the cut save, the log alone says how far the run got
    shutil.rmtree(s.root / "step_75.tmp-5f3a9c")
    code, doc, err = recover_json("--config", str(s.config), "--logs", "train.log", cwd=s.dir)
    assert code == 0, err[-3000:]
    assert (doc["incident"]["crash_step"], doc["incident"]["steps_recomputed"]) == (73, 43)


def test_a_killed_recovery_is_an_incident_and_status_never_mixes_up_jobs(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    s = golden_scene(tmp_path, golden)
    _set_job(s.config, steps=41, watch_steps=10)
    args = ["--config", str(s.config), "--no-logs", "--baseline", "baseline.log", "--json"]
    host = socket.gethostname()
    lock_file = s.root / ".ckptctl" / "lock"
    release = tmp_path / "release"
    jobs: list[int] = []
    try:
        # 1. a recovery holds the lock (held right after taking it) and has finished nothing yet
        first = subprocess.Popen([CKPTCTL, "recover", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=s.dir, env=_env(CKPTCTL_TEST_HOLD_LOCK_UNTIL=str(release)))
        _wait("the first recovery's lock", lock_file.exists, 120, first)
        st = ckptctl("status", str(s.root))
        # the recovery runs in its supervisor (a process of its own session): it holds the lock
        sup_a = st["lock"]["pid"]
        assert st["lock"]["operation"] == "recover" and st["lock"]["alive"] is True and sup_a != first.pid
        assert st["recovery_in_progress"]["pid"] == sup_a and st["last_recovery"] is None
        human = ckptctl("status", str(s.root), json_out=False)
        assert "recovery in progress: recover by" in human and f"(pid {sup_a})" in human
        assert "last recovery: none finished; one is in progress" in human
        (inc,) = ckptctl("incidents", str(s.root))["incidents"]
        assert inc["outcome"] == "in-progress" and inc["source"] == "audit" and str(sup_a) in inc["note"]
        release.write_text("")
        out, err = first.communicate(timeout=300)
        doc = json.loads(out)
        assert first.returncode == 0 and doc["outcome"] == "recovered", err[-3000:]
        job_a = doc["job"]["job_id"]
        jobs.append(int(job_a))
        st = ckptctl("status", str(s.root))
        assert st["lock"] is None and st["job"]["job_id"] == job_a
        assert st["job"]["verified"]["state"] == "verified" and st["job"]["verified"]["verdict"] == "continuous"
        assert st["last_recovery"]["about_current_job"] is True

        # 2. a second recovery launches a long job (its watch never decides: 500 steps) and is killed
        _set_job(s.config, steps=2000, watch_steps=500)
        second = subprocess.Popen([CKPTCTL, "recover", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, cwd=s.dir, env=_env())
        launch = _wait(
            "the second launch",
            lambda: [r for r in audit_records(s.root) if r["action"] == "launch" and r["job_id"] != job_a],
            180, second,
        )[0]
        job_b = launch["job_id"]
        jobs.append(int(job_b))
        _wait("job.json of the second job",
              lambda: json.loads((s.root / ".ckptctl" / "job.json").read_text())["job_id"] == job_b, 60, second)
        st = ckptctl("status", str(s.root))
        assert st["job"]["job_id"] == job_b and st["job"]["verified"]["state"] == "being-watched"
        # the previous recovery's verdict is about the previous job, and says so
        assert st["last_recovery"]["job_id"] == job_a and st["last_recovery"]["about_current_job"] is False
        sup_b = launch["pid"]  # the second recovery's supervisor: killing it kills the recovery
        assert sup_b != sup_a
        os.kill(sup_b, signal.SIGKILL)
        second.send_signal(signal.SIGKILL)
        second.communicate(timeout=60)
        # gone, not a zombie: its parent (the killed foreground) is gone too, init reaps it
        _wait("the killed supervisor to be reaped", lambda: not Path(f"/proc/{sup_b}").exists(), 60)
        # the job's output went to its supervisor (a pipe): without its reader it ends at its
        # next line, never left running unwatched (docs/launch.md, "what happens when")
        _wait("the job to end with its supervisor", lambda: not _running(int(job_b)), 60)

        st = ckptctl("status", str(s.root))
        assert st["lock"]["pid"] == sup_b and st["lock"]["alive"] is False and st["recovery_in_progress"] is None
        assert st["job"]["job_id"] == job_b and st["job"]["now"]["state"] == "ENDED"
        verified = st["job"]["verified"]
        assert verified["state"] == "not-verified" and "no recovery report names this job" in verified["reason"]
        assert st["last_recovery"]["outcome"] == "recovered" and st["last_recovery"]["about_current_job"] is False
        human = ckptctl("status", str(s.root), json_out=False)
        assert f"job: local {job_b}: ENDED" in human and "verified: no (not-verified)" in human
        assert f"about job {job_a}, not the job above: loss watch continuous" in human
        assert "stale (its holder is gone" in human

        ledger = ckptctl("incidents", str(s.root))
        assert [(r["outcome"], r["job_id"]) for r in ledger["incidents"]] == [("recovered", job_a), ("unrecorded", job_b)]
        died = ledger["incidents"][1]
        assert died["source"] == "audit" and f"pid {sup_b} on {host}" in died["note"]
        assert "ended without its report" in died["note"]

        # 3. the next recover breaks the stale lock; the dead one stays ONE incident
        _stop_job(int(job_b))
        _set_job(s.config, steps=41, watch_steps=10)
        code, doc, err = recover_json(*args[:-1], cwd=s.dir)
        assert code == 0 and doc["outcome"] == "recovered", err[-3000:]
        jobs.append(int(doc["job"]["job_id"]))
        assert any("stale lock" in w for w in doc["warnings"])
        assert doc["cadence"]["num_failures"] == 3  # A, the dead one, and this recovery's own
        ledger = ckptctl("incidents", str(s.root))
        assert [r["outcome"] for r in ledger["incidents"]] == ["recovered", "unrecorded", "recovered"]

        # audit: hosts, job ids, outcomes in the human output
        text = ckptctl("audit", str(s.root), json_out=False)
        assert f"launch  started local job {job_a} resuming from {s.root / 'step_30'}  by" in text
        assert f"recover  recovery ended: recovered (local job {job_a})" in text
        assert f"launch  started local job {job_b} resuming from" in text
        assert f"break-lock  broke a stale recover lock of pid {sup_b} on {host}" in text
    finally:
        release.write_text("")
        for pid in jobs:
            _stop_job(pid)


def test_audit_names_the_drained_hosts(tmp_path: Path) -> None:
    """A drain record (recover --execute-drain writes it) names its hosts; one written before
    the key existed still shows its command."""
    from ckptctl.adapters.audit import current_actor
    from ckptctl.runroot import audit
    from ckptctl.runroot.root import RunRoot

    root = RunRoot.for_url(str(tmp_path))
    audit.write(root, audit.Drain(who=current_actor(), argv=["scontrol", "update", "NodeName=gpu-node-2", "State=DRAIN"],
                                  ok=True, hosts=["gpu-node-2"]))
    audit.write(root, audit.Drain(who=current_actor(), argv=["kubectl", "cordon", "gpu-node-7"], ok=False,
                                  hosts=["gpu-node-7"]))
    log = tmp_path / ".ckptctl" / "audit.jsonl"
    old = {**json.loads(log.read_text().splitlines()[0])}
    del old["hosts"]
    with log.open("a") as f:
        f.write(json.dumps(old) + "\n")
    text = ckptctl("audit", str(tmp_path), json_out=False)
    lines = text.splitlines()
    assert "drain  drained gpu-node-2: `scontrol update NodeName=gpu-node-2 State=DRAIN`  by" in lines[0]
    assert "drain  drain FAILED for gpu-node-7: `kubectl cordon gpu-node-7`" in lines[1]
    assert "(hosts not recorded): `scontrol update NodeName=gpu-node-2 State=DRAIN`" in lines[2]
