"""Pure parts of recover added for issue 14: the plan value, one run root, the batch script, the ledger."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ckptctl.core.config.schema import CkptctlConfig, LaunchConfig, SlurmConfig
from ckptctl.core.launch.plan import plan_launch
from ckptctl.core.launch.slurm_batch import plan_slurm_batch
from ckptctl.core.recover.incidents import build_incident, summarize_incidents
from ckptctl.core.recover.plan import build_recovery_plan, run_root_conflicts, script_ckpt_roots

PLAN_KW = dict(
    root_source="argument", config_file="ckptctl.yaml", backend="local", detach=False, drain_kind="slurm",
    execute_drain=False, min_nodes_policy="wait", hosts_command=(), deep=False, max_attempts=3,
    watch_steps=50, watch_settings={}, baseline=None,
)


@pytest.mark.parametrize(
    "root, logs, no_logs, missing",
    [
        ("/r", ["k.log"], False, []),
        ("/r", [], True, []),
        ("/r", [], False, ["--logs FILE"]),
        (None, ["k.log"], False, ["a run root"]),
        (None, [], False, ["a run root", "--logs FILE"]),
    ],
)
def test_plan_names_what_a_real_run_lacks(root: str | None, logs: list[str], no_logs: bool, missing: list[str]) -> None:
    plan = build_recovery_plan(root=root, logs=logs, no_logs=no_logs, **PLAN_KW)  # type: ignore[arg-type]
    assert len(plan.missing) == len(missing) and plan.is_complete == (not missing)
    for m, want in zip(plan.missing, missing, strict=True):
        assert want in m
    assert [s.stage for s in plan.steps] == ["classify", "triage", "drain", "capacity", "locate", "launch", "watch", "fallback"]
    lines = plan.lines()
    assert "config: ckptctl.yaml" in lines and plan.to_json()["config_file"] == "ckptctl.yaml"
    assert plan.step("drain") is not None and plan.step("drain").inputs == {"kind": "slurm", "execute": False}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "cli, cfg, args, conflict",
    [
        ("run", "run", ["--ckpt-root", "run"], None),
        ("run", "./run/", ["--ckpt-root=/w/run"], None),
        (None, "run", ["--steps", "10"], None),
        ("run2", "run", [], "the ROOT argument is 'run2' but run_root in the config is 'run'"),
        (None, "run", ["--ckpt-root", "run2"], "run_root in the config is 'run' but --ckpt-root in launch.script_args is 'run2'"),
        ("run", None, ["--output_dir", "other"], "--output_dir in launch.script_args is 'other'"),
        ("s3://b/run", "s3://b/run/", ["--checkpoint-dir", "s3://b/run"], None),
        ("s3://b/run", None, ["--save-dir", "s3://b/other"], "two run roots"),
    ],
)
def test_one_run_root(cli: str | None, cfg: str | None, args: list[str], conflict: str | None) -> None:
    got = run_root_conflicts(cli_root=cli, config_root=cfg, script_args=args, cwd="/w")
    if conflict is None:
        assert got is None
    else:
        assert got is not None and conflict in got


def test_script_ckpt_roots_finds_the_common_spellings() -> None:
    args = ["--ckpt-root", "a", "--save_dir=b", "--lr", "1", "--checkpoint-path", "c", "--run-root"]
    assert script_ckpt_roots(args) == [("--ckpt-root", "a"), ("--save_dir", "b"), ("--checkpoint-path", "c")]


def test_slurm_batch_script() -> None:
    cfg = CkptctlConfig(
        run_root="/ckpt/run",
        launch=LaunchConfig(
            nnodes="2:4", nproc_per_node=8, rdzv_endpoint="head:29400", script="train.py",
            script_args=("--ckpt-root", "/ckpt/run"), exclude_hosts=("bad-1",), env={"NCCL_DEBUG": "WARN"},
            backend="slurm", slurm=SlurmConfig(partition="gpu", time_limit="4:00:00", sbatch_args=("--account=ml",)),
        ),
    )
    plan = plan_launch(cfg, resume_from="/ckpt/run/step_40", nnodes="2:4", exclude_hosts=("gpu-7",))
    b = plan_slurm_batch(cfg, plan, log_dir="/logs")
    lines = b.script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for want in (
        "#SBATCH --nodes=2-4", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=8",
        "#SBATCH --partition=gpu", "#SBATCH --time=4:00:00", "#SBATCH --exclude=bad-1,gpu-7",
        "#SBATCH --requeue", "#SBATCH --signal=USR1@120", "#SBATCH --account=ml",
        "export NCCL_DEBUG=WARN", "export CKPTCTL_PREEMPTION_SIGNALS=USR1",
    ):
        assert want in lines, want
    srun = lines[-1]
    assert srun.startswith("srun --kill-on-bad-exit=1 bash -c 'trap \"\" USR1; exec \"$@\"' ckptctl-task ")
    assert srun.endswith("train.py --ckpt-root /ckpt/run --resume-from /ckpt/run/step_40")
    assert b.sbatch_argv == ("sbatch", "--parsable", "--output=/logs/slurm-ckptctl-%j.out")
    assert b.output_path("77") == "/logs/slurm-ckptctl-77.out"
    # an srun launcher prefix is not doubled: the script runs srun itself
    cfg2 = CkptctlConfig(launch=LaunchConfig(script="t.py", torchrun=("srun", "--nodes=2", "torchrun"), backend="slurm"))
    b2 = plan_slurm_batch(cfg2, plan_launch(cfg2, resume_from=None, exclude_hosts=("x",)), log_dir="/l")
    assert b2.script.count("srun ") == 1 and "--exclude=x'" not in b2.script and "#SBATCH --exclude=x" in b2.script


T0 = datetime(2026, 11, 21, 3, 0, 0, tzinfo=timezone.utc)


def _inc(minutes: int, *, lost_s: float, hosts: tuple[str, ...] = (), category: str = "infra") -> dict[str, object]:
    failed = T0 + timedelta(minutes=minutes)
    return build_incident(
        outcome="recovered", category=category, failure_time=failed, detected=failed + timedelta(seconds=60),
        drained=failed + timedelta(seconds=70) if hosts else None, capacity=failed + timedelta(seconds=80),
        relaunched=failed + timedelta(seconds=90), first_step=failed + timedelta(seconds=lost_s),
        crash_step=118, checkpoint_step=100, verdicts=["continuous"], drained_hosts=list(hosts), job_id="7",
    )


def test_incident_record() -> None:
    rec = _inc(0, lost_s=300, hosts=("gpu-2",))
    assert rec["schema"] == "ckptctl.incident/1"
    assert rec["phases_s"] == {"detection": 60.0, "drain": 10.0, "capacity": 10.0, "relaunch": 10.0, "first_step": 210.0}
    assert rec["time_lost_s"] == 300.0 and rec["steps_recomputed"] == 18
    # a failure time after the detection (clock skew, a log touched later) is not believed
    skew = build_incident(outcome="stopped", category=None, failure_time=T0 + timedelta(hours=1), detected=T0,
                          drained=None, capacity=None, relaunched=None, first_step=None, crash_step=None,
                          checkpoint_step=None, verdicts=[], drained_hosts=[], job_id=None)
    assert skew["failure_time"] is None and skew["time_lost_s"] is None and skew["steps_recomputed"] is None


def test_summary_goodput_mtbf_and_rma_candidates() -> None:
    recs = [_inc(0, lost_s=300, hosts=("gpu-2",)), _inc(120, lost_s=600, hosts=("gpu-2",)),
            _inc(300, lost_s=300, hosts=("gpu-5",), category="preemption")]
    s = summarize_incidents(recs, run_start=T0 - timedelta(hours=1))
    assert s["num_incidents"] == 3
    assert [r["goodput_s"] for r in s["incidents"]] == [3600.0, 7200.0 - 300, 10800.0 - 600]
    assert s["badput_s"] == 1200.0 and s["steps_recomputed"] == 54
    assert s["mtbf_s"] == 9000.0  # (120 min + 180 min) / 2
    assert s["mttr_s"] == 400.0
    assert s["rma_candidates"] == ["gpu-2"]
    host = {h["host"]: h for h in s["hosts"]}
    assert host["gpu-2"]["infra_drains"] == 2 and host["gpu-5"]["rma_candidate"] is False
    assert 0 < s["goodput_fraction"] < 1
    assert summarize_incidents([])["mtbf_s"] is None
