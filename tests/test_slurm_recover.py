"""`recover` with the slurm backend, against a real single-machine Slurm (tests/slurm_cluster.py).

The job is a real 2-rank torchrun (tests/scripts/resume_job.py, real DCP run root)
submitted with sbatch; the drain is a real ``scontrol update ... State=DRAIN``; the
capacity check a real ``sinfo``. Debian's Slurm runs one slurmd per host, so the
exclusion of a drained host is shown in the submitted script and the capacity
``wait`` path runs with the only node drained. Skipped, with the reason, where the
packages or root are missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import free_port
from tests.scripts.resume_job import baseline_lines
from tests.slurm_cluster import SlurmCluster, unavailable_reason
from tests.test_recover import CKPTCTL, PREEMPTED, RESUME_JOB, _env, audit_records

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    try:
        c = SlurmCluster.start(tmp_path_factory.mktemp("slurm"))
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"the test Slurm cluster did not start: {e}")
    try:
        yield c
    finally:
        c.stop()


def scene(tmp_path: Path, golden: dict[int, Path], cluster: SlurmCluster, **recover: Any) -> tuple[Path, Path]:
    root = tmp_path / "run"
    shutil.copytree(golden[2] / "run", root)
    (tmp_path / "baseline.log").write_text("\n".join(baseline_lines(35)) + "\n")
    doc = {
        "run_root": str(root),
        "launch": {
            "backend": "slurm",
            "nproc_per_node": 2,
            "rdzv_endpoint": f"127.0.0.1:{free_port()}",
            "script": RESUME_JOB,
            "script_args": ["--steps", "60", "--step-sleep-s", "0.2"],
            "stop_grace_s": 20,
            "slurm": {"poll_s": 0.5, "cpus_per_task": min(2, cluster.cpus), "signal_grace_s": 30},
        },
        "recover": {"watch_steps": 10, "drain": {"kind": "slurm"}, **recover},
    }
    cfg = tmp_path / "ckptctl.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    return root, cfg


def recover(cluster: SlurmCluster, cwd: Path, *args: str, timeout: float = 240) -> tuple[int, dict[str, Any], str]:
    env = _env(SLURM_CONF=str(cluster.conf))
    proc = subprocess.run([CKPTCTL, "recover", *args, "--json"], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"{e}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}") from e
    return proc.returncode, doc, proc.stderr


@pytest.mark.slow
def test_slurm_backend_submits_resumes_and_records_the_job(
    tmp_path: Path, golden: dict[int, Path], cluster: SlurmCluster
) -> None:
    root, cfg = scene(tmp_path, golden, cluster)
    (tmp_path / "slurm-4412937.out").write_text(PREEMPTED)
    code, doc, err = recover(cluster, tmp_path, "--config", str(cfg), "--logs", "slurm-4412937.out", "--baseline", "baseline.log")
    assert code == 0 and doc["outcome"] == "recovered", err[-4000:]
    (att,) = doc["attempts"]
    job = att["job"]
    assert job["backend"] == "slurm" and job["job_id"].isdigit()
    assert att["watch_verdict"] == "continuous" and att["checkpoint_step"] == 30
    # the job really ran under Slurm: its output file carries Slurm's job id and the resume
    out = Path(att["log"]).read_text()
    assert f"ckptctl: slurm job {job['job_id']} on {cluster.node}" in out
    assert f"ckptctl-train resumed from={root / 'step_30'} step=30" in out
    script = Path(job["script"]).read_text()
    for line in ("#SBATCH --requeue", "#SBATCH --signal=USR1@30", "#SBATCH --nodes=1", "export CKPTCTL_PREEMPTION_SIGNALS=USR1"):
        assert line in script
    assert f"--resume-from {root / 'step_30'}" in script
    # recorded: audit (launch with the job id), report, job.json; `ckptctl status` shows it
    launch = [r for r in audit_records(root) if r["action"] == "launch"]
    assert [r["job_id"] for r in launch] == [job["job_id"]] and launch[0]["backend"] == "slurm"
    assert doc["job"]["job_id"] == job["job_id"] and doc["incident"]["job_id"] == job["job_id"]
    st = subprocess.run([CKPTCTL, "status", str(root), "--json"], capture_output=True, text=True,
                        env=_env(SLURM_CONF=str(cluster.conf)), timeout=60)
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    assert status["job"]["job_id"] == job["job_id"]
    assert status["job"]["now"]["state"] in ("RUNNING", "COMPLETED", "COMPLETING")
    assert status["job"]["now"]["source"] in ("squeue", "scontrol")
    assert status["last_recovery"]["watch_verdict"] == "continuous"
    cluster.run("scancel", job["job_id"], check=False)


@pytest.mark.slow
def test_a_real_drain_excludes_the_node_and_capacity_waits_with_it_drained(
    tmp_path: Path, golden: dict[int, Path], cluster: SlurmCluster
) -> None:
    hosts_command = ["sinfo", "-h", "-N", "-t", "idle,mix,alloc", "-o", "%N"]
    root, cfg = scene(tmp_path, golden, cluster, hosts_command=hosts_command,
                      capacity_poll_s=0.5, capacity_timeout_s=2)
    node = cluster.node
    cluster.wait_for_state("idle", timeout_s=60)  # an earlier test's cancelled job may still be completing
    (tmp_path / "kern.log").write_text(
        f"Nov 21 12:19:05 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=15241, name=python, GPU has fallen off the bus.\n"
    )
    try:
        # dry run first (capacity left to Slurm): the batch script that would be submitted excludes the culprit
        open_cfg = yaml.safe_load(cfg.read_text())
        del open_cfg["recover"]["hosts_command"]
        (tmp_path / "open.yaml").write_text(yaml.safe_dump(open_cfg))
        code, dry, err = recover(cluster, tmp_path, "--config", "open.yaml", "--logs", "kern.log", "--dry-run")
        assert code == 0 and dry["outcome"] == "dry-run", err[-3000:]
        assert f"#SBATCH --exclude={node}" in dry["launch_plan"]["slurm"]["script"]
        assert not cluster.node_state().startswith("drain"), "a dry run must not drain"
        # the real run drains the node for real, then waits for capacity that never comes
        code, doc, err = recover(cluster, tmp_path, "--config", str(cfg), "--logs", "kern.log", "--execute-drain")
        assert code == 3 and doc["outcome"] == "stopped", err[-3000:]
        (drain,) = doc["drain"]
        assert drain["executed"] and drain["ok"] and drain["argv"][:3] == ["scontrol", "update", f"NodeName={node}"]
        assert cluster.node_state().startswith("drain")
        reasons = cluster.run("sinfo", "-h", "-N", "-o", "%N|%E").stdout
        assert f"{node}|ckptctl: infra fault (RB-7)" in reasons
        assert "not enough healthy hosts after waiting" in doc["reason"]
        assert doc["capacity"]["checks"] >= 2 and doc["attempts"] == []
        assert [r["action"] for r in audit_records(root)] == ["drain", "recover"]
        # the ledger names the drained host
        inc = subprocess.run([CKPTCTL, "incidents", str(root), "--json"], capture_output=True, text=True, env=_env(), timeout=60)
        assert inc.returncode == 0, inc.stderr
        ledger = json.loads(inc.stdout)
        assert ledger["num_incidents"] == 1 and ledger["hosts"][0]["host"] == node
        assert ledger["incidents"][0]["category"] == "infra"
    finally:
        cluster.resume_node()
        cluster.wait_for_state("idle", timeout_s=30)
    assert os.path.isdir(root / "step_30")


@pytest.mark.slow
def test_slurms_usr1_warning_makes_the_trainer_write_an_emergency_checkpoint(
    tmp_path: Path, cluster: SlurmCluster
) -> None:
    """The batch script recover submits: Slurm's SIGUSR1 (what --signal=USR1@grace sends to the
    job's steps; here sent at once with scancel) reaches examples/train.py's workers through
    torchrun (which ignores it), and they write an emergency checkpoint and exit 75."""
    from ckptctl.adapters import slurm
    from ckptctl.core.config import CkptctlConfig, LaunchConfig, SlurmConfig
    from ckptctl.core.launch_plan import plan_launch, plan_slurm_batch
    from tests.test_recover import TRAIN

    root = tmp_path / "run"
    cfg = CkptctlConfig(
        run_root=str(root),
        launch=LaunchConfig(
            nproc_per_node=2, rdzv_endpoint=f"127.0.0.1:{free_port()}", script=TRAIN, backend="slurm",
            script_args=("--ckpt-root", str(root), "--steps", "400", "--save-every", "1000", "--step-sleep-s", "0.2"),
            env={"OMP_NUM_THREADS": "1"},
            slurm=SlurmConfig(cpus_per_task=min(2, cluster.cpus), signal_grace_s=60),
        ),
    )
    batch = plan_slurm_batch(cfg, plan_launch(cfg, resume_from=None), log_dir=str(tmp_path))
    script = tmp_path / "job.sh"
    script.write_text(batch.script)
    env_before = dict(os.environ)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        job = slurm.submit(batch.sbatch_argv, str(script))
        out = Path(batch.output_path(job))
        deadline = time.monotonic() + 120
        while "ckptctl-train step=3 " not in (out.read_text() if out.exists() else ""):
            assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
            time.sleep(0.5)
        cluster.run("scancel", "--signal=USR1", job)
        while not slurm.job_state(job).finished:
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.5)
        text = out.read_text()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    m = re.search(r"ckptctl-train preempted signal=SIGUSR1 step=(\d+) checkpoint=(\S+) exit_code=75", text)
    assert m, text[-3000:]
    step = int(m.group(1))
    assert Path(m.group(2)) == root / f"step_{step}"
    located = subprocess.run([CKPTCTL, "locate", str(root)], capture_output=True, text=True, env=_env(), timeout=60)
    assert located.returncode == 0 and located.stdout.strip() == str(root / f"step_{step}"), located.stderr
