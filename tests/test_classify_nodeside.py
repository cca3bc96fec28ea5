"""classify reads the families the second open-world round (cls22b) found missing.

Slurm's own node-side failures (a failed prolog, processes that would not die, slurmd
unable to set a job up, the reasons slurmctld drains a node for), systemd's OOM handling
(the kernel's OOM killer reported per unit, systemd-oomd), AWS Batch's host termination,
torch's shared-memory allocator and dcgmi diag's result table. Each line is written in its
producer's wording (read from its source, named in the signature's ``source``), not copied
from a real log; the real excerpts that found the gaps stay outside the project.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ckptctl.ops.classify import classify_logs

REPO = Path(__file__).resolve().parent.parent

# (case, lines, category, confidence, hosts to drain, root-cause signature)
CASES: list[tuple[str, list[str], str, str, list[str], str | None]] = [
    # Slurm: the node's failures, as srun/salloc, slurmctld, sinfo -R and scontrol print them
    ("salloc: prolog failure", ["salloc: Prolog failure on node gpu-k07"], "infra", "medium", ["gpu-k07"],
     "slurm-prolog-failure"),
    ("slurmctld: prolog failure", ["[2026-02-15T02:13:20.118] error: Prolog failure on node gpu-k08, draining the node"],
     "infra", "medium", ["gpu-k08"], "slurm-prolog-failure"),
    ("srun: task launch failed on a node", ["srun: error: Task launch for 6120.0 failed on node cn-b19: Job prolog failed"],
     "infra", "medium", ["cn-b19"], "slurmd-node-error"),
    ("slurmctld: slurmd could not kill the job", ["[2026-02-15T02:13:20.118] error: slurmd error running JobId=6122 on node(s)=cn-b20: Kill task failed"],
     "infra", "medium", ["cn-b20"], "slurmd-node-error"),
    ("srun: the application launch failed", ["srun: error: Application launch failed: User not found on host"],
     "infra", "medium", [], "slurmd-node-error"),
    ("sinfo -R: kill task failed", ["Kill task failed     root      2026-02-15T02:13:20 cn-b21"], "infra", "medium",
     ["cn-b21"], "slurm-node-reason"),
    ("sinfo -R: a 20-character reason", ["Node unexpectedly re root      2026-02-15T02:13:20 cn-b22"], "infra", "medium",
     ["cn-b22"], "slurm-node-reason"),
    ("sinfo -R: a hostlist names no single node", ["Epilog error         slurm     2026-02-15T02:13:20 cn-b[23-24]"],
     "infra", "medium", [], "slurm-node-reason"),
    ("scontrol show node: the reason", ["NodeName=cn-b25 Arch=x86_64 CoresPerSocket=32",
                                        "   Reason=Kill task failed [root@2026-02-15T02:13:20]"],
     "infra", "medium", ["cn-b25"], "slurm-node-reason"),
    # what the job's own request causes is not a node fault
    ("srun: execve of the job's program is not the node's", ["srun: error: Task launch for 6130.0 failed on node cn-b26: Slurmd could not execve job"],
     "unknown", "low", [], None),
    ("an admin's free-text reason is not read", ["maintenance window   root      2026-02-15T02:13:20 cn-b27"],
     "unknown", "low", [], None),
    # systemd: the kernel's OOM killer per unit, and systemd-oomd
    ("systemd: a unit's process OOM-killed", ["Mar 12 07:41:19 cpu-pre-2 systemd[1]: train.service: A process of this unit has been killed by the OOM killer."],
     "job", "high", [], "systemd-unit-oom-kill"),
    ("systemd: the unit's result", ["Mar 12 07:41:19 cpu-pre-2 systemd[1]: train.service: Failed with result 'oom-kill'."],
     "job", "high", [], "systemd-unit-oom-kill"),
    ("systemd-oomd killed the unit", ["Mar 12 07:41:19 cpu-pre-2 systemd[1]: train.service: systemd-oomd killed 7 process(es) in this unit."],
     "job", "medium", [], "systemd-oomd-kill"),
    ("systemd-oomd: swap", ["Mar 12 07:41:19 cpu-pre-2 systemd-oomd[611]: Marked /system.slice/train.service for killing due to memory used (9) / total (10) and swap used (9) / total (10) being more than 90.00%"],
     "job", "medium", [], "systemd-oomd-kill"),
    ("systemd-oomd's kill itself (debug level)", ["Mar 12 07:41:19 cpu-pre-2 systemd-oomd[611]: oomd attempting to kill 88123 with KILL"],
     "job", "medium", [], "systemd-oomd-kill"),
    ("a unit that merely failed is no OOM", ["Mar 12 07:41:19 cpu-pre-2 systemd[1]: train.service: Failed with result 'exit-code'."],
     "unknown", "low", [], None),
    # AWS Batch
    ("AWS Batch: the host EC2 instance terminated", ['"statusReason": "Host EC2 (instance i-0a1b2c3d4e5f60718) terminated."'],
     "preemption", "medium", [], "aws-batch-host-terminated"),
    # torch's shared-memory allocator: its "No space left on device" is /dev/shm, not a disk
    ("torch: shm full", ["RuntimeError: unable to write to file </torch_88_1234567_3>: No space left on device (28)"],
     "job", "medium", [], "torch-shm-exhausted"),
    ("torch: shm object not created", ["RuntimeError: unable to open shared memory object </torch_88_1234567_3> in read-write mode: Too many open files (24)"],
     "job", "medium", [], "torch-shm-exhausted"),
    ("a full checkpoint disk is still a disk", ["OSError: [Errno 28] No space left on device: '/ckpt/run7/step_48000/__3_0.distcp'"],
     "infra", "medium", [], "disk-full"),
    # dcgmi diag: a state reading; alone it decides at low
    ("dcgmi diag: a GPU failed", ["| GPU Memory                | Pass - GPUs: 0, 1                              |",
                                  "|                           | Fail - GPU: 2                                  |"],
     "infra", "low", [], "dcgm-diag-fail"),
    ("dcgmi diag: all passed", ["| GPU Memory                | Pass - All                                     |"],
     "unknown", "low", [], None),
]  # fmt: skip


def classify_text(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "incident.log"
    path.write_text(text)
    return classify_logs([str(path)], jobs=1).to_json()


@pytest.mark.parametrize(
    ("case", "lines", "category", "confidence", "hosts", "root"), CASES, ids=[c[0] for c in CASES]
)
def test_node_side_and_host_memory_families(
    tmp_path: Path,
    case: str,
    lines: list[str],
    category: str,
    confidence: str,
    hosts: list[str],
    root: str | None,
) -> None:
    doc = classify_text(tmp_path, "\n".join(lines) + "\n")
    assert (doc["category"], doc["confidence"], doc["hosts"]) == (category, confidence, hosts), case
    assert (doc["root_cause"]["signature"] if doc["root_cause"] else None) == root
    if category == "preemption":
        assert doc["suspect_hosts"] == [] and doc["hosts"] == []


def classify_open_world(name: str) -> dict[str, Any]:
    return classify_logs(
        [str(REPO / "tests" / "fixtures" / "logs_openworld" / name)], jobs=1
    ).to_json()


def test_a_drained_nodes_reason_and_the_jobs_notice_name_the_same_node() -> None:
    doc = classify_open_world("o_slurm_prolog_failure_sinfo")
    assert doc["category"] == "infra" and doc["hosts"] == ["dgx-b21"]
    assert {e["signature"] for e in doc["evidence"]} >= {
        "slurm-prolog-failure",
        "slurm-node-reason",
    }


def test_scontrols_reason_is_attributed_to_the_node_of_its_section() -> None:
    doc = classify_open_world("o_slurm_kill_task_failed_drain")
    assert doc["category"] == "infra" and doc["hosts"] == ["hpc-g117"]
    reasons = [e for e in doc["evidence"] if e["signature"] == "slurm-node-reason"]
    assert reasons and all(e["host"] == "hpc-g117" for e in reasons)


def test_shm_exhaustion_is_the_jobs_not_a_full_disk() -> None:
    doc = classify_open_world("o_torch_shm_write_no_space")
    assert (doc["category"], doc["root_cause"]["signature"]) == ("job", "torch-shm-exhausted")
    assert "disk-full" not in {e["signature"] for e in doc["evidence"]}
