"""Requeue-safe Slurm jobs, against a real single-machine Slurm (tests/slurm_cluster.py).

``scontrol requeue`` ends the job's run and puts it back in the queue under the same id;
Slurm starts it again with ``SLURM_RESTART_COUNT`` = 1. The batch script ckptctl renders
(``core.launch.slurm_batch``) must then resume from the newest complete checkpoint there
is *now* (``ckptctl locate`` inside the script), not from the path chosen at submit time,
and append to the output file (``--open-mode=append``), so the log of the run before the
requeue survives. The cluster here shortens ``cred_expire`` (how long Slurm holds a
requeued job) to 20 s. Skipped, with the reason, where the packages or root are missing.
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
from tests.test_recover import CKPTCTL, PREEMPTED, RESUME_JOB, TRAIN, _env

pytestmark = [
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.slow,
]

START_LINE = re.compile(r"^ckptctl: job start job_id=(\d+) restart=(\d+) time=\S+ (?:resuming from checkpoint=(\S+)|from scratch)$", re.M)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    try:
        c = SlurmCluster.start(tmp_path_factory.mktemp("slurm-requeue"), cred_expire_s=20)
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"the test Slurm cluster did not start: {e}")
    try:
        yield c
    finally:
        c.stop()


def read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def wait_for(what: str, check: Any, deadline: float, show: Any) -> Any:
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{show()[-4000:]}"
        time.sleep(0.5)


def locate(root: Path) -> str:
    out = subprocess.run([CKPTCTL, "locate", str(root)], capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def job_state(cluster: SlurmCluster, job: str) -> str:
    out = cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
    return out.splitlines()[0] if out else "GONE"


def test_a_requeued_job_resumes_from_the_newest_complete_checkpoint_and_keeps_the_log(
    tmp_path: Path, cluster: SlurmCluster
) -> None:
    """examples/train.py (real DCP saves every 4 steps) under the batch script; requeued after
    its second save. ``scontrol requeue`` ends the run as ``scancel`` does (SIGTERM to every
    process of the job): the trainer writes its emergency checkpoint at the step reached and
    exits 75 (issue 21 point 1); the restart locates the newest complete checkpoint (that
    one) and resumes there, and the output file holds both runs."""
    from ckptctl.adapters import slurm
    from ckptctl.backends.slurm import CKPTCTL_ARGV
    from ckptctl.core.config.schema import CkptctlConfig, LaunchConfig, SlurmConfig
    from ckptctl.core.launch.plan import plan_launch
    from ckptctl.core.launch.slurm_batch import plan_slurm_batch

    root = tmp_path / "run"
    cfg = CkptctlConfig(
        run_root=str(root),
        launch=LaunchConfig(
            nproc_per_node=2, rdzv_endpoint=f"127.0.0.1:{free_port()}", script=TRAIN, backend="slurm",
            script_args=("--ckpt-root", str(root), "--steps", "400", "--save-every", "4", "--step-sleep-s", "0.3"),
            env={"OMP_NUM_THREADS": "1"},
            slurm=SlurmConfig(cpus_per_task=min(2, cluster.cpus), signal_grace_s=60),
        ),
    )
    batch = plan_slurm_batch(cfg, plan_launch(cfg, resume_from=None), log_dir=str(tmp_path), ckptctl_argv=CKPTCTL_ARGV)
    assert "#SBATCH --open-mode=append" in batch.script and "#SBATCH --requeue" in batch.script
    script = tmp_path / "job.sh"
    script.write_text(batch.script)
    env_before = dict(os.environ)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    job = ""
    try:
        job = slurm.submit(batch.sbatch_argv, str(script))
        out = Path(batch.output_path(job))
        deadline = time.monotonic() + 420
        wait_for("step_8", lambda: (root / "step_8").is_dir() and "ckptctl-train step=10 " in read(out), deadline,
                 lambda: read(out))
        first_run = read(out)
        cluster.run("scontrol", "requeue", job)
        # the first run ends; nothing writes the run root while the job waits to start again
        wait_for("the requeue", lambda: job_state(cluster, job) in ("PENDING", "REQUEUED"), deadline, lambda: read(out))
        newest = locate(root)
        restarted = wait_for(
            "the restart", lambda: [m for m in START_LINE.finditer(read(out)) if m.group(2) == "1"], deadline,
            lambda: read(out),
        )
        wait_for("the resumed run's first step", lambda: re.search(r"ckptctl-train resumed from=.*\n(?:.*\n)*ckptctl-train step=\d+ ", read(out)), deadline, lambda: read(out))
        text = read(out)
    finally:
        if job:
            cluster.run("scancel", job, check=False)
        os.environ.clear()
        os.environ.update(env_before)
    starts = [(m.group(1), m.group(2), m.group(3)) for m in START_LINE.finditer(text)]
    assert starts[0] == (job, "0", None), starts  # the first start: from scratch
    (restart,) = restarted
    assert restart.group(3) == newest, (restart.group(0), newest)
    step = int(Path(newest).name.removeprefix("step_"))
    before = text.split(restart.group(0))[0]
    assert step >= 8
    # the emergency checkpoint of the requeued run is the newest: at the last step it completed
    m = re.search(r"^ckptctl-train preempted signal=SIGTERM step=(\d+) checkpoint=(\S+) exit_code=75$", before, re.M)
    assert m and m.group(2) == newest and int(m.group(1)) == step, before[-3000:]
    assert max(int(x) for x in re.findall(r"^ckptctl-train step=(\d+) ", before, re.M)) == step
    assert f"ckptctl-train resumed from={newest} step={step} " in text
    # nothing truncated: the first run's output is still there, whole, before the restart
    assert text.startswith(first_run) and text.index(first_run) < text.index(restart.group(0))
    assert "ckptctl-train step=1 " in before
    resumed = text.split(restart.group(0))[1]
    assert re.search(rf"^ckptctl-train step={step + 1} ", resumed, re.M), resumed[-3000:]


def test_a_restart_with_no_complete_checkpoint_fails_clearly(
    tmp_path: Path, golden: dict[int, Path], cluster: SlurmCluster
) -> None:
    """The first start resumed from step_30 (real DCP, the stand-in trainer); by the restart no
    complete checkpoint is left (each renamed to a temporary name): the script says so in one
    line and exits 3 instead of starting from a stale or missing path."""
    from ckptctl.adapters import slurm
    from ckptctl.backends.slurm import CKPTCTL_ARGV
    from ckptctl.core.config.schema import CkptctlConfig, LaunchConfig, SlurmConfig
    from ckptctl.core.launch.plan import plan_launch
    from ckptctl.core.launch.slurm_batch import MISSING_CHECKPOINT_EXIT, plan_slurm_batch

    root = tmp_path / "run"
    shutil.copytree(golden[2] / "run", root)
    cfg = CkptctlConfig(
        run_root=str(root),
        launch=LaunchConfig(
            nproc_per_node=2, rdzv_endpoint=f"127.0.0.1:{free_port()}", script=RESUME_JOB, backend="slurm",
            script_args=("--steps", "400", "--step-sleep-s", "0.3"), env={"OMP_NUM_THREADS": "1"},
            slurm=SlurmConfig(cpus_per_task=min(2, cluster.cpus)),
        ),
    )
    batch = plan_slurm_batch(cfg, plan_launch(cfg, resume_from=str(root / "step_30")), log_dir=str(tmp_path),
                             ckptctl_argv=CKPTCTL_ARGV)
    script = tmp_path / "job.sh"
    script.write_text(batch.script)
    env_before = dict(os.environ)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    job = ""
    try:
        job = slurm.submit(batch.sbatch_argv, str(script))
        out = Path(batch.output_path(job))
        deadline = time.monotonic() + 420
        wait_for("the first steps", lambda: "ckptctl-train step=33 " in read(out), deadline, lambda: read(out))
        cluster.run("scontrol", "requeue", job)
        wait_for("the requeue", lambda: job_state(cluster, job) in ("PENDING", "REQUEUED"), deadline, lambda: read(out))
        for step in (10, 20, 30):  # every complete checkpoint gone (as after a disk loss)
            (root / f"step_{step}").rename(root / f"step_{step}.tmp-lost")
        state = wait_for("the restart to end", lambda: (s := slurm.job_state(job)).finished and s, deadline, lambda: read(out))
        text = read(out)
    finally:
        if job:
            cluster.run("scancel", job, check=False)
        os.environ.clear()
        os.environ.update(env_before)
    assert state.exit_code == MISSING_CHECKPOINT_EXIT, (state, text[-3000:])
    assert re.search(
        rf"^ckptctl: job {job} restart 1: no complete checkpoint under {re.escape(str(root))} \(ckptctl locate exit 3\): "
        "not starting; run ckptctl recover$", text, re.M,
    ), text[-3000:]
    starts = [(m.group(2), m.group(3)) for m in START_LINE.finditer(text)]
    assert starts == [("0", str(root / "step_30"))], "the restart never started the trainer"
    assert text.count("ckptctl-train resumed from=") == 1


def scene(tmp_path: Path, golden: dict[int, Path], cluster: SlurmCluster) -> tuple[Path, Path]:
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
            "script_args": ["--steps", "400", "--step-sleep-s", "0.3", "--save-at-step", "40"],
            "stop_grace_s": 20,
            "slurm": {"poll_s": 0.5, "cpus_per_task": min(2, cluster.cpus), "signal_grace_s": 30},
        },
        "recover": {"watch_steps": 8, "drain": {"kind": "slurm"}},
    }
    cfg = tmp_path / "ckptctl.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    return root, cfg


def ckptctl_json(cluster: SlurmCluster, *args: str, cwd: Path | None = None, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([CKPTCTL, *args, "--json"], capture_output=True, text=True, cwd=cwd,
                          env=_env(SLURM_CONF=str(cluster.conf)), timeout=timeout)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"{e}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}") from e
    return proc.returncode, doc, proc.stderr


def test_recover_then_requeue_the_ledger_and_status_see_the_restart(
    tmp_path: Path, golden: dict[int, Path], cluster: SlurmCluster
) -> None:
    """`recover` resumes from step_30 under Slurm (the watch says continuous; the job runs on and
    saves step_40); `scontrol requeue` restarts it: from step_40, in the same output. `status`
    no longer calls the job verified (nothing watched that resume), and `incidents` has the
    restart as an incident of its own, with the steps it recomputes."""
    root, cfg = scene(tmp_path, golden, cluster)
    (tmp_path / "slurm-4412937.out").write_text(PREEMPTED)
    code, doc, err = ckptctl_json(cluster, "recover", "--config", str(cfg), "--logs", "slurm-4412937.out",
                                  "--baseline", "baseline.log", cwd=tmp_path)
    assert code == 0 and doc["outcome"] == "recovered", err[-4000:]
    (att,) = doc["attempts"]
    job, out = att["job"]["job_id"], Path(att["log"])
    try:
        assert att["still_running"] is True and att["checkpoint_step"] == 30
        deadline = time.monotonic() + 420
        wait_for("step_40 and step 44", lambda: (root / "step_40").is_dir() and "ckptctl-train step=44 " in read(out),
                 deadline, lambda: read(out))
        _, st, _ = ckptctl_json(cluster, "status", str(root))
        assert st["job"]["verified"]["state"] == "verified" and st["job"]["verified"]["restarts"] == 0
        first_run = read(out)
        cluster.run("scontrol", "requeue", job)
        wait_for("the requeue", lambda: job_state(cluster, job) in ("PENDING", "REQUEUED"), deadline, lambda: read(out))
        newest = locate(root)
        assert newest == str(root / "step_40")
        wait_for("the resumed run", lambda: f"ckptctl-train resumed from={newest} step=40" in read(out), deadline,
                 lambda: read(out))
        text = read(out)
        _, st, _ = ckptctl_json(cluster, "status", str(root))
        _, ledger, _ = ckptctl_json(cluster, "incidents", str(root))
    finally:
        cluster.run("scancel", job, check=False)
    assert text.startswith(first_run), "the requeue appended; the first run's log is whole"
    starts = [(m.group(1), m.group(2), m.group(3)) for m in START_LINE.finditer(text)]
    assert starts == [(job, "0", str(root / "step_30")), (job, "1", newest)]
    # status: the verdict was about the resume from step_30; the restart from step_40 is unwatched
    verified = st["job"]["verified"]
    assert verified["state"] == "not-verified" and verified["restarts"] == 1 and verified["verdict"] == "continuous"
    assert "the scheduler restarted it since (restart 1" in verified["reason"]
    # the ledger: the preemption recover handled, then the requeue
    assert [r["outcome"] for r in ledger["incidents"]] == ["recovered", "requeued"]
    requeue = ledger["incidents"][1]
    assert requeue["source"] == "job-output" and requeue["job_id"] == job and requeue["checkpoint_step"] == 40
    last_before = max(int(m) for m in re.findall(r"^ckptctl-train step=(\d+) ", first_run, re.M))
    assert requeue["crash_step"] >= last_before >= 44
    assert requeue["steps_recomputed"] == requeue["crash_step"] - 40
