"""Preemption under a real Slurm (tests/slurm_cluster.py): ``scancel`` and ``scancel --signal=USR1``.

The job is the batch script ``ckptctl recover``'s slurm backend writes
(core/launch/slurm_batch.py), running examples/train.py under torchrun with 2
ranks. ``scancel`` sends SIGTERM to every process of the job (the batch shell,
srun, torchrun, the workers; torchrun and srun forward it again) and SIGKILL
after ``KillWait`` (10 s on the test cluster); ``scancel --signal=USR1`` sends
SIGUSR1 to every process of the job's steps, as ``--signal=USR1@<grace>`` does
before the time limit. Each ends with a complete emergency checkpoint at the step
reached, and both workers exit 75: their exit statuses are read by ``strace -f``
(exits only) between the srun task and torchrun. ``scontrol requeue`` is covered
with the requeue-safe batch script (issue 21, point 2).
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

import pytest

from tests.conftest import free_port
from tests.slurm_cluster import SlurmCluster, unavailable_reason
from tests.test_recover import CKPTCTL, TRAIN, _env
from tests.test_training_preemption import TRACE_EXITS, process_ends, worker_pids_in_trace

STRACE = shutil.which("strace")

pytestmark = [
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.skipif(STRACE is None, reason="strace is not installed (it reads the workers' exit statuses)"),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    try:
        c = SlurmCluster.start(tmp_path_factory.mktemp("slurm"), nodes=("n1",))
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"the test Slurm cluster did not start: {e}")
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.parametrize(
    "scancel_args, signal_name",
    [((), "SIGTERM"), (("--signal=USR1",), "SIGUSR1")],
    ids=["scancel", "scancel-signal-usr1"],
)
def test_scancel_ends_with_an_emergency_checkpoint_and_exit_75(
    tmp_path: Path, cluster: SlurmCluster, scancel_args: tuple[str, ...], signal_name: str
) -> None:
    from ckptctl.adapters import slurm
    from ckptctl.core.config.schema import CkptctlConfig, LaunchConfig, SlurmConfig
    from ckptctl.core.launch.plan import plan_launch
    from ckptctl.core.launch.slurm_batch import plan_slurm_batch

    root = tmp_path / "run"
    trace = tmp_path / "exits.strace"
    cfg = CkptctlConfig(
        run_root=str(root),
        launch=LaunchConfig(
            nproc_per_node=2, rdzv_endpoint=f"127.0.0.1:{free_port()}", script=TRAIN, backend="slurm",
            script_args=("--ckpt-root", str(root), "--steps", "100000", "--save-every", "1000", "--step-sleep-s", "0.2"),
            env={"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"},
            slurm=SlurmConfig(cpus_per_task=min(2, cluster.cpus), signal_grace_s=60),
        ),
    )  # fmt: skip
    batch = plan_slurm_batch(cfg, plan_launch(cfg, resume_from=None), log_dir=str(tmp_path))
    # strace between the srun task and torchrun, reporting exits only; -I3: the signals Slurm
    # sends it too do not make it detach before the workers have ended.
    tracer = f"strace -I3 {' '.join(TRACE_EXITS)} -o {trace} "
    assert batch.script.count("ckptctl-task ") == 1
    script = tmp_path / "job.sh"
    script.write_text(batch.script.replace("ckptctl-task ", "ckptctl-task " + tracer))
    env_before = dict(os.environ)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        job = slurm.submit(batch.sbatch_argv, str(script))
        out = Path(batch.output_path(job))
        deadline = time.monotonic() + 300
        while "ckptctl-train step=3 " not in (out.read_text() if out.exists() else ""):
            assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
            time.sleep(0.5)
        cluster.run("scancel", *scancel_args, job)
        while not slurm.job_state(job).finished:
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.5)
        state = slurm.job_state(job)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    text = out.read_text()
    m = re.search(rf"^ckptctl-train preempted signal={signal_name} step=(\d+) checkpoint=(\S+) exit_code=75$", text, re.M)
    assert m, text[-5000:]
    step, ckpt = int(m.group(1)), m.group(2)
    assert Path(ckpt) == root / f"step_{step}"
    logged = [int(x) for x in re.findall(r"^ckptctl-train step=(\d+) ", text, re.M)]
    assert max(logged) == step, text[-3000:]  # the checkpoint holds the last step completed
    manifest = json.loads((root / f"step_{step}" / "ckptctl.json").read_text())
    assert manifest["extra"] == {"emergency": True, "signal": signal_name} and manifest["world_size"] == 2
    env = _env()
    verify = subprocess.run([CKPTCTL, "verify", "--deep", ckpt], capture_output=True, text=True, env=env, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    located = subprocess.run([CKPTCTL, "locate", str(root)], capture_output=True, text=True, env=env, timeout=120)
    assert located.stdout.strip() == ckpt, located.stderr
    ends = process_ends(trace)
    workers = worker_pids_in_trace(trace)
    assert len(workers) == 2 and [ends.get(w) for w in workers] == ["exit 75", "exit 75"], (ends, text[-3000:])
    if not scancel_args:
        assert state.state.startswith("CANCELLED"), state

