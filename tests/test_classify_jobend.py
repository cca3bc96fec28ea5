"""classify knows its own words and the scheduler's (issue 21, point 3).

ckptctl.training's preemption lines, torchrun's signal forwarding and each scheduler's
job-end reasons (Slurm: preemption, time limit, requeue, node failure, cancellation by a
user or an admin; PBS, LSF and Kubernetes: their equivalents) get the right category and
confidence, and a clean preemption names no suspect host. The lines are written in each
producer's wording (ckptctl/training, torch/distributed/elastic, slurmstepd/slurmctld/sacct,
PBS MoM/server, LSF job reports, kubelet/kubectl); the last test runs a real torchrun
of examples/train.py and stops it as a scheduler would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ckptctl.ops.classify import classify_logs

REPO = Path(__file__).resolve().parent.parent

CKPTCTL_SIGTERM = "[rank0]:ckptctl: SIGTERM received; writing an emergency checkpoint at step 119"
CKPTCTL_TRAIN = "ckptctl-train preempted signal=SIGTERM step=119 checkpoint=/ckpt/llm/step_119 exit_code=75"
AGENT_75 = ("E0211 04:31:12.301000 90211 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 75) "
            "local_rank: 0 (pid: 90240) of binary: /usr/bin/python3")  # fmt: skip
AGENT_SIGNAL = ("W0211 04:31:09.118000 90211 torch/distributed/elastic/agent/server/api.py:753] Received "
                "Signals.SIGTERM death signal, shutting down workers")  # fmt: skip
AGENT_CLOSING = ("W0211 04:31:09.119000 90211 torch/distributed/elastic/multiprocessing/api.py:1029] Sending "
                 "process 90240 closing signal SIGTERM")  # fmt: skip
SIGNAL_EXC = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 90211 got signal: 15"

# (case, lines, category, confidence, hosts to drain, root-cause signature)
JOB_ENDS: list[tuple[str, list[str], str, str, list[str], str | None]] = [
    # ckptctl.training and torchrun
    ("ckptctl's emergency-checkpoint line", [CKPTCTL_SIGTERM], "preemption", "high", [], "ckptctl-emergency-checkpoint"),
    ("examples/train.py's preempted line", [CKPTCTL_TRAIN], "preemption", "high", [], "ckptctl-emergency-checkpoint"),
    ("a rank exited 75", [AGENT_75], "preemption", "medium", [], "ckptctl-exit-preempted"),
    ("srun: a task exited 75", ["srun: error: node-b14: tasks 0-3: Exited with exit code 75"], "preemption", "medium", [],
     "ckptctl-exit-preempted"),
    ("torchrun got a signal", [AGENT_SIGNAL, AGENT_CLOSING], "preemption", "low", [], "torchrun-signal-received"),
    ("torchrun's SignalException", [SIGNAL_EXC], "preemption", "low", [], "torchrun-signal-received"),
    ("torchrun stopping workers only", [AGENT_CLOSING], "unknown", "low", [], None),
    ("the whole story: signal, forwarding, checkpoint, exit 75",
     [AGENT_SIGNAL, AGENT_CLOSING, CKPTCTL_SIGTERM, CKPTCTL_TRAIN, AGENT_75, SIGNAL_EXC], "preemption", "high", [],
     "ckptctl-emergency-checkpoint"),
    # Slurm
    ("Slurm preemption", ["slurmstepd: error: *** JOB 88120 ON node-b14 CANCELLED AT 2026-02-11T09:12:40 DUE TO PREEMPTION ***"],
     "preemption", "high", [], "slurm-preempted"),
    ("Slurm time limit", ["slurmstepd: error: *** STEP 90311.0 ON gpu-r2-07 CANCELLED AT 2026-02-12T18:00:11 DUE TO TIME LIMIT ***"],
     "preemption", "high", [], "slurm-time-limit"),
    ("slurmctld time limit", ["[2026-02-12T18:00:11.004] Time limit exhausted for JobId=90311"], "preemption", "high", [],
     "slurmctld-time-limit"),
    ("Slurm requeue", ["slurmstepd: error: *** JOB 4120 ON cn07 CANCELLED AT 2026-02-13T11:02:55 DUE TO JOB REQUEUE ***"],
     "preemption", "medium", [], "slurm-step-requeued"),
    # the surviving node's slurmstepd writes it: "ON" names where it ran, not the failed node
    ("Slurm node failure", ["slurmstepd: error: *** JOB 51023 ON gpu-q12 CANCELLED AT 2026-02-15T02:13:20 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"],
     "infra", "high", [], "slurm-step-node-failure"),
    ("slurmctld kills a job on a failed node", ["[2026-02-15T02:13:20.118] Killing JobId=51023 on failed node gpu-q11"],
     "infra", "high", ["gpu-q11"], "slurmctld-node-failed"),
    # an older slurmstepd: "DUE TO NODE %s FAILURE" names the survivor it runs on: nobody drained
    ("Slurm node failure, older wording", ["slurmstepd: error: *** STEP 6120.0 CANCELLED AT 2026-02-15T02:13:20 DUE TO NODE cn-b17 FAILURE ***"],
     "infra", "high", [], "slurm-step-node-failure"),
    ("Slurm uncorrectable memory error", ["slurmstepd: error: *** STEP 6121.0 ON cn-b18 UNCORRECTABLE MEMORY ERROR AT 2026-02-15T04:00:09 ***"],
     "infra", "high", ["cn-b18"], "slurm-step-uncorrectable-memory"),
    ("cancelled with no reason", ["slurmstepd: error: *** JOB 77120 ON gpu-x03 CANCELLED AT 2026-02-14T08:40:02 ***"],
     "preemption", "low", [], "slurm-cancelled"),
    ("sacct: cancelled by a user", ["77120          pretrain  CANCELLED by 41021       0:0"], "preemption", "low", [],
     "slurm-state-cancelled"),
    ("sacct: cancelled by an admin (uid 0)", ["77121          pretrain  CANCELLED by 0       0:15"], "preemption", "low", [],
     "slurm-state-cancelled"),
    ("sacct: preempted", ["88120            llm-pt  PREEMPTED      0:0 node-b[14-15]"], "preemption", "high", [],
     "slurm-sacct-preempted"),
    ("sacct: timeout", ["88121            llm-pt    TIMEOUT      0:0 node-b[14-15]"], "preemption", "high", [],
     "slurm-sacct-preempted"),
    ("sacct: node failure", ["88122            llm-pt  NODE_FAIL      1:0         gpu-q11 "], "infra", "high", ["gpu-q11"],
     "slurm-sacct-node-fail"),
    # PBS
    ("PBS walltime", ["=>> PBS: job killed: walltime 43233 exceeded limit 43200"], "preemption", "high", [], "pbs-walltime"),
    ("PBS memory", ["=>> PBS: job killed: mem 523801264kb exceeded limit 503316480kb"], "job", "high", [], "pbs-memory"),
    ("PBS preemption", ["02/11/2026 09:12:40;0080;pbs_sched;Job;31207.pbs01;Job preempted by requeuing"], "preemption",
     "high", [], "pbs-preempted"),
    ("PBS node down", ["02/15/2026 02:13:20;0008;Server@pbs01;Job;31208.pbs01;Job requeued, execution node gpu-q11 down"],
     "infra", "high", ["gpu-q11"], "pbs-node-down"),
    # LSF
    ("LSF preemption", ["TERM_PREEMPT: job killed after preemption."], "preemption", "high", [], "lsf-preempted"),
    ("LSF run limit", ["TERM_RUNLIMIT: job killed after reaching LSF run time limit."], "preemption", "high", [], "lsf-limit"),
    ("LSF requeued by an admin", ["TERM_REQUEUE_ADMIN: job killed and requeued by root or LSF administrator."],
     "preemption", "medium", [], "lsf-stopped-from-outside"),
    ("LSF killed by its owner", ["TERM_OWNER: job killed by owner."], "preemption", "low", [], "lsf-killed-by-someone"),
    ("LSF killed by an admin", ["TERM_ADMIN: job killed by root or LSF administrator."], "preemption", "low", [],
     "lsf-killed-by-someone"),
    ("LSF memory limit", ["TERM_MEMLIMIT: job killed after reaching LSF memory usage limit."], "job", "high", [], "lsf-memory"),
    # Kubernetes
    ("k8s: preempted", ["2m    Normal    Preempted   pod/llm-worker-2   Preempted by pod 1c2d3e4f-aaaa-bbbb-cccc-0123456789ab on node gpu-pool-c-4"],
     "preemption", "high", [], "k8s-preempted"),
    ("k8s: evicted", ["    Reason:       Evicted"], "preemption", "medium", [], "k8s-evicted"),
    ("k8s: deadline", ["    Reason:       DeadlineExceeded"], "preemption", "medium", [], "k8s-reason-deadline"),
    ("k8s: node lost", ["    Reason:       NodeLost"], "infra", "medium", [], "k8s-reason-node-lost"),
]  # fmt: skip


def classify_text(tmp_path: Path, text: str, name: str = "job.log") -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text)
    return classify_logs([str(path)], jobs=1).to_json()


@pytest.mark.parametrize(
    ("case", "lines", "category", "confidence", "hosts", "root"), JOB_ENDS, ids=[j[0] for j in JOB_ENDS]
)
def test_job_end_reasons(
    tmp_path: Path, case: str, lines: list[str], category: str, confidence: str, hosts: list[str], root: str | None
) -> None:
    doc = classify_text(tmp_path, "\n".join(lines) + "\n")
    assert (doc["category"], doc["confidence"], doc["hosts"]) == (category, confidence, hosts), case
    assert (doc["root_cause"]["signature"] if doc["root_cause"] else None) == root
    if category == "preemption":
        # a preemption suspects nobody: nothing is wrong with where it ran
        assert doc["suspect_hosts"] == [] and doc["hosts"] == []
        assert all(s["role"] == "stopped" for s in doc["suspects"]), doc["suspects"]
        assert doc["exit_code"] == 12


def test_clean_preemption_of_a_multi_node_job_names_no_suspect(tmp_path: Path) -> None:
    """Slurm preempts a 16-rank job: every rank checkpoints, torchrun reports exit 75, the
    ranks that lost their peers time out. Preemption, high; nobody suspected or drained."""
    lines = ["slurmstepd: error: *** JOB 88120 ON node-b14 CANCELLED AT 2026-02-11T09:12:40 DUE TO PREEMPTION ***"]
    for rank in range(16):
        host = f"node-b{14 + rank // 8}"
        lines.append(f"{host}: [rank{rank}]:ckptctl: SIGTERM received; writing an emergency checkpoint at step 2210")
        lines.append(f"srun: error: {host}: task {rank}: Exited with exit code 75")
        lines.append(
            f"{host}: [rank{rank}]:[E211 09:12:41.004117411 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=40211, OpType=ALLREDUCE, NumelIn=524288, NumelOut=524288, "
            "Timeout(ms)=600000) ran for 600019 milliseconds before timing out."
        )
    doc = classify_text(tmp_path, "\n".join(lines) + "\n", "slurm-88120.out")
    assert (doc["category"], doc["confidence"]) == ("preemption", "high")
    assert doc["hosts"] == [] and doc["suspect_hosts"] == [] and doc["gpus"] == []
    assert {s["role"] for s in doc["suspects"]} == {"stopped"}
    assert "resume" in doc["action"].lower()


def test_a_hardware_fault_during_a_preemption_is_still_drained(tmp_path: Path) -> None:
    text = (
        "slurmstepd: error: *** JOB 88120 ON node-b14 CANCELLED AT 2026-02-11T09:12:40 DUE TO PREEMPTION ***\n"
        "Feb 11 09:12:30 node-b15 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4411, name=python3, GPU has fallen off the bus.\n"
    )
    doc = classify_text(tmp_path, text)
    assert doc["category"] == "infra" and doc["hosts"] == ["node-b15"]


@pytest.mark.slow
def test_real_torchrun_stopped_from_outside_is_a_clean_preemption(tmp_path: Path) -> None:
    """examples/train.py under a real torchrun (2 gloo ranks), SIGTERM to torchrun as a
    scheduler sends it: classify on its output says preemption and suspects nobody."""
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    log = tmp_path / "torchrun.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--tee=3",
             str(REPO / "examples" / "train.py"), "--ckpt-root", str(tmp_path / "run"),
             "--steps", "100000", "--save-every", "50", "--step-sleep-s", "0.05"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while b"step=3 " not in log.read_bytes() and b"step=3\n" not in log.read_bytes():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "training did not start"
                time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert "writing an emergency checkpoint" in text, text[-3000:]
    doc = classify_logs([str(log)], jobs=1).to_json()
    assert (doc["category"], doc["confidence"]) == ("preemption", "high"), doc["reasons"]
    assert doc["hosts"] == [] and doc["suspect_hosts"] == []
    assert {s["role"] for s in doc["suspects"]} <= {"stopped"}
