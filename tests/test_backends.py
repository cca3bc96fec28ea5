"""ckptctl/backends: the registry, the local backend on real processes, Slurm's states in the
shared phases, and the run root's active-job record answered through its backend."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from ckptctl.adapters.slurm import JobState
from ckptctl.backends import registry
from ckptctl.backends.base import JobBackend
from ckptctl.backends.local import LocalBackend
from ckptctl.backends.slurm import SlurmBackend, phase_of
from ckptctl.core.config.schema import CkptctlConfig, LaunchConfig
from ckptctl.core.launch.job import JobRef
from ckptctl.core.launch.plan import LaunchPlan, plan_launch
from ckptctl.core.rollback.model import Who
from ckptctl.errors import ConfigError
from ckptctl.ops.status import job_now, run_status
from ckptctl.runroot.root import RunRoot
from ckptctl.runroot.state import (
    ActiveJob,
    clear_active_job,
    read_active_job,
    read_job,
    write_active_job,
)

PROTOCOL_METHODS = ("preview", "submit", "follow", "run", "state", "cancel", "hosts_query", "usable_hosts")


def _plan(tmp_path: Path, code: str) -> LaunchPlan:
    return LaunchPlan(
        argv=(sys.executable, "-c", code), env={}, log_dir=str(tmp_path / "logs"), resume_from=None, nnodes="1",
        exclude_hosts=(), exclude_via="none", stop_grace_s=5.0,
    )


def _wait(predicate: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_registry_names_each_backend_once_and_refuses_others() -> None:
    assert registry.names() == ("local", "slurm")
    for name in registry.names():
        backend: JobBackend = registry.get(name)
        assert backend.name == name and all(callable(getattr(backend, m)) for m in PROTOCOL_METHODS)
    assert registry.find("kubernetes") is None and registry.find(None) is None
    with pytest.raises(ConfigError, match=r"launch\.backend: 'kubernetes' is not one of local, slurm") as e:
        registry.get("kubernetes")
    assert e.value.exit_code == 2


def test_previews_differ_by_backend_not_by_caller(tmp_path: Path) -> None:
    cfg = CkptctlConfig(launch=LaunchConfig(script="train.py", backend="slurm"))
    plan = plan_launch(cfg, resume_from="/r/step_20")
    local, slurm = LocalBackend().preview(cfg, plan), SlurmBackend().preview(cfg, plan)
    assert local.summary == "would run: " + plan.display() and local.to_json_section() == {} and local.script is None
    assert slurm.summary.startswith("would submit with sbatch --parsable") and slurm.script is not None
    assert set(slurm.to_json_section()) == {"slurm"} and slurm.to_json_section()["slurm"]["script"] == slurm.script
    assert LocalBackend().hosts_query() is None and SlurmBackend().hosts_query() == ("sinfo", "-h", "-N", "-o", "%N|%T")


def test_local_submit_follow_state_cancel_on_a_real_process(tmp_path: Path) -> None:
    backend = LocalBackend()
    plan = _plan(tmp_path, "import time; print('step 1', flush=True); time.sleep(120)")
    cfg = CkptctlConfig()
    sub = backend.submit(cfg, plan)
    assert sub.ref.backend == "local" and sub.ref.host == socket.gethostname() and sub.process is not None
    seen: list[str] = []
    run = backend.follow(cfg, plan, sub, decided=lambda: bool(seen), on_output=seen.append)
    assert run.still_running and run.exit_code is None and seen == ["step 1"] and run.job_id == sub.ref.job_id
    now = backend.state(sub.ref)
    assert now.phase == "running" and now.alive and now.to_json() == {"job_id": sub.ref.job_id, "state": "RUNNING", "phase": "running"}
    backend.cancel(sub.ref)
    assert sub.process.wait(timeout=20) != 0
    now = backend.state(sub.ref)
    assert now.phase == "ended" and not now.alive and now.detail["state"] == "ENDED"
    backend.cancel(sub.ref)  # a job already gone is fine


def test_an_exited_but_unreaped_local_job_is_ended(tmp_path: Path) -> None:
    backend = LocalBackend()
    sub = backend.submit(CkptctlConfig(), _plan(tmp_path, "pass"))
    _wait(lambda: backend.state(sub.ref).phase == "ended")  # a zombie until reaped: not alive
    assert sub.process is not None and sub.process.wait(timeout=5) == 0


def test_local_state_is_unknown_off_its_host_or_without_a_pid() -> None:
    backend = LocalBackend()
    elsewhere = backend.state(JobRef(backend="local", job_id="1", host="some-other-host"))
    assert elsewhere.phase == "unknown" and "started on some-other-host" in elsewhere.detail["error"]
    assert backend.state(JobRef(backend="local", job_id="")).to_json() == {"job_id": None, "state": "UNKNOWN", "phase": "unknown"}


@pytest.mark.parametrize(
    "state, phase",
    [("PENDING", "pending"), ("REQUEUED", "pending"), ("CONFIGURING", "pending"), ("RUNNING", "running"),
     ("COMPLETING", "running"), ("SUSPENDED", "running"), ("COMPLETED", "ended"), ("CANCELLED by 0", "ended"),
     ("PREEMPTED", "ended"), ("NODE_FAIL", "ended"), ("TIMEOUT", "ended"), ("UNKNOWN", "unknown")],
)
def test_slurm_states_in_the_shared_phases(state: str, phase: str) -> None:
    js = JobState(job_id="7", state=state, exit_code=None, nodes=None, reason=None, source="squeue")
    assert phase_of(js) == phase


def _who(host: str) -> Who:
    return Who(time="2026-11-22T10:00:00Z", user="ann", host=host, pid=42, ckptctl_version="9.9")


def test_active_job_is_written_read_and_closed_in_one_place(tmp_path: Path) -> None:
    root = RunRoot.open(str(tmp_path))
    assert read_job(root) is None and read_active_job(root) is None and clear_active_job(root, ended="x", reason="y") is None
    job = ActiveJob(backend="slurm", job_id="4412", script="/l/s.sh", owner=_who("login1"), detached=False,
                    started="2026-11-22T10:00:01Z", resume_from="/r/step_20", attempt=2)
    write_active_job(root, job)
    back = read_active_job(root)
    assert back is not None and back.to_json() == job.to_json() and back.attempt == 2 and back.host == "login1"
    assert back.ref() == JobRef(backend="slurm", job_id="4412", host="login1")
    closed = clear_active_job(root, ended="2026-11-22T11:00:00Z", reason="the job ended")
    assert closed is not None and read_active_job(root) is None
    kept = read_job(root)  # kept for status, never deleted
    assert kept is not None and kept.ended == "2026-11-22T11:00:00Z" and kept.to_json()["end_reason"] == "the job ended"


def test_status_asks_the_jobs_backend_whether_it_is_alive(tmp_path: Path) -> None:
    root = RunRoot.open(str(tmp_path))
    backend = LocalBackend()
    sub = backend.submit(CkptctlConfig(), _plan(tmp_path, "import time; time.sleep(120)"))
    job = ActiveJob(backend="local", job_id=sub.ref.job_id, script=None, owner=_who(socket.gethostname()),
                    detached=True, started="2026-11-22T10:00:01Z", resume_from=None)
    write_active_job(root, job)
    try:
        assert job_now(job).alive
        doc = run_status(str(tmp_path))
        assert doc["job"]["now"]["state"] == "RUNNING" and doc["job"]["job_id"] == sub.ref.job_id
    finally:
        backend.cancel(sub.ref, force=True)
        assert sub.process is not None
        sub.process.wait(timeout=20)
    assert job_now(job).phase == "ended"
    odd = ActiveJob(backend="kubernetes", job_id="pod-1", script=None, owner=_who("h"), detached=True, started="t", resume_from=None)
    assert job_now(odd).to_json() == {"job_id": "pod-1", "state": "UNKNOWN", "phase": "unknown"}
