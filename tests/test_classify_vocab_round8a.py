"""Round-8a open-world vocabularies (platforms, orchestrators and schedulers): pyxis / enroot's
container errors in a Slurm step, Nomad's task events, Google Cloud Batch's reserved exit codes,
dstack's termination reasons, Amazon ECS / AWS Batch stop reasons, Ray's own exception classes
and object-store / autoscaler / runtime_env messages, and the mpi-operator's eviction reason.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence)
CASES = [
    # enroot's [ERROR] lines as pyxis prints them: the node's tools, hooks and directories ...
    ("slurmstepd: error: pyxis:     [ERROR] Command not found: nvidia-container-cli, see "
     "https://github.com/NVIDIA/libnvidia-container", "enroot-command-not-found", "infra", "medium"),
    ("slurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/99-mellanox.sh exited with return code 2",
     "enroot-hook-failed", "infra", "low"),
    ("slurmstepd: error: pyxis:     mkdir: cannot create directory '/run/enroot/user-21044': Permission denied",
     "enroot-runtime-dir", "infra", "medium"),
    ("[2026-01-14T03:12:44.118] [9120.0] error: pyxis: couldn't mkdir /run/pyxis/21044: Read-only file system",
     "enroot-runtime-dir", "infra", "medium"),
    ("[ERROR] Not enough space left in /local/enroot/cache", "enroot-no-space", "infra", "medium"),
    # ... or the image the job asked for
    ("slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/24.13-py3 returned "
     "error code: 404 Not Found", "enroot-registry-error-job", "job", "medium"),
    ("slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/proxy_auth?scope=repository:nvidia/nemo:pull "
     "returned error code: 401 Unauthorized", "enroot-registry-error-job", "job", "medium"),
    ("[ERROR] URL https://registry-1.docker.io/v2/library/python/manifests/3.12 returned error code: "
     "503 Service Unavailable", "enroot-registry-error-service", "infra", "low"),
    ("slurmstepd: error: pyxis:     [ERROR] Unsupported architecture: aarch64",
     "enroot-image-invalid", "job", "medium"),
    # Nomad: the client log, the Recent Events table, the API's JSON
    ('    2026-01-14T03:12:44.118Z [INFO]  client.alloc_runner.task_runner: Task event: '
     'alloc_id=0f4c2d7e-11aa-4b2c-9d3e-5f6a7b8c9d0e task=trainer type="Driver Failure" '
     'msg="failed to start task: device plugin for nvidia/gpu is unhealthy" failed=false',
     "nomad-task-event-node", "infra", "low"),
    ("2026-01-14T03:12:44+00:00  Plugin became unhealthy  Nvidia device plugin reported an error",
     "nomad-task-event-node", "infra", "low"),
    ('          "Type": "Failed Artifact Download",', "nomad-task-event-job", "job", "medium"),
    ("01/14/26 03:12:44 UTC  Disk Resources Exceeded  The task disk usage exceeded its request of 300 MiB",
     "nomad-task-event-job", "job", "medium"),
    ("2026-01-14T03:12:44Z  Terminated  Exit Code: 137, Exit Message: \"OOM Killed\"",
     "nomad-oom-killed", "job", "high"),
    ("Client Description  = alloc is lost since its node is down", "nomad-alloc-lost", "infra", "medium"),
    # Google Cloud Batch: every reserved exit code, in Batch's and the workflow engines' shapes
    ("Task state is updated from RUNNING to FAILED on zones/us-east1-c/instances/8801 due to Spot VM "
     "preemption with exit code 50001.", "gcp-batch-exit-preempted", "preemption", "high"),
    ("Process `shard_tokens (41)` terminated with an error exit status (50005)",
     "gcp-batch-exit-time-limit", "preemption", "high"),
    ("Task sft.train:NA:2 failed. GCP Batch task exited with VMRebootedDuringExecution(50003).",
     "gcp-batch-exit-vm-failed", "infra", "medium"),
    ('        "exitCode": 50002,', "gcp-batch-exit-vm-unresponsive", "infra", "low"),
    # dstack
    ("Run failed with error code INTERRUPTED_BY_NO_CAPACITY. Check CLI and server logs for more details.",
     "dstack-interrupted", "preemption", "high"),
    (" qwen-sft-1   aws   p5.48xlarge   $98.32   terminated   1 day ago   MAX_DURATION_EXCEEDED",
     "dstack-interrupted", "preemption", "high"),
    (" qwen-sft-1   lambda   8xH100   $23.92   failed   5 mins ago   INSTANCE_UNREACHABLE",
     "dstack-instance-failed", "infra", "medium"),
    ("                                                     (CONTAINER_EXITED_WITH_ERROR)",
     "dstack-container-exited", "job", "low"),
    # ECS / AWS Batch / Fargate
    ('        "reason": "OutOfMemoryError: Container killed due to memory usage"',
     "aws-ecs-container-oom", "job", "high"),
    ('    "stopCode": "TerminationNotice",', "aws-ecs-spot-interrupted", "preemption", "high"),
    # Ray
    ("ray.exceptions.ActorUnschedulableError: The actor is not schedulable: The node specified via "
     "NodeAffinitySchedulingStrategy doesn't exist any more or is infeasible, and soft=False was specified.",
     "ray-exception-job", "job", "medium"),
    ("Status message: runtime_env setup failed: Failed to set up runtime environment.",
     "ray-runtime-env-failed", "job", "low"),
    ("ray.exceptions.TaskPlacementGroupRemoved: The placement group corresponding to this task has been removed.",
     "ray-exception-job-low", "job", "low"),
    ("(raylet) [2026-01-14 03:12:44,118 E 77 77] plasma_store_provider.cc:122: Failed to put object "
     "5a1f0e9d8c7b6a59ffffffffffffffffffffffff0100000002000000 in object store because it is full. "
     "Object size is 34359738368 bytes.", "ray-object-store-full", "job", "medium"),
    ("(autoscaler +1m4s) Error: No available node types can fulfill resource request {'GPU': 16.0}. Add "
     "suitable node types to this cluster to resolve this issue.", "ray-autoscaler-unfulfillable", "job", "low"),
    ("ray.exceptions.OutOfDiskError: Local disk is full", "ray-out-of-disk", "infra", "low"),
    # mpi-operator
    ("    reason: MPIJobEvicted", "k8s-reason-evicted", "preemption", "medium"),
    # Kueue's Workload condition reasons
    ("      reason: InCohortReclaimWhileBorrowing", "k8s-reason-preempted", "preemption", "high"),
    ("      reason: PodsReadyTimeout", "k8s-reason-evicted", "preemption", "medium"),
    ("      reason: ClusterQueueStopped", "k8s-reason-evicted", "preemption", "medium"),
    ("      reason: MaximumExecutionTimeExceeded", "k8s-reason-deadline", "preemption", "medium"),
    ("      reason: NodeFailures", "k8s-reason-node-lost", "infra", "medium"),
    # nvidia-container-cli's stage errors: the node's container GPU setup, or the image's request
    ("slurmstepd: error: pyxis:     nvidia-container-cli: ldcache error: process /sbin/ldconfig failed with error "
     "code: 127", "nvidia-container-cli-node", "infra", "medium"),
    ("docker: Error response from daemon: failed to create task for container: OCI runtime create failed: "
     "nvidia-container-cli: mount error: stat failed: /dev/nvidia-uvm: no such file or directory: unknown.",
     "nvidia-container-cli-node", "infra", "medium"),
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.6, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown", "nvidia-container-cli-request", "job", "low"),
    # SkyPilot's launcher without capacity
    ("sky.exceptions.ResourcesUnavailableError: Failed to provision all possible launchable resources. Relax the "
     "task's resource requirements: 1x AWS(p5.48xlarge)", "skypilot-resources-unavailable", "infra", "low"),
    # Modal
    ("Runner interrupted due to worker preemption. Your Function will be restarted with the same input.",
     "modal-worker-preempted", "preemption", "medium"),
    ("modal.exception.FunctionTimeoutError: Task's current input in-01JH2K timed out after 86400.0s",
     "modal-function-timeout", "preemption", "high"),
    # the clouds' record of the instance
    ("NodeName=queue0-dy-p5-2 State=DOWN+CLOUD+POWERED_DOWN Reason=(Code:InsufficientInstanceCapacity)Failure "
     "when resuming nodes [root@2026-01-14T03:12:44]", "ec2-capacity-error", "infra", "low"),
    ("botocore.exceptions.ClientError: An error occurred (VcpuLimitExceeded) when calling the RunInstances "
     "operation: You have requested more vCPU capacity than your current vCPU limit of 192 allows",
     "ec2-capacity-error", "infra", "low"),
    ('        "StateReason": {"Code": "Server.SpotInstanceTermination", "Message": "Server.SpotInstanceTermination: '
     'Spot instance termination"},', "ec2-state-reason-spot", "preemption", "high"),
    ("i-0a1b2c3d4e5f60718  terminated  Server.InternalError: Internal error on launch",
     "ec2-state-reason-host", "infra", "medium"),
    ("i-0a1b2c3d4e5f60718  stopped  Client.UserInitiatedShutdown: User initiated shutdown",
     "ec2-state-reason-stopped", "preemption", "medium"),
    ("2026-01-14T03:12:44.118Z  compute.instances.hostError  gpu-a3-12  Instance terminated by Compute Engine.",
     "gce-system-event-host-error", "infra", "medium"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round8a_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # pyxis's own lines say that the container failed, not why
        "slurmstepd: error: pyxis: container start failed with error code: 1",
        "slurmstepd: error: pyxis: failed to import docker image",
        # Nomad events that are not failures
        "2026-01-14T03:12:44Z  Terminated  Exit Code: 0",
        "2026-01-14T03:12:44Z  Restarting  Task restarting in 17.2s",
        '    2026-01-14T03:12:44.118Z [INFO]  client.alloc_runner.task_runner: Task event: alloc_id=0f4c2d7e '
        'task=trainer type=Started msg="Task started by client" failed=false',
        # a Nomad type word in prose is not an event
        "the driver failure rate of the cluster dropped last week",
        # Batch codes only count after their own words; a number in a step count is not one
        "step 50001 loss 1.873 lr 3.0e-4",
        # Ray's caller-side timeouts and the autoscaler's pending demand are not failures
        "Resources\n Demands:\n  {'GPU': 1.0}: 1+ pending tasks/actors",
        # an ECS service scale-in, a user's stop and a bare exit code
        '    "stopCode": "ServiceSchedulerInitiated",',
        # dstack stopped by its user in a listing next to other runs
        " splendid-penguin-1   gcp   e2-standard-2   $0.025   terminated   4 days ago   STOPPED_BY_USER",
    ],
)
def test_non_failures_make_no_cause(line: str) -> None:
    v = verdict_of(line + "\n")
    assert v.category == "unknown"


def test_enroot_error_outranks_the_pyxis_symptom() -> None:
    text = (
        "slurmstepd: error: pyxis: container start failed with error code: 1\n"
        "slurmstepd: error: pyxis: printing enroot log file:\n"
        "slurmstepd: error: pyxis:     [ERROR] Command not found: nvidia-container-cli\n"
        "slurmstepd: error: pyxis: couldn't start container\n"
        "srun: error: gpu-a03: task 0: Exited with exit code 1\n"
    )
    v = verdict_of(text, "slurm-812.out")
    assert (v.category, v.confidence) == ("infra", "medium")
    assert v.root_cause is not None and v.root_cause.signature.id == "enroot-command-not-found"


def test_pyxis_failure_without_enroot_log_stays_unknown() -> None:
    # only pyxis's own lines: the container failed, and nothing says on which side
    text = (
        "slurmstepd: error: pyxis: container start failed with error code: 1\n"
        "slurmstepd: error: pyxis: couldn't start container\n"
        "srun: error: gpu-a03: task 0: Exited with exit code 1\n"
    )
    v = verdict_of(text, "slurm-812.out")
    assert (v.category, v.confidence) == ("unknown", "low")


def test_nomad_oom_is_host_memory_not_gpu() -> None:
    v = verdict_of('2026-01-14T03:12:44Z  Terminated  Exit Code: 137, Exit Message: "OOM Killed"\n', "alloc.txt")
    assert v.category == "job" and v.root_cause is not None
    assert "not a GPU out-of-memory" in v.root_cause.signature.action


def test_ecs_container_oom_is_not_read_as_cuda_oom() -> None:
    m = MATCHER.match_line("Status reason\tOutOfMemoryError: Container killed due to memory usage Exit Code\t137")
    assert m is not None and m.signature.id == "aws-ecs-container-oom"


def test_gcp_batch_codes_are_each_in_one_entry() -> None:
    members = [c for s in SIGNATURES if s.id.startswith("gcp-batch-exit-") for c in s.codes]
    assert sorted(members) == ["50001", "50002", "50003", "50004", "50005", "50006"]


def test_nomad_failure_types_are_each_in_one_entry() -> None:
    members = [c for s in SIGNATURES if s.id.startswith("nomad-task-event-") for c in s.codes]
    assert sorted(members) == sorted([
        "Driver Failure", "Setup Failure", "Failed Restoring Task", "Task hook failed", "Plugin became unhealthy",
        "Failed Validation", "Failed Artifact Download", "Disk Resources Exceeded", "Not Restarting",
        "Sibling Task Failed",
    ])


def test_ec2_state_reasons_are_each_in_one_entry() -> None:
    members = [c for s in SIGNATURES if s.id.startswith("ec2-state-reason-") for c in s.codes]
    assert sorted(members) == sorted([
        "Server.SpotInstanceTermination", "Server.SpotInstanceShutdown", "Server.InternalError", "Server.ScheduledStop",
        "Server.InsufficientInstanceCapacity", "Client.UserInitiatedShutdown", "Client.InstanceInitiatedShutdown",
        "Client.UserInitiatedHibernate", "Client.VolumeLimitExceeded", "Client.InternalError",
        "Client.InvalidSnapshot.NotFound",
    ])


def test_ray_system_classes_are_symptoms_and_request_classes_decide() -> None:
    for line in ("ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more "
                 "information.",
                 "ray.exceptions.OwnerDiedError: Failed to retrieve object 00ffff. The object's owner has exited."):
        m = MATCHER.match_line(line)
        assert m is not None and m.signature.id == "ray-worker-crashed" and m.signature.role == "symptom"
        assert verdict_of(line + "\n").category == "unknown"


def test_new_signatures_record_their_source() -> None:
    for sig_id in ("enroot-command-not-found", "enroot-hook-failed", "enroot-runtime-dir", "enroot-registry-error-job",
                   "enroot-registry-error-service", "enroot-image-invalid", "enroot-no-space", "pyxis-container-failed",
                   "nomad-task-event-node", "nomad-task-event-job", "nomad-task-event-failed", "nomad-oom-killed",
                   "nomad-alloc-lost", "gcp-batch-exit-preempted", "gcp-batch-exit-time-limit",
                   "gcp-batch-exit-vm-failed", "gcp-batch-exit-vm-unresponsive", "dstack-interrupted",
                   "dstack-stopped-by-policy", "dstack-no-capacity", "dstack-instance-failed",
                   "dstack-container-exited", "dstack-error-code-other", "aws-ecs-container-oom",
                   "aws-ecs-spot-interrupted", "aws-ecs-stop-code", "ray-exception-job", "ray-exception-job-low",
                   "ray-runtime-env-failed", "ray-object-store-full", "ray-out-of-disk",
                   "ray-autoscaler-unfulfillable", "ec2-capacity-error", "ec2-state-reason-spot",
                   "ec2-state-reason-host", "ec2-state-reason-stopped", "gce-system-event-host-error",
                   "modal-worker-preempted", "modal-function-timeout", "nvidia-container-cli-node",
                   "nvidia-container-cli-request", "skypilot-resources-unavailable"):
        sig = next(s for s in SIGNATURES if s.id == sig_id)
        assert sig.source
