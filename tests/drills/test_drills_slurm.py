"""On-call drills with the slurm backend, against the real single-machine Slurm of the test
suite (``tests/slurm_cluster.py``: slurmctld, two slurmd, munge). The job is a real 2-rank
torchrun of ``tests/scripts/resume_job.py`` submitted with ``sbatch``. Each drill checks the
job (``squeue``/``scontrol`` through ``ckptctl status``), the lock, the report, the audit log
and ``ckptctl status``. Skipped, with the reason, where Slurm or root is missing.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import free_port
from tests.drills.drill import (
    END_S,
    Terminal,
    check_after,
    job_record,
    recover_process,
    slurm_out_has,
    status,
    wait_for,
)
from tests.scripts.resume_job import baseline_lines
from tests.slurm_cluster import SlurmCluster, unavailable_reason
from tests.test_recover import RESUME_JOB, _env, audit_records, run_recover
from tests.test_slurm_recover import cluster  # noqa: F401 - the module's real Slurm cluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


class SlurmScene:
    def __init__(self, tmp_path: Path, golden: dict[int, Path], cl: SlurmCluster, *job_args: str) -> None:
        self.dir = tmp_path
        self.root = tmp_path / "run"
        self.cluster = cl
        shutil.copytree(golden[2] / "run", self.root)
        (tmp_path / "baseline.log").write_text("\n".join(baseline_lines(35)) + "\n")
        (tmp_path / "slurm-4412937.out").write_text(
            "slurmstepd: error: *** JOB 4412937 ON gpu-node-2 CANCELLED AT 2026-11-21T12:19:05 DUE TO PREEMPTION ***\n"
        )
        doc: dict[str, Any] = {
            "run_root": str(self.root),
            "launch": {
                "backend": "slurm",
                "nproc_per_node": 2,
                "rdzv_endpoint": f"127.0.0.1:{free_port()}",
                "script": RESUME_JOB,
                "script_args": ["--steps", "400", "--step-sleep-s", "0.3", *job_args],
                "stop_grace_s": 20,
                "slurm": {"poll_s": 0.5, "cpus_per_task": min(2, cl.cpus), "signal_grace_s": 30},
            },
            "recover": {"watch_steps": 10, "drain": {"kind": "slurm"}},
        }
        self.config = tmp_path / "ckptctl.yaml"
        self.config.write_text(yaml.safe_dump(doc))
        self.env = _env(SLURM_CONF=str(cl.conf))
        self.logs = self.root / ".ckptctl" / "logs"

    def args(self, *extra: str) -> list[str]:
        return ["--config", str(self.config), *extra]

    def job_ids(self) -> list[str]:
        return [r["job_id"] for r in _launches(self.root)]

    def squeue(self, job_id: str) -> str:
        return self.cluster.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()

    def cancel_all(self) -> None:
        for job_id in self.job_ids():
            self.cluster.run("scancel", job_id, check=False)
        for job_id in self.job_ids():
            wait_for(f"slurm job {job_id} to end", lambda j=job_id: self.squeue(j) in ("", "COMPLETED", "CANCELLED"),
                     timeout=120)


def _launches(root: Path) -> list[dict[str, Any]]:
    path = root / ".ckptctl" / "audit.jsonl"
    if not path.exists():
        return []
    return [r for r in (json.loads(x) for x in path.read_text().splitlines() if x.strip()) if r["action"] == "launch"]


@pytest.fixture
def slurm_scene(tmp_path: Path, golden: dict[int, Path], cluster: SlurmCluster) -> Iterator[Any]:  # noqa: F811
    for n in cluster.nodes:  # a job of an earlier test may still be completing
        cluster.wait_for_state("idle", node=n, timeout_s=120)
    made: list[SlurmScene] = []

    def make(*job_args: str) -> SlurmScene:
        made.append(SlurmScene(tmp_path, golden, cluster, *job_args))
        return made[-1]

    try:
        yield make
    finally:
        for sc in made:
            sc.cancel_all()


def test_terminal_closed_during_the_watch_slurm(slurm_scene: Any) -> None:
    s = slurm_scene()
    term = Terminal(*s.args("--logs", "slurm-4412937.out", "--baseline", "baseline.log"), cwd=s.dir, env=s.env)
    wait_for("the job's step 32", lambda: slurm_out_has(s.logs, "ckptctl-train step=32 "), timeout=END_S, proc=term.proc)
    term.close()
    assert term.wait() == 0
    rep = check_after(s.root, outcome="recovered", job_phase="running", actions=["launch", "recover"], env=s.env)
    (att,) = rep["attempts"]
    assert att["watch_verdict"] == "continuous" and att["still_running"] and att["interrupted_by"] is None
    job = att["job"]["job_id"]
    assert s.squeue(job) == "RUNNING" and job_record(s.root)["job_id"] == job


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_or_ctrl_c_to_recover_stops_the_slurm_job(slurm_scene: Any, sig: signal.Signals, code: int) -> None:
    s = slurm_scene()
    proc = recover_process(*s.args("--logs", "slurm-4412937.out", "--baseline", "baseline.log"), cwd=s.dir, env=s.env)
    try:
        wait_for("a resumed step", lambda: slurm_out_has(s.logs, "ckptctl-train step=31 "), timeout=END_S, proc=proc)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=END_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err[-3000:]
    doc = json.loads(out)
    assert doc["interrupted_by"] == sig.name and doc["reason"].startswith(f"interrupted: ckptctl received {sig.name}")
    (att,) = doc["attempts"]
    assert att["job"]["state"] == "CANCELLED" and not att["still_running"]
    check_after(s.root, outcome="stopped", interrupted_by=sig.name, job_phase="ended",
                actions=["launch", "recover"], env=s.env)
    assert s.squeue(att["job"]["job_id"]) in ("", "CANCELLED")


def test_a_second_recover_while_the_slurm_job_runs(slurm_scene: Any) -> None:
    """--no-logs: recover returns after watch_steps steps, unverified, the job running under Slurm.
    A second recover is refused (exit 4) naming the job and `scancel`; --replace cancels it
    first (audited) and submits the next."""
    s = slurm_scene()
    first = run_recover(*s.args("--no-logs", "--json"), cwd=s.dir, env=s.env, timeout=END_S)
    assert first.returncode == 5, first.stderr[-3000:]
    doc = json.loads(first.stdout)
    job1 = doc["job"]["job_id"]
    assert doc["outcome"] == "resumed-unverified" and "no pre-failure log" in first.stderr
    check_after(s.root, outcome="resumed-unverified", job_phase="running", actions=["launch", "recover"], env=s.env)

    second = run_recover(*s.args("--no-logs", "--json"), cwd=s.dir, env=s.env, timeout=120)
    assert second.returncode == 4 and second.stdout == "", second.stderr
    assert f"slurm job {job1}" in second.stderr and f"scancel {job1}" in second.stderr and "--replace" in second.stderr
    assert s.squeue(job1) == "RUNNING"

    third = run_recover(*s.args("--logs", "slurm-4412937.out", "--baseline", "baseline.log", "--replace", "--json"),
                        cwd=s.dir, env=s.env, timeout=END_S)
    assert third.returncode == 0, third.stderr[-3000:]
    job2 = json.loads(third.stdout)["job"]["job_id"]
    assert job2 != job1 and s.squeue(job1) in ("", "CANCELLED", "COMPLETING")
    check_after(s.root, outcome="recovered", job_phase="running",
                actions=["launch", "recover", "stop-job", "launch", "recover"], env=s.env)
    stopped = next(r for r in audit_records(s.root) if r["action"] == "stop-job")
    assert stopped["job_id"] == job1 and stopped["backend"] == "slurm" and stopped["state"].startswith("RUNNING -> ")
    assert status(s.root, s.env)["job"]["job_id"] == job2


def test_a_hang_under_slurm_falls_back_and_recovers(slurm_scene: Any) -> None:
    """RUNNING under Slurm, no step after 34: a hang (--progress-timeout 8); scancel, then the
    next submission resumes from the step_33 the hung job saved and is verified."""
    s = slurm_scene("--save-at-step", "33", "--hang-after-steps", "4", "--hang-below-step", "33", "--hang-s", "900")
    proc = run_recover(*s.args("--logs", "slurm-4412937.out", "--baseline", "baseline.log", "--progress-timeout", "8",
                               "--json"), cwd=s.dir, env=s.env, timeout=END_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout)
    first, second = doc["attempts"]
    assert first["cause"] == "hang" and first["hang"]["last_step"] == 34 and first["job"]["state"] == "CANCELLED"
    assert first["hang"]["kind"] == "progress" and any("step=34 " in ln for ln in first["hang"]["last_lines"])
    assert (second["checkpoint_step"], second["watch_verdict"]) == (33, "continuous")
    check_after(s.root, outcome="recovered", job_phase="running", actions=["launch", "launch", "recover"], env=s.env)
