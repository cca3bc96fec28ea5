"""Round-6e open-world vocabularies (orchestration and cloud platforms): Volcano's job-controller
events (the bus Event vocabulary, as its controller logs each request), the replica exit that
Vertex AI / AI Platform report with the container's termination reason, SageMaker's
FailureReason classes (AlgorithmError, ClientError, InternalServerError, CapacityError), and
the reasons Azure CycleCloud's Slurm integration downs a node with (sinfo -R cuts them to 20
characters).

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

_VOLCANO = ("I0302 11:04:09.551   1 job_controller.go:356] Try to handle request <Queue: research, Job: "
            "ml/gpt-ft, Task:worker, Pod:gpt-ft-worker-5, Event:{event}, ExitCode:{code}, Action:, JobVersion: 3>")

# (line, signature, verdict category, verdict confidence); a symptom alone is unknown/low
CASES = [
    # Volcano: a pod deleted or evicted from outside the job
    (_VOLCANO.format(event="PodEvicted", code=0), "volcano-event-evicted", "preemption", "medium"),
    # a pod or task failed: says that, not why
    (_VOLCANO.format(event="PodFailed", code=2), "volcano-event-failed", "unknown", "low"),
    (_VOLCANO.format(event="TaskFailed", code=0), "volcano-event-failed", "unknown", "low"),
    (_VOLCANO.format(event="Unknown", code=0), "volcano-event-unknown", "unknown", "low"),
    # Vertex AI / AI Platform replica exits, both naming styles (workerpoolN-M, "master 0")
    ("message: 'The replica workerpool0-1 exited with a non-zero status of 137. Termination reason: OOMKilled.'",
     "vertex-replica-oom", "job", "high"),
    ("The replica workerpool2-0 exited with a non-zero status of 1. Termination reason: Error. Traceback (most "
     "recent call last):", "vertex-replica-failed", "job", "low"),
    ("The replica worker 3 exited with a non-zero status of 255. Termination reason: Error.",
     "vertex-replica-failed", "job", "low"),
    # SageMaker FailureReason classes, from the SDK's exception and from describe-training-job
    ("sagemaker.exceptions.UnexpectedStatusException: Error for Training job bert-pt-2026-03-02-11-04-09-551: "
     "Failed. Reason: AlgorithmError: ExecuteUserScriptError:", "sagemaker-failure-algorithm", "job", "low"),
    ('    "FailureReason": "ClientError: Please ensure the training data channel train is not empty",',
     "sagemaker-failure-client", "job", "medium"),
    ("Error for Training job bert-pt-2026-03-02-11-04-09-551: Failed. Reason: InternalServerError: We "
     "encountered an internal error. Please try again.", "sagemaker-failure-service", "infra", "low"),
    ("Error for Training job bert-pt-2026-03-02-11-04-09-551: Failed. Reason: CapacityError: Unable to provision "
     "requested ML compute capacity.", "sagemaker-failure-service", "infra", "low"),
    # Azure CycleCloud downed a Slurm node (sinfo -R, 20-character reason column; scontrol show node)
    ("cyclecloud_node_fail slurm     2026-03-02T11:04:09 hpc-nd96-12", "cyclecloud-node-reason", "infra",
     "medium"),
    ("cyclecloud_zombie_no root      2026-03-02T11:04:09 hpc-nd96-13", "cyclecloud-node-reason", "infra",
     "medium"),
    ("   Reason=cyclecloud_node_failure [root@2026-03-02T11:04:09]", "cyclecloud-node-reason", "infra", "medium"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round6e_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)
    if confidence == "low":
        assert v.hosts == ()  # nothing low drains a node


def test_cyclecloud_reason_names_the_node_to_drain() -> None:
    text = (
        "REASON               USER      TIMESTAMP           NODELIST\n"
        "cyclecloud_node_fail slurm     2026-03-02T11:04:09 hpc-nd96-12\n"
        '        "cyclecloud_node_fail slurm     2026-03-02T11:06:40 hpc-nd96-14",\n'
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("infra", "medium")
    assert set(v.hosts) == {"hpc-nd96-12", "hpc-nd96-14"}
    # a recovered node is not a failure
    v = verdict_of("cyclecloud_node_reco slurm     2026-03-02T11:20:01 hpc-nd96-12\n")
    assert v.category == "unknown" and v.hosts == ()


@pytest.mark.parametrize(
    "line",
    [
        # Volcano's benign events are read but decide nothing
        _VOLCANO.format(event="OutOfSync", code=0),
        _VOLCANO.format(event="TaskCompleted", code=0),
        # a Volcano event name elsewhere in prose is not the controller's request line
        "policies: event PodEvicted action RestartJob",
        # a replica that exited zero is not a failure line
        "The replica workerpool0-0 completed successfully.",
        # a SageMaker job that completed
        "2026-03-02 11:04:09 Completed - Training job completed",
    ],
)
def test_lookalikes_decide_nothing(line: str) -> None:
    match = MATCHER.match_line(line)
    deciding = {"volcano-event-evicted", "volcano-event-failed", "volcano-event-unknown", "vertex-replica-failed",
                "vertex-replica-oom", "sagemaker-failure-algorithm", "sagemaker-failure-client",
                "sagemaker-failure-service", "cyclecloud-node-reason"}
    assert match is None or match.signature.id not in deciding
    assert verdict_of(line + "\n").category == "unknown"


def test_a_gpu_fault_outranks_the_platforms_word() -> None:
    # SageMaker and Vertex blame the script for any non-zero exit; an XID in the same logs wins
    xid = "[Mon Mar  2 11:04:01 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=7001, GPU has fallen off the bus.\n"
    for line in (
        "Error for Training job bert-pt-1: Failed. Reason: AlgorithmError: ExecuteUserScriptError:\n",
        "The replica workerpool0-1 exited with a non-zero status of 1. Termination reason: Error.\n",
    ):
        assert verdict_of(line).category == "job"
        assert verdict_of(xid + line).category == "infra"


def test_round6e_signatures_record_their_source() -> None:
    ids = [s.id for s in SIGNATURES]
    for sig_id in ("volcano-event-evicted", "volcano-event-failed", "volcano-event-unknown", "volcano-event-benign",
                   "vertex-replica-oom", "vertex-replica-failed", "sagemaker-failure-algorithm",
                   "sagemaker-failure-client", "sagemaker-failure-service", "cyclecloud-node-reason",
                   "cyclecloud-node-recovered"):
        assert SIGNATURES[ids.index(sig_id)].source, sig_id
    # the replica exit is read before the generic Kubernetes readers ("reason: Error", OOMKilled)
    assert ids.index("vertex-replica-failed") < ids.index("k8s-reason-failed")
    assert ids.index("vertex-replica-oom") < ids.index("k8s-oomkilled")
    # SageMaker's class is read before the SDK's exception would count as a Python exception
    assert ids.index("sagemaker-failure-algorithm") < ids.index("python-exception")
