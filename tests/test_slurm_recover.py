"""`recover` with the slurm backend, against a real single-machine Slurm (tests/slurm_cluster.py).

The job is a real 2-rank torchrun (tests/scripts/resume_job.py, real DCP run root)
submitted with sbatch; the drain is a real ``scontrol update ... State=DRAIN``; the
capacity check a real ``sinfo``. The cluster has two nodes (two slurmd on this
host): a node drained for real is excluded from the next submission, which runs on
the other; with both drained the capacity ``wait`` path gives up. Skipped, with the reason, where the
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
    assert re.search(rf"ckptctl: slurm job {job['job_id']} on ({'|'.join(cluster.nodes)})$", out, re.M), out[:500]
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
def test_a_real_drain_keeps_the_next_submission_off_the_node(
    tmp_path: Path, golden: dict[int, Path], cluster: SlurmCluster
) -> None:
    bad, good = cluster.nodes[0], cluster.nodes[1]
    # no hosts_command: the slurm backend asks sinfo itself (a drained node is listed by
    # `sinfo -t idle`, so the state is read instead)
    root, cfg = scene(tmp_path, golden, cluster, capacity_poll_s=0.5, capacity_timeout_s=2)
    for n in cluster.nodes:  # an earlier test's cancelled job may still be completing
        cluster.wait_for_state("idle", node=n, timeout_s=60)
    (tmp_path / "kern.log").write_text(
        f"Nov 21 12:19:05 {bad} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=15241, name=python, GPU has fallen off the bus.\n"
    )
    try:
        # dry run: the batch script that would be submitted excludes the culprit; nothing drained
        code, dry, err = recover(cluster, tmp_path, "--config", str(cfg), "--logs", "kern.log", "--dry-run")
        assert dry["capacity"]["hosts_command"] == ["sinfo", "-h", "-N", "-o", "%N|%T"]
        assert code == 0 and dry["outcome"] == "dry-run", err[-3000:]
        assert f"#SBATCH --exclude={bad}" in dry["launch_plan"]["slurm"]["script"]
        assert not cluster.node_state(bad).startswith("drain"), "a dry run must not drain"
        # the real run drains the node for real; the job it submits runs on the other one
        code, doc, err = recover(cluster, tmp_path, "--config", str(cfg), "--logs", "kern.log",
                                 "--baseline", "baseline.log", "--execute-drain")
        assert code == 0 and doc["outcome"] == "recovered", err[-3000:]
        (drain,) = doc["drain"]
        assert drain["executed"] and drain["ok"] and drain["argv"][:3] == ["scontrol", "update", f"NodeName={bad}"]
        assert cluster.node_state(bad).startswith("drain")
        reasons = cluster.run("sinfo", "-h", "-N", "-o", "%N|%E").stdout
        assert f"{bad}|ckptctl: infra fault (RB-7)" in reasons
        assert doc["capacity"]["available_hosts"] == [good]
        (att,) = doc["attempts"]
        job = att["job"]
        assert f"#SBATCH --exclude={bad}" in Path(job["script"]).read_text()
        assert f"ckptctl: slurm job {job['job_id']} on {good}" in Path(att["log"]).read_text()
        cluster.run("scancel", job["job_id"], check=False)
        assert [r["action"] for r in audit_records(root)] == ["drain", "launch", "recover"]
        # both nodes gone: the capacity `wait` path asks sinfo until the timeout and launches nothing
        cluster.wait_for_state("idle", node=good, timeout_s=60)
        cluster.run("scontrol", "update", f"NodeName={good}", "State=DRAIN", "Reason=test")
        code, doc, err = recover(cluster, tmp_path, "--config", str(cfg), "--logs", "kern.log", "--baseline", "baseline.log")
        assert code == 3 and "not enough healthy hosts after waiting" in doc["reason"], err[-3000:]
        assert doc["capacity"]["checks"] >= 2 and doc["attempts"] == []
        assert doc["capacity"]["available_hosts"] == []
        # the ledger names the drained host
        inc = subprocess.run([CKPTCTL, "incidents", str(root), "--json"], capture_output=True, text=True, env=_env(), timeout=60)
        assert inc.returncode == 0, inc.stderr
        ledger = json.loads(inc.stdout)
        assert ledger["num_incidents"] == 2 and ledger["hosts"][0]["host"] == bad
        assert ledger["incidents"][0]["category"] == "infra" and ledger["incidents"][0]["drained_hosts"] == [bad]
    finally:
        for n in cluster.nodes:
            cluster.resume_node(n)
        for n in cluster.nodes:
            cluster.wait_for_state("idle", node=n, timeout_s=60)


@pytest.mark.slow
def test_slurms_usr1_warning_makes_the_trainer_write_an_emergency_checkpoint(
    tmp_path: Path, cluster: SlurmCluster
) -> None:
    """The batch script recover submits: Slurm's SIGUSR1 (what --signal=USR1@grace sends to the
    job's steps; here sent at once with scancel) reaches examples/train.py's workers through
    torchrun (which ignores it), and they write an emergency checkpoint and exit 75."""
    from ckptctl.adapters import slurm
    from ckptctl.core.config.schema import CkptctlConfig, LaunchConfig, SlurmConfig
    from ckptctl.core.launch.plan import plan_launch
    from ckptctl.core.launch.slurm_batch import plan_slurm_batch
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
