"""`ckptctl recover` end to end: real torchrun (gloo, CPU), real DCP checkpoints, real processes.

Two kinds of job are relaunched:

* ``examples/train.py``, the real tiny GPT. It is trained ONCE per module
  (fixture ``crashed``: 2 ranks, saves every 6 steps, rank 1 SIGKILLed before
  step 18, so step_6 and step_12 are complete and steps 1..17 are logged); each
  test that needs it gets a private copy of that run root. The infra and
  corrupt-checkpoint tests resume it and compare the re-run losses with the
  pre-crash ones, bit for bit.
* ``tests/scripts/resume_job.py``, a stand-in trainer that prints the same
  ``ckptctl-train`` lines from a known curve without a model (see its
  docstring), on a copy of the golden 2-rank run root (real DCP step_10/20/30).
  It starts in torchrun's own start-up time and can be told to go wrong in the
  ways RB-7 must handle: a loss spike after the resume, a crash right after the
  start (restart loop), a crash after each new checkpoint.

The CLI runs as a real process (``.venv/bin/ckptctl``); the job's output goes to
ckptctl's stderr, the report (``--json``) or the human summary to stdout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, free_port, torchrun_cmd
from tests.scripts.resume_job import SPIKE_JUMP, baseline_lines, curve_loss

CKPTCTL = str(Path(sys.executable).parent / "ckptctl")
TRAIN = str(REPO / "examples" / "train.py")
RESUME_JOB = str(REPO / "tests" / "scripts" / "resume_job.py")

XID79 = (
    "Nov 21 12:19:05 gpu-node-2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=15241, name=python, "
    "GPU has fallen off the bus.\n"
)
PREEMPTED = "slurmstepd: error: *** JOB 4412937 ON gpu-node-2 CANCELLED AT 2026-11-21T12:19:05 DUE TO PREEMPTION ***\n"
# One rank runs out of memory; the others time out waiting for it in the next collective.
OOM = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/workspace/train.py", line 295, in main
[rank1]:     logits = model(x)
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.11 GiB of which 1.06 GiB is free.
[rank0]:[E1121 12:19:41.837271956 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=211, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600006 milliseconds before timing out.
[rank2]:[E1121 12:19:41.840012345 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=211, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600007 milliseconds before timing out.
[rank3]:[E1121 12:19:41.841234567 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=211, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600006 milliseconds before timing out.
"""
DRAIN_REASON = "ckptctl: infra fault (RB-7)"
SCONTROL_DRAIN = ["scontrol", "update", "NodeName=gpu-node-2", "State=DRAIN", f"Reason={DRAIN_REASON}"]
LOSS_LINE = re.compile(r"^ckptctl-train step=(\d+) loss=(\S+) .*rank=0$")


# -- helpers ---------------------------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("CKPTCTL_DEBUG", None)
    env.pop("CKPTCTL_TEST_HOLD_LOCK_UNTIL", None)
    env.update(extra)
    return env


def write_config(
    tmp_path: Path,
    root: Path,
    *,
    script: str,
    script_args: list[str],
    drain_kind: str = "slurm",
    watch_steps: int = 10,
) -> Path:
    """ckptctl.yaml for a 2-rank job on a free local port (as the manual RB-7 drill had it)."""
    doc: dict[str, Any] = {
        "run_root": str(root),
        "launch": {
            "nnodes": "1",
            "nproc_per_node": 2,
            "rdzv_backend": "c10d",
            "rdzv_endpoint": f"127.0.0.1:{free_port()}",
            "script": script,
            "script_args": script_args,
            "stop_grace_s": 20,
        },
        "recover": {"watch_steps": watch_steps, "drain": {"kind": drain_kind}},
    }
    path = tmp_path / "ckptctl.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run_recover(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """``ckptctl recover ARGS``; ``--no-logs`` is added when no ``--logs`` is given (a real run
    needs one of the two; ``test_recover_safety.py`` checks the refusal without them)."""
    if "--logs" not in args and "--no-logs" not in args:
        args = (*args, "--no-logs")
    return subprocess.run(
        [CKPTCTL, "recover", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env or _env(),
        timeout=timeout,
    )


def recover_json(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    """``ckptctl recover ARGS --json``: (exit code, the one JSON document on stdout, stderr)."""
    proc = run_recover(*args, "--json", cwd=cwd, env=env)
    try:
        doc = json.loads(proc.stdout)  # the whole of stdout is one document
    except json.JSONDecodeError as e:
        raise AssertionError(f"stdout is not one JSON document ({e}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}") from e
    assert isinstance(doc, dict)
    return proc.returncode, doc, proc.stderr


def losses(text: str) -> dict[int, str]:
    """step -> loss as printed (repr), from rank 0's ``ckptctl-train`` lines."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        m = LOSS_LINE.match(line.strip())
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def logged_steps(text: str) -> list[int]:
    return [int(m.group(1)) for line in text.splitlines() if (m := LOSS_LINE.match(line.strip()))]


def audit_records(root: Path) -> list[dict[str, Any]]:
    path = root / ".ckptctl" / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("step_"))


def snapshot(top: Path) -> dict[str, tuple[str, int, int]]:
    """Every entry under ``top``: relative path -> (kind, size, mtime_ns)."""
    out: dict[str, tuple[str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            out[os.path.relpath(p, top)] = (kind, 0 if kind == "dir" else st.st_size, st.st_mtime_ns)
    return out


def fake_scheduler_cli(tmp_path: Path, name: str, *, exit_code: int = 0) -> tuple[Path, Path]:
    """A ``name`` program first on PATH that records its argv (one per line) and exits ``exit_code``.

    It stands for the scheduler's CLI (scontrol / kubectl), which this machine does
    not have; ckptctl starts it as a real process through PATH, exactly as it would
    start the real one. Returns (the bin directory, the record file).
    """
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    record = tmp_path / f"{name}-argv.txt"
    prog = bin_dir / name
    prog.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > "{record}"\n'
        f'echo "{name}: pretending to have done it"\n'
        f"exit {exit_code}\n"
    )
    prog.chmod(0o755)
    return bin_dir, record


def path_with(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


# -- the shared crashed run of examples/train.py ------------------------------------------------------


@dataclass(frozen=True)
class CrashedRun:
    root: Path
    """The run root as the crash left it (read-only: tests copy it)."""
    log: str
    """torchrun's output of the crashed run."""


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> CrashedRun:
    """examples/train.py under torchrun, 2 ranks, rank 1 SIGKILLed before step 18 (trained once)."""
    base = tmp_path_factory.mktemp("crashed")
    root = base / "run"
    proc = subprocess.run(
        [
            *torchrun_cmd(2),
            TRAIN,
            "--ckpt-root", str(root),
            "--steps", "30",
            "--save-every", "6",
            "--crash-at-step", "18",
            "--crash-rank", "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
        cwd=base,
        timeout=300,
    )
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert step_dirs(root) == ["step_12", "step_6"], proc.stdout[-3000:]
    assert logged_steps(proc.stdout) == list(range(1, 18)), proc.stdout[-3000:]
    return CrashedRun(root=root, log=proc.stdout)


@dataclass(frozen=True)
class Scene:
    """A test's private copy of a run, with its logs and config in ``dir`` (the working directory)."""

    dir: Path
    root: Path
    config: Path


def crashed_scene(tmp_path: Path, crashed: CrashedRun, *extra_args: str) -> Scene:
    root = tmp_path / "run"
    shutil.copytree(crashed.root, root)
    (tmp_path / "train.log").write_text(crashed.log)
    (tmp_path / "kern.log").write_text(XID79)
    cfg = write_config(
        tmp_path,
        root,
        script=TRAIN,
        script_args=["--ckpt-root", str(root), "--steps", "30", "--save-every", "6", *extra_args],
    )
    return Scene(tmp_path, root, cfg)


def golden_scene(tmp_path: Path, golden: dict[int, Path], *script_args: str, drain_kind: str = "slurm") -> Scene:
    """The golden 2-rank run root (step_10/20/30) and resume_job.py; ``baseline.log`` holds steps 1..35."""
    root = tmp_path / "run"
    shutil.copytree(golden[2] / "run", root)
    (tmp_path / "baseline.log").write_text("\n".join(baseline_lines(35)) + "\n")
    cfg = write_config(
        tmp_path, root, script=RESUME_JOB, script_args=["--steps", "40", *script_args], drain_kind=drain_kind
    )
    return Scene(tmp_path, root, cfg)


def attempt_log(attempt: dict[str, Any]) -> str:
    assert attempt["log"], attempt
    return Path(attempt["log"]).read_text()


# -- Classify: infra -> drain (on paper) -> resume ----------------------------------------------------


@pytest.mark.slow
def test_infra_fault_plans_the_drain_and_resumes_bit_for_bit(tmp_path: Path, crashed: CrashedRun) -> None:
    # --keep-last 3: the job's retention runs while recover holds the run-root lock
    s = crashed_scene(tmp_path, crashed, "--keep-last", "3")
    t0 = time.monotonic()
    code, doc, err = recover_json("--config", str(s.config), "--logs", "kern.log", "--logs", "train.log", cwd=s.dir)
    elapsed = time.monotonic() - t0
    assert code == 0, err[-5000:]
    assert doc["outcome"] == "recovered" and doc["exit_code"] == 0 and doc["dry_run"] is False

    # classify: the XID 79 is the root cause; the culprit host is named
    cl = doc["classify"]
    assert cl["category"] == "infra" and cl["hosts"] == ["gpu-node-2"]
    assert (cl["root_cause"]["file"], cl["root_cause"]["line"], cl["root_cause"]["xid"]) == ("kern.log", 1, 79)
    assert doc["triage"] == {
        "proceed": True,
        "drain_hosts": ["gpu-node-2"],
        "reason": "infra fault on gpu-node-2: drain, then resume without it",
        "forced": False,
    }
    # drain: planned, shown, NOT executed (no --execute-drain), and nothing recorded as done
    assert doc["drain"] == [{"kind": "slurm", "hosts": ["gpu-node-2"], "argv": SCONTROL_DRAIN, "executed": False}]
    assert "scontrol update NodeName=gpu-node-2 State=DRAIN" in err
    assert "gpu-node-2" in doc["capacity"]["excluded_hosts"]

    # locate + verify: the newest complete checkpoint is step_12
    step12 = str(s.root / "step_12")
    assert doc["checkpoint"]["path"] == step12 and doc["checkpoint"]["step"] == 12
    assert doc["checkpoint"]["world_size"] == 2 and doc["skipped_checkpoints"] == []
    (att,) = doc["attempts"]
    assert att["number"] == 1 and att["checkpoint_step"] == 12 and att["exit_code"] == 0
    assert att["argv"][-2:] == ["--resume-from", step12]
    assert att["argv"] == doc["launch_plan"]["argv"]
    assert att["watch_verdict"] == "continuous" and not att["stopped_by_watch"]
    assert att["watch"]["resume_step"] == 12 and att["watch"]["first_resumed_step"] == 13
    assert doc["rollbacks"] == []

    # the resumed job: picks up at step 13, no step replayed or skipped, runs to the end ...
    text = attempt_log(att)
    assert f"ckptctl-train resumed from={step12} step=12 world_size=2 saved_world_size=2" in text
    assert logged_steps(text) == list(range(13, 31))
    # ... and re-runs steps 13..17 with exactly the losses logged before the crash
    before, after = losses(crashed.log), losses(text)
    rerun = sorted(set(before) & set(after))
    assert rerun == [13, 14, 15, 16, 17]
    assert [after[i] for i in rerun] == [before[i] for i in rerun]
    assert att["watch"]["rerun"]["num_identical"] == 5
    # keep_last=3 applied by the job under recover's lock (recover passed it the lock's token)
    assert step_dirs(s.root) == ["step_18", "step_24", "step_30"]

    # the job's output went to stderr (stdout held nothing but the document: recover_json parsed all of it)
    assert "ckptctl-train step=30 " in err

    # the report in the run root is the same document; the audit log points at it
    report = Path(doc["report_path"])
    assert report.parent == s.root / ".ckptctl" and re.fullmatch(r"recovery-\d{8}T\d{6}Z(-\d+)?\.json", report.name)
    assert json.loads(report.read_text()) == doc
    records = audit_records(s.root)
    assert [r["action"] for r in records] == ["launch", "retention-delete", "retention-delete", "recover"], (
        "a drain that did not run must not be audited"
    )
    assert records[0]["backend"] == "local" and records[0]["job_id"] == (att["job"] or {})["job_id"]
    assert [r["from"] for r in records[1:3]] == ["step_6", "step_12"]
    assert records[3]["outcome"] == "recovered" and records[3]["report"] == str(report)
    assert not (s.root / ".ckptctl" / "lock").exists()
    assert elapsed < 180


@pytest.mark.slow
def test_execute_drain_runs_the_scheduler_cli_and_audits_it(tmp_path: Path, golden: dict[int, Path]) -> None:
    """With --execute-drain the drain command really runs (a PATH shim stands for scontrol)."""
    s = golden_scene(tmp_path, golden)
    (s.dir / "kern.log").write_text(XID79)
    bin_dir, record = fake_scheduler_cli(tmp_path, "scontrol")
    code, doc, err = recover_json(
        "--config", str(s.config), "--logs", "kern.log", "--baseline", "baseline.log", "--execute-drain",
        cwd=s.dir,
        env=_env(PATH=path_with(bin_dir)),
    )
    assert code == 0, err[-5000:]
    # the scheduler CLI got exactly the planned argv, as separate words
    assert record.read_text().splitlines() == SCONTROL_DRAIN[1:]
    (drain,) = doc["drain"]
    assert drain["argv"] == SCONTROL_DRAIN and drain["executed"] is True and drain["ok"] is True
    assert drain["returncode"] == 0 and "pretending" in drain["output"]
    # audited before the relaunch, and the recovery after it
    records = audit_records(s.root)
    assert [r["action"] for r in records] == ["drain", "launch", "recover"]
    assert records[0]["argv"] == SCONTROL_DRAIN and records[0]["ok"] is True
    assert doc["outcome"] == "recovered"
    (att,) = doc["attempts"]
    assert att["checkpoint_step"] == 30 and att["exit_code"] == 0 and att["watch_verdict"] == "continuous"
    # the job got the token of the run-root lock recover held (its own retention may act)
    assert "resume_job: lock token passed=True matches=True" in attempt_log(att)


@pytest.mark.parametrize("kind, failing", [("slurm", "exits 1"), ("kubernetes", "not installed")])
def test_a_failed_drain_stops_before_any_relaunch(
    tmp_path: Path, golden: dict[int, Path], kind: str, failing: str
) -> None:
    s = golden_scene(tmp_path, golden, drain_kind=kind)
    (s.dir / "kern.log").write_text(XID79)
    if failing == "exits 1":
        bin_dir, record = fake_scheduler_cli(tmp_path, "scontrol", exit_code=1)
        path = path_with(bin_dir)
    else:
        empty = tmp_path / "empty-bin"
        empty.mkdir()
        path, record = str(empty), tmp_path / "none"  # no kubectl anywhere on PATH
    code, doc, err = recover_json(
        "--config", str(s.config), "--logs", "kern.log", "--execute-drain", cwd=s.dir, env=_env(PATH=path)
    )
    assert code == 3, err
    assert doc["outcome"] == "stopped" and doc["reason"].startswith("drain failed: ")
    (drain,) = doc["drain"]
    assert drain["executed"] is True and drain["ok"] is False
    if failing == "exits 1":
        assert drain["returncode"] == 1 and record.read_text().splitlines() == SCONTROL_DRAIN[1:]
    else:
        assert drain["argv"] == ["kubectl", "cordon", "gpu-node-2"]
        assert "kubectl: command not found" in doc["reason"]
    assert doc["attempts"] == [] and doc["checkpoint"] is None
    assert [(r["action"], r.get("ok")) for r in audit_records(s.root)] == [("drain", False), ("recover", None)]
    assert not (s.root / ".ckptctl" / "logs").exists(), "nothing may be launched after a failed drain"
    assert step_dirs(s.root) == ["step_10", "step_20", "step_30"]


# -- Classify: job fault -> stop (unless --force) -----------------------------------------------------


@pytest.mark.slow
def test_job_fault_stops_without_launching_and_force_resumes(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    (s.dir / "oom.log").write_text(OOM)
    before = snapshot(s.root)

    code, doc, err = recover_json("--config", str(s.config), "--logs", "oom.log", cwd=s.dir)
    assert code == 3, err
    assert doc["outcome"] == "stopped" and "job fault" in doc["reason"] and "--force" in doc["reason"]
    assert doc["triage"]["proceed"] is False and doc["drain"] == []
    # the evidence: the OOM is the root cause; the NCCL timeouts are its symptoms
    cl = doc["classify"]
    assert cl["category"] == "job"
    assert cl["root_cause"]["file"] == "oom.log" and cl["root_cause"]["line"] == 4
    assert "CUDA out of memory" in cl["root_cause"]["text"]
    symptom_lines = {e["line"] for e in cl["evidence"] if e["role"] == "symptom"}
    assert {5, 6, 7} <= symptom_lines
    # nothing launched: no plan, no attempt, no job log, no new checkpoint
    assert doc["launch_plan"] is None and doc["attempts"] == [] and doc["checkpoint"] is None
    assert not (s.root / ".ckptctl" / "logs").exists()
    after = snapshot(s.root)
    assert {k: v for k, v in after.items() if not k.startswith(".ckptctl")} == before
    # the refusal itself is recorded
    written = [f".ckptctl/{Path(doc[k]).name}" for k in ("report_path", "report_html") if doc[k]]
    assert sorted(after) == sorted([*before, ".ckptctl", ".ckptctl/audit.jsonl", *written])
    assert [r["outcome"] for r in audit_records(s.root)] == ["stopped"]
    saved = json.loads(Path(doc["report_path"]).read_text())
    assert saved["outcome"] == "stopped" and saved["classify"]["root_cause"] == cl["root_cause"]

    # --force: resume anyway (and still drain nothing)
    code, doc, err = recover_json(
        "--config", str(s.config), "--logs", "oom.log", "--baseline", "baseline.log", "--force", cwd=s.dir
    )
    assert code == 0, err[-5000:]
    assert doc["triage"]["forced"] is True and doc["drain"] == []
    assert doc["outcome"] == "recovered"
    (att,) = doc["attempts"]
    assert att["checkpoint_step"] == 30 and att["exit_code"] == 0 and att["watch_verdict"] == "continuous"
    assert [r["outcome"] for r in audit_records(s.root) if r["action"] == "recover"] == ["stopped", "recovered"]


# -- Classify: preemption -> resume; human output ---------------------------------------------------------


@pytest.mark.slow
def test_preemption_resumes_without_a_drain_human_output(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    (s.dir / "slurm-4412937.out").write_text(PREEMPTED)
    proc = run_recover(
        "--config", str(s.config), "--logs", "slurm-4412937.out", "--baseline", "baseline.log", cwd=s.dir
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    out = proc.stdout
    assert "outcome: recovered - the resumed job finished successfully" in out
    assert "classify: preemption" in out
    assert "decision: preemption: just resume" in out
    assert "drain:" not in out
    assert f"checkpoint: {s.root / 'step_30'} (step 30, world size 2)" in out
    assert re.search(r"attempt 1: from step 30, exit 0, loss watch continuous", out)
    (report,) = (s.root / ".ckptctl").glob("recovery-*.json")
    assert f"report: {report}" in out
    doc = json.loads(report.read_text())
    assert doc["classify"]["category"] == "preemption" and doc["drain"] == []
    assert doc["triage"]["drain_hosts"] == []
    # progress narration and the job's lines are on stderr, not in the summary
    assert "[triage] preemption: just resume" in proc.stderr
    assert "ckptctl-train step=31" in proc.stderr and "ckptctl-train step=" not in out


@pytest.mark.slow
def test_tee_tagged_multi_rank_output_is_watched_on_rank_zero(tmp_path: Path, golden: dict[int, Path]) -> None:
    """``torchrun_args: [--tee=3]``: torchrun prints each rank's lines whole, tagged ``[default<r>]:``
    (the cure for ranks splicing each other's lines); the loss watch reads rank 0's through the tag."""
    s = golden_scene(tmp_path, golden, "--spike-from-step", "30", "--save-at-step", "32", "--hang-s", "90")
    doc_cfg = yaml.safe_load(s.config.read_text())
    doc_cfg["launch"]["torchrun_args"] = ["--tee=3"]
    s.config.write_text(yaml.safe_dump(doc_cfg))
    (s.dir / "slurm.out").write_text(PREEMPTED)
    code, doc, err = recover_json(
        "--config", str(s.config), "--logs", "slurm.out", "--baseline", "baseline.log", cwd=s.dir
    )
    first = doc["attempts"][0]
    assert "--tee=3" in first["argv"]
    text = attempt_log(first)
    assert "[default0]:ckptctl-train step=31 " in text
    # the spike is seen through the tags, as without them: rolled back, resumed from step 20
    assert first["watch_verdict"] == "spike" and first["stopped_by_watch"], err[-3000:]
    assert first["watch"]["log"]["rank"] == 0
    assert [a["checkpoint_step"] for a in doc["attempts"]] == [30, 20]
    assert code == 0 and doc["outcome"] == "recovered", err[-3000:]


# -- Watch -> spike -> Fallback -> Resume ---------------------------------------------------------------


@pytest.mark.slow
def test_spike_after_resume_quarantines_and_resumes_from_the_previous_checkpoint(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    """Resumed from step_30 the losses jump (a bad restore); from step_20 they continue.

    The bad run also saves step_32 before the watch has seen enough to stop it
    (as a job with save_every below watch_steps does): that checkpoint carries the
    same bad state and must not be resumed from either.

    Human output here; the report file is the --json document (see the infra test).
    """
    s = golden_scene(tmp_path, golden, "--spike-from-step", "30", "--save-at-step", "32", "--hang-s", "90")
    t0 = time.monotonic()
    proc = run_recover("--config", str(s.config), "--baseline", "baseline.log", cwd=s.dir)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert time.monotonic() - t0 < 80, "the watch did not stop the bad run"
    m = re.search(r"^report: (\S+)$", proc.stdout, re.M)
    assert m, proc.stdout
    doc = json.loads(Path(m.group(1)).read_text())
    assert doc["outcome"] == "recovered"
    assert doc["classify"] is None and "cause unknown" in doc["triage"]["reason"]

    first, second = doc["attempts"]
    # attempt 1: from the newest checkpoint; the watch saw the jump and stopped the job
    assert first["checkpoint_step"] == 30 and first["argv"][-1] == str(s.root / "step_30")
    assert first["watch_verdict"] == "spike" and first["stopped_by_watch"] is True
    assert first["exit_code"] != 0 and first["stop_reason"] == "stop requested by the line callback"
    observed = dict((int(k), v) for k, v in first["watch"]["observed"]["losses"])
    assert observed[31] == pytest.approx(curve_loss(31) + SPIKE_JUMP)
    assert first["watch"]["threshold"]["value"] < curve_loss(31) + SPIKE_JUMP
    # attempt 2: from the previous complete checkpoint, continuous, finished
    assert second["checkpoint_step"] == 20 and second["argv"][-2:] == ["--resume-from", str(s.root / "step_20")]
    assert second["exit_code"] == 0 and second["watch_verdict"] == "continuous"
    assert logged_steps(attempt_log(second)) == list(range(21, 41))
    assert doc["checkpoint"]["step"] == 20

    # quarantined (renamed, nothing deleted): step_30 and the step_32 the bad run saved
    quarantined = [r["plan"]["source"]["name"] for r in doc["rollbacks"]]
    assert sorted(quarantined) == ["step_30", "step_32"]
    assert all(r["done"] and not r["refused"] for r in doc["rollbacks"])
    names = sorted(p.name for p in s.root.iterdir() if p.name != ".ckptctl")
    assert [n for n in names if ".quarantined-" in n] == sorted(
        r["plan"]["destination"]["name"] for r in doc["rollbacks"]
    )
    assert {n.split(".")[0] for n in names if ".quarantined-" in n} == {"step_30", "step_32"}
    # the good run saved its own step_32 after the fallback
    assert [n for n in names if ".quarantined-" not in n] == ["step_10", "step_20", "step_32"]
    # every rename is in the audit log, with the reason, before the recovery record
    records = audit_records(s.root)
    assert [r["action"] for r in records] == ["launch", "quarantine", "quarantine", "launch", "recover"]
    assert {r["from"] for r in records[1:3]} == {"step_30", "step_32"}
    assert all("spike" in r["reason"] for r in records[1:3])

    # the summary names both renames, the two attempts and the outcome
    out = proc.stdout
    assert "outcome: recovered" in out
    for r in doc["rollbacks"]:
        plan = r["plan"]
        assert f"rollback: quarantined {plan['source']['path']} -> {plan['destination']['name']}" in out
    assert "attempt 1: from step 30, exit " in out and "loss watch spike" in out
    assert "attempt 2: from step 20, exit 0, loss watch continuous" in out


# -- Verify -> corrupt -> Fallback ----------------------------------------------------------------------


@pytest.mark.slow
def test_corrupt_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path, crashed: CrashedRun) -> None:
    s = crashed_scene(tmp_path, crashed)
    shard = s.root / "step_12" / "__1_0.distcp"
    with shard.open("r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    code, doc, err = recover_json("--config", str(s.config), "--logs", "kern.log", "--logs", "train.log", cwd=s.dir)
    assert code == 0, err[-5000:]
    (skipped,) = doc["skipped_checkpoints"]
    assert skipped["path"] == str(s.root / "step_12") and skipped["status"] == "corrupt"
    assert any("__1_0.distcp" in p for p in skipped["problems"]), skipped
    assert "skipped step_12 (corrupt)" in err
    step6 = str(s.root / "step_6")
    assert doc["checkpoint"]["path"] == step6
    (att,) = doc["attempts"]
    assert att["checkpoint_step"] == 6 and att["argv"][-2:] == ["--resume-from", step6]
    assert att["exit_code"] == 0 and att["watch_verdict"] == "continuous"
    assert doc["outcome"] == "recovered"
    # the fallback is a real restore: steps 7..17 re-run with the pre-crash losses, bit for bit
    text = attempt_log(att)
    assert logged_steps(text) == list(range(7, 31))
    before, after = losses(crashed.log), losses(text)
    assert [after[i] for i in range(7, 18)] == [before[i] for i in range(7, 18)]


# -- one recovery at a time ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_concurrent_recover_is_refused(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    release = tmp_path / "release"
    lock = s.root / ".ckptctl" / "lock"
    first = subprocess.Popen(
        [CKPTCTL, "recover", "--config", str(s.config), "--no-logs", "--baseline", "baseline.log", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=s.dir,
        env=_env(CKPTCTL_TEST_HOLD_LOCK_UNTIL=str(release)),
    )
    try:
        deadline = time.monotonic() + 60
        while not lock.exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first recover never took the lock"
            time.sleep(0.05)
        holder = json.loads(lock.read_text())
        assert holder["operation"] == "recover" and holder["pid"] == first.pid

        second = run_recover("--config", str(s.config), "--baseline", "baseline.log", "--json", cwd=s.dir, timeout=60)
        assert second.returncode == 4, second.stderr
        assert second.stdout == ""
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, second.stderr
        assert "locked" in errors[0] and "recover" in errors[0] and f"pid {first.pid}" in errors[0]
        assert "Traceback" not in second.stderr
        # the refused one touched nothing: same lock, no report, nothing launched
        assert json.loads(lock.read_text()) == holder
        assert not list((s.root / ".ckptctl").glob("recovery-*.json"))
        assert not (s.root / ".ckptctl" / "logs").exists()
        # a dry run meanwhile still shows its plan, and says that a real run would be refused
        dry = run_recover("--config", str(s.config), "--dry-run", "--json", cwd=s.dir, timeout=60)
        assert dry.returncode == 0, dry.stderr
        dry_doc = json.loads(dry.stdout)
        assert dry_doc["outcome"] == "dry-run"
        assert any("a real run would be refused now" in w and f"pid {first.pid}" in w for w in dry_doc["warnings"])
        assert first.poll() is None, "the first recover must still be running"
    finally:
        release.touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err[-5000:]
    doc = json.loads(out)
    assert doc["outcome"] == "recovered" and len(doc["attempts"]) == 1
    assert not lock.exists()
    assert len(list((s.root / ".ckptctl").glob("recovery-*.json"))) == 1
    assert [r["action"] for r in audit_records(s.root)] == ["launch", "recover"]


@pytest.mark.slow
def test_interrupting_recover_stops_the_job_and_does_not_relaunch(tmp_path: Path, golden: dict[int, Path]) -> None:
    """Ctrl-C on the on-call's terminal ends the recovery: the job is stopped, nothing is relaunched."""
    s = golden_scene(tmp_path, golden, "--steps", "1000", "--step-sleep-s", "0.2")
    proc = subprocess.Popen(
        [CKPTCTL, "recover", "--config", str(s.config), "--no-logs", "--baseline", "baseline.log", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=s.dir,
        env=_env(),
        # A terminal's Ctrl-C: SIGINT at its default disposition even when the suite runs as a
        # background job of a non-interactive shell (which starts it ignored; ckptctl rightly
        # leaves an ignored SIGINT ignored).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    logs = s.root / ".ckptctl" / "logs"
    try:
        deadline = time.monotonic() + 90
        # wait until the relaunched job is training (a loss line in its log)
        while not any("ckptctl-train step=" in p.read_text() for p in logs.glob("launch-*.log")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-5000:]
    doc = json.loads(out)
    assert doc["outcome"] == "stopped" and doc["exit_code"] == 130 and doc["interrupted_by"] == "SIGINT"
    assert doc["reason"].startswith("interrupted: ckptctl received SIGINT and stopped the job")
    (att,) = doc["attempts"]
    assert att["interrupted_by"] == "SIGINT" and att["checkpoint_step"] == 30
    assert len(list(logs.glob("launch-*.log"))) == 1, "a second job was launched after the interrupt"
    assert "attempt 2/" not in err
    assert "ckptctl-train done" not in attempt_log(att)
    assert doc["rollbacks"] == [] and step_dirs(s.root) == ["step_10", "step_20", "step_30"]
    assert [r["outcome"] for r in audit_records(s.root) if r["action"] == "recover"] == ["stopped"]


# -- bounded attempts --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_restart_loop_is_stopped_with_a_clear_message(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden, "--fail-on-resume")
    code, doc, err = recover_json(
        "--config", str(s.config), "--baseline", "baseline.log", "--max-attempts", "5", cwd=s.dir
    )
    assert code == 3, err[-5000:]
    assert doc["outcome"] == "stopped"
    assert "restart loop" in doc["reason"] and "step 30" in doc["reason"] and "does not advance" in doc["reason"]
    # stopped by the guard after two tries, well inside the bound of 5
    assert [(a["number"], a["checkpoint_step"], a["exit_code"]) for a in doc["attempts"]] == [(1, 30, 1), (2, 30, 1)]
    for a in doc["attempts"]:
        assert "failing right after the resume from step 30" in attempt_log(a)
    assert "attempt 2/5" in err and "attempt 3/" not in err
    # the loss watch was still armed with the --baseline on the second try
    second_watch = doc["attempts"][1]["watch"]
    assert "error" not in second_watch, second_watch
    assert second_watch["baseline_log"]["num_points"] >= 35
    assert doc["rollbacks"] == [] and step_dirs(s.root) == ["step_10", "step_20", "step_30"]
    assert [r["outcome"] for r in audit_records(s.root) if r["action"] == "recover"] == ["stopped"]


@pytest.mark.slow
def test_attempts_are_bounded_when_every_relaunch_fails_after_a_new_checkpoint(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    s = golden_scene(tmp_path, golden, "--fail-after-steps", "1")
    code, doc, err = recover_json("--config", str(s.config), "--baseline", "baseline.log", "--max-attempts", "2", cwd=s.dir)
    assert code == 3, err[-5000:]
    # the step advances (30 -> 31 -> 32), so this is no loop: the bound stops it
    assert [(a["checkpoint_step"], a["exit_code"]) for a in doc["attempts"]] == [(30, 1), (31, 1)]
    assert doc["reason"] == "the job failed (exit 1) and no attempts are left (2)"
    assert "attempt 3/" not in err
    # one logged step per attempt is no evidence against the resume
    assert [a["watch_verdict"] for a in doc["attempts"]] == ["insufficient-data", "insufficient-data"]
    assert step_dirs(s.root) == ["step_10", "step_20", "step_30", "step_31", "step_32"]


@pytest.mark.slow
def test_a_relaunch_that_fails_after_progress_is_resumed_from_its_new_checkpoint(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    """Attempt 1 (from step_30) logs 31..34, saves step_34 and dies; attempt 2 resumes from step_34."""
    s = golden_scene(tmp_path, golden, "--steps", "50", "--fail-after-steps", "4", "--fail-below-step", "34")
    code, doc, err = recover_json("--config", str(s.config), "--baseline", "baseline.log", cwd=s.dir)
    assert code == 0, err[-5000:]
    first, second = doc["attempts"]
    assert (first["checkpoint_step"], first["exit_code"]) == (30, 1)
    assert (second["checkpoint_step"], second["exit_code"]) == (34, 0)
    assert second["argv"][-2:] == ["--resume-from", str(s.root / "step_34")]
    assert "the job failed (exit 1): locate the newest complete checkpoint and resume" in err
    # the second watch judged against the --baseline plus what attempt 1 logged, and found it continuous
    assert second["watch_verdict"] == "continuous", second["watch"]
    assert second["watch"]["baseline_log"]["num_points"] == 35 + 4
    assert logged_steps(attempt_log(second)) == list(range(35, 51))
    assert doc["outcome"] == "recovered" and doc["rollbacks"] == []


# -- --dry-run ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dry_run_changes_nothing_on_disk(tmp_path: Path, crashed: CrashedRun) -> None:
    s = crashed_scene(tmp_path, crashed)
    bin_dir, record = fake_scheduler_cli(tmp_path, "scontrol")
    env = _env(PATH=path_with(bin_dir))
    args = ["--config", str(s.config), "--logs", "kern.log", "--logs", "train.log", "--dry-run", "--execute-drain"]
    before = snapshot(tmp_path)

    code, doc, err = recover_json(*args, cwd=s.dir, env=env)
    assert code == 0, err
    assert doc["dry_run"] is True and doc["outcome"] == "dry-run" and doc["exit_code"] == 0
    step12 = str(s.root / "step_12")
    assert doc["launch_plan"]["argv"][-2:] == ["--resume-from", step12]
    assert doc["launch_plan"]["argv"][:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert doc["checkpoint"]["path"] == step12
    assert doc["drain"] == [{"kind": "slurm", "hosts": ["gpu-node-2"], "argv": SCONTROL_DRAIN, "executed": False}]
    assert doc["attempts"] == [] and doc["rollbacks"] == [] and doc["report_path"] is None
    assert "(not executed, dry run)" in err

    human = run_recover(*args, cwd=s.dir, env=env)
    assert human.returncode == 0, human.stderr
    assert "outcome: dry-run" in human.stdout
    assert f"--resume-from {step12}" in human.stdout and "report:" not in human.stdout

    # nothing written anywhere: run root, working directory, logs; no drain, no job, no lock
    assert snapshot(tmp_path) == before
    assert not record.exists()
    assert not (s.root / ".ckptctl").exists() and not (s.dir / ".ckptctl-logs").exists()


# -- fast checks, no torchrun -------------------------------------------------------------------------------


def test_reports_of_recoveries_in_the_same_second_do_not_overwrite_each_other(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    from ckptctl.ops.launch import load_config
    from ckptctl.ops.recover import recover

    s = golden_scene(tmp_path, golden)
    (s.dir / "oom.log").write_text(OOM)
    config = load_config(str(s.config))
    frozen = datetime(2026, 11, 21, 3, 12, 0, tzinfo=timezone.utc)
    reports = [
        recover(str(s.root), config=config, logs=[str(s.dir / "oom.log")], now=lambda: frozen) for _ in range(2)
    ]
    paths = [r.report_path for r in reports]
    assert all(paths) and paths[0] != paths[1], paths
    for r in reports:
        assert r.outcome == "stopped" and r.exit_code == 3
        assert json.loads(Path(str(r.report_path)).read_text())["report_path"] == r.report_path
    assert [rec["report"] for rec in audit_records(s.root)] == paths


def test_an_unreadable_log_fails_and_the_report_says_why(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    proc = run_recover("--config", str(s.config), "--logs", "missing.log", "--json", cwd=s.dir)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "missing.log" in errors[0], proc.stderr
    (report,) = (s.root / ".ckptctl").glob("recovery-*.json")
    doc = json.loads(report.read_text())
    assert doc["outcome"] == "stopped" and doc["reason"].startswith("recover failed: ")
    assert "missing.log" in doc["reason"] and doc["attempts"] == []
    assert [(r["outcome"], r["reason"]) for r in audit_records(s.root)] == [("stopped", doc["reason"])]
    assert not (s.root / ".ckptctl" / "lock").exists()


def test_on_unknown_stop_without_logs_stops(tmp_path: Path, golden: dict[int, Path]) -> None:
    s = golden_scene(tmp_path, golden)
    code, doc, err = recover_json("--config", str(s.config), "--on-unknown", "stop", cwd=s.dir)
    assert code == 3, err
    assert doc["outcome"] == "stopped" and "--on-unknown stop" in doc["reason"]
    assert doc["classify"] is None and doc["attempts"] == []


@pytest.mark.parametrize(
    "args, exit_code, needle",
    [
        (["--on-unknown", "maybe"], 2, "--on-unknown must be 'resume' or 'stop'"),
        (["--max-attempts", "0"], 2, "--max-attempts"),
        (["{missing}"], 2, "two run roots"),  # the config names another root: refused before anything is opened
    ],
)
def test_bad_invocations_fail_with_a_message_and_touch_nothing(
    tmp_path: Path, golden: dict[int, Path], args: list[str], exit_code: int, needle: str
) -> None:
    s = golden_scene(tmp_path, golden)
    args = [a.replace("{missing}", str(tmp_path / "nope")) for a in args]
    proc = run_recover(*args, "--config", str(s.config), "--json", cwd=s.dir)
    assert proc.returncode == exit_code, proc.stderr
    assert needle in proc.stderr and proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert not (s.root / ".ckptctl").exists()


# -- Capacity: wait for healthy hosts through recover.hosts_command ----------------------------------


def fake_hosts_command(tmp_path: Path, answers: list[str], *, exit_code: int = 0) -> tuple[list[str], Path]:
    """A real program standing for ``sinfo``/``kubectl``: call k prints ``answers[k]`` (the last
    one from then on) and exits ``exit_code``; every call is counted in a file."""
    calls = tmp_path / "hosts-calls.txt"
    script = tmp_path / "fake_sinfo.py"
    script.write_text(
        "import pathlib, sys\n"
        f"calls = pathlib.Path({str(calls)!r})\n"
        "n = len(calls.read_text().splitlines()) if calls.exists() else 0\n"
        "calls.write_text(calls.read_text() + 'call\\n' if calls.exists() else 'call\\n')\n"
        f"answers = {answers!r}\n"
        "sys.stdout.write(answers[min(n, len(answers) - 1)])\n"
        f"if {exit_code}:\n"
        "    sys.stderr.write('sinfo: error: slurm_load_node: Unable to contact slurm controller\\n')\n"
        f"sys.exit({exit_code})\n"
    )
    return [sys.executable, str(script)], calls


def capacity_scene(tmp_path: Path, golden: dict[int, Path], command: list[str], **recover: Any) -> Scene:
    s = golden_scene(tmp_path, golden)
    doc = yaml.safe_load(s.config.read_text())
    doc["recover"].update({"hosts_command": command, "min_nodes_policy": "wait", **recover})
    s.config.write_text(yaml.safe_dump(doc))
    (s.dir / "slurm.out").write_text(PREEMPTED)
    return s


def test_capacity_wait_gives_up_after_the_timeout_and_launches_nothing(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    command, calls = fake_hosts_command(tmp_path, [""])  # no healthy host, ever
    # 1.5 s of 0.1 s polls: at most 16 checks; at least 3 even when each check (a shell) takes 0.5 s on a loaded machine
    s = capacity_scene(tmp_path, golden, command, capacity_poll_s=0.1, capacity_timeout_s=1.5)
    t0 = time.monotonic()
    code, doc, err = recover_json("--config", str(s.config), "--logs", "slurm.out", cwd=s.dir)
    assert code == 3 and doc["outcome"] == "stopped", err[-3000:]
    assert "not enough healthy hosts after waiting" in doc["reason"]
    checks = len(calls.read_text().splitlines())
    assert 3 <= checks <= 16 and doc["capacity"]["checks"] == checks
    assert doc["capacity"]["action"] == "wait" and doc["capacity"]["hosts_command"] == command
    assert doc["attempts"] == [] and time.monotonic() - t0 < 60
    assert "waiting 0.1 s for capacity" in err


def test_capacity_query_failure_stops_with_its_reason(tmp_path: Path, golden: dict[int, Path]) -> None:
    command, _ = fake_hosts_command(tmp_path, [""], exit_code=1)
    s = capacity_scene(tmp_path, golden, command)
    code, doc, _ = recover_json("--config", str(s.config), "--logs", "slurm.out", cwd=s.dir)
    assert code == 3 and doc["outcome"] == "stopped" and doc["attempts"] == []
    assert doc["reason"].startswith("capacity check failed:")
    assert "exited 1: sinfo: error: slurm_load_node: Unable to contact slurm controller" in doc["reason"]
    missing = capacity_scene(tmp_path / "b", golden, ["no-such-sinfo-here"])
    code, doc, _ = recover_json("--config", str(missing.config), "--logs", "slurm.out", cwd=missing.dir)
    assert code == 3 and "no-such-sinfo-here: command not found" in doc["reason"]


def test_capacity_dry_run_asks_once_and_never_waits(tmp_path: Path, golden: dict[int, Path]) -> None:
    command, calls = fake_hosts_command(tmp_path, ["\n"])
    s = capacity_scene(tmp_path, golden, command, capacity_poll_s=30, capacity_timeout_s=3600)
    t0 = time.monotonic()
    code, doc, _ = recover_json("--config", str(s.config), "--logs", "slurm.out", "--dry-run", cwd=s.dir)
    assert time.monotonic() - t0 < 30
    assert code == 3 and "a real run would ask" in doc["reason"] and "every 30 s" in doc["reason"]
    assert len(calls.read_text().splitlines()) == 1


@pytest.mark.slow
def test_capacity_wait_resumes_once_the_hosts_command_reports_enough(
    tmp_path: Path, golden: dict[int, Path]
) -> None:
    # no healthy host for two checks, then one (nnodes 1): recover waits, then relaunches
    command, calls = fake_hosts_command(tmp_path, ["", " ,\n", "gpu-node-1,gpu-node-2\n"])
    s = capacity_scene(tmp_path, golden, command, capacity_poll_s=0.2, capacity_timeout_s=120)
    code, doc, err = recover_json("--config", str(s.config), "--logs", "slurm.out", "--baseline", "baseline.log", cwd=s.dir)
    assert code == 0 and doc["outcome"] == "recovered", err[-3000:]
    assert len(calls.read_text().splitlines()) == 3 and doc["capacity"]["checks"] == 3
    assert doc["capacity"]["action"] == "run" and doc["capacity"]["available_hosts"] == ["gpu-node-1", "gpu-node-2"]
    assert doc["capacity"]["waited_s"] >= 0.4
    (att,) = doc["attempts"]
    assert att["checkpoint_step"] == 30 and att["watch_verdict"] == "continuous"
