"""Round-9b vocabularies (storage, checkpoint-time I/O and the host): a disk quota is the job's and a
full disk the filesystem's; the object stores' refusals (S3 and Azure error codes, their messages) are
the job's configuration and their throttling and server errors the service's, in every SDK's shape
(botocore, the AWS Java SDK v1/v2, the Go SDK v1/v2, TensorFlow's GCS client, google-api-core, the
JSON error body of Google's APIs); the memory cgroup's OOM report and the kernel's OOM panic; the
CephFS kernel client; Lustre/LNet lines that are not Python exceptions; kernel BUG, ext4 write-back
and NVMe command errors; EROFS; torch.save's open failure; DCP's CheckpointException; syslogd's
emergency broadcast names the host.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from ckptctl.core.classify.catalog import CatalogError, parse_catalog
from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence) -- each line alone
CASES = [
    # quota: the job's share of the filesystem; ENOSPC: the filesystem is full
    ("OSError: [Errno 122] Disk quota exceeded: '/lustre/u/run3/ckpt/step_2000/__1_0.distcp'",
     "disk-quota-exceeded", "job", "medium"),
    ("safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 122, kind: "
     "FilesystemQuotaExceeded, message: \"Disk quota exceeded\" })", "disk-quota-exceeded", "job", "medium"),
    ("write error: Disk quota exceeded", "disk-quota-exceeded", "job", "medium"),
    ("safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
     "message: \"No space left on device\" })", "disk-full", "infra", "medium"),
    # S3 / Azure codes the job's setup causes, in each SDK's shape
    ("botocore.exceptions.ClientError: An error occurred (NoSuchBucket) when calling the PutObject operation: "
     "The specified bucket does not exist", "object-store-refused", "job", "medium"),
    ("com.amazonaws.services.s3.model.AmazonS3Exception: The provided token has expired. (Service: Amazon S3; "
     "Status Code: 400; Error Code: ExpiredToken; Request ID: 1B2C; S3 Extended Request ID: q)",
     "object-store-refused", "job", "medium"),
    ("operation error S3: GetObject, https response error StatusCode: 403, RequestID: 9X, HostID: h, "
     "api error AccessDenied: Access Denied", "object-store-refused", "job", "medium"),
    ("azure.core.exceptions.HttpResponseError: This request is not authorized to perform this operation using "
     "this permission. ErrorCode:AuthorizationPermissionMismatch", "object-store-refused", "job", "medium"),
    # the service's side in the same shapes
    ("com.amazonaws.services.s3.model.AmazonS3Exception: Please reduce your request rate. (Service: Amazon S3; "
     "Status Code: 503; Error Code: SlowDown; Request ID: 7A1; S3 Extended Request ID: z)",
     "object-store-throttled", "infra", "medium"),
    ("operation error S3: PutObject, exceeded maximum number of attempts, 3, https response error StatusCode: "
     "503, RequestID: R1, HostID: H1, api error SlowDown: Please reduce your request rate.",
     "object-store-throttled", "infra", "medium"),
    # HTTP statuses alone
    ("\tstatus code: 503, request id: 4F2A9C1D, host id: abc=", "object-store-status-service", "infra", "medium"),
    ("software.amazon.awssdk.services.s3.model.S3Exception: null (Service: S3, Status Code: 500, Request ID: "
     "Q7, Extended Request ID: e)", "object-store-status-service", "infra", "medium"),
    ("Unavailable: Error executing an HTTP request: HTTP response code 503 with body 'Backend Error' when "
     "uploading gs://bkt/run3/model.ckpt-400.index", "object-store-status-service", "infra", "medium"),
    ("\tstatus code: 403, request id: 7C1E, host id: x=", "object-store-status-refused", "job", "low"),
    ("google.resumable_media.common.InvalidResponse: ('Request failed with status code', 503) 503 PUT "
     "https://storage.googleapis.com/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=U1",
     "gcs-api-status-service", "infra", "medium"),
    ("ckpt upload failed: 403 POST https://storage.googleapis.com/upload/storage/v1/b/bkt/o?uploadType=multipart: "
     "svc@p.iam.gserviceaccount.com does not have storage.objects.create access", "gcs-api-status-refused",
     "job", "medium"),
    # Google's JSON error body
    ('    "reason": "rateLimitExceeded",', "gcs-json-reason-service", "infra", "medium"),
    ('        "reason": "backendError"', "gcs-json-reason-service", "infra", "medium"),
    # its refusals' words ("forbidden", "invalid", "required") are common JSON: low
    ('    "reason": "insufficientPermissions",', "gcs-json-reason-refused", "job", "low"),
    ('        "domain": "usageLimits",', "gcs-json-usage-limits", "infra", "low"),
    # the services' messages kept by wrappers that drop the code (s3fs)
    ("OSError: [Errno 5] Please reduce your request rate.", "object-store-service-message", "infra", "medium"),
    ("OSError: [Errno 5] We encountered an internal error. Please try again.", "object-store-service-message",
     "infra", "medium"),
    ("PermissionError: The AWS Access Key Id you provided does not exist in our records.",
     "object-store-refused-message", "job", "medium"),
    ("FileNotFoundError: The specified key does not exist.", "object-store-refused-message", "job", "medium"),
    # botocore's transport errors and missing credentials
    ("botocore.exceptions.ConnectionClosedError: Connection was closed before we received a valid response from "
     "endpoint URL: \"https://ckpt.s3.amazonaws.com/run3/step_400/__0_0.distcp?uploadId=u1&partNumber=7\".",
     "boto-transport-error", "infra", "medium"),
    ("botocore.exceptions.ConnectTimeoutError: Connect timeout on endpoint URL: \"https://minio.store.lan:9000/ckpt\"",
     "boto-transport-error", "infra", "medium"),
    ("botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "
     "\"https://ckpt.s3.eu-central-1.amazonaws.com/run3\"", "boto-endpoint-unreachable", "infra", "low"),
    ("botocore.exceptions.NoCredentialsError: Unable to locate credentials", "boto-credentials-missing", "job",
     "medium"),
    # memory cgroups and OOM panics
    ("Mar 2 10:01:12 n7 kernel: Task in /slurm/uid_1000/job_4412/step_0 killed as a result of limit of "
     "/slurm/uid_1000/job_4412", "kernel-memcg-limit-oom", "job", "high"),
    ("[ 912.40] memory: usage 67108864kB, limit 67108864kB, failcnt 4021", "kernel-memcg-limit-oom", "job", "high"),
    ("[ 912.40] Kernel panic - not syncing: Out of memory: compulsory panic_on_oom is enabled",
     "kernel-oom-panic", "job", "medium"),
    # CephFS kernel client
    ("[ 5120.01] ceph: mds0 reconnect denied", "cephfs-mds-session-lost", "infra", "medium"),
    ("[ 5120.01] ceph: [d3c1a2b4-1f00-4c6e-9d2a-7b7e1c0f9a11 4171] mds1 closed our session",
     "cephfs-mds-session-lost", "infra", "medium"),
    ("[ 5119.80] libceph: mon1 (1)10.4.0.12:6789 session lost, hunting for new mon", "cephfs-connection-fault",
     "infra", "low"),
    ("[ 5119.80] libceph: osd14 (1)10.4.0.31:6805 socket error on read", "cephfs-connection-fault", "infra", "low"),
    # Lustre/LNet lines in the client's debug shape are the filesystem's, not the job's exception
    ("[ 77.10] LustreError: 4410:0:(file.c:4021:ll_inode_revalidate_fini()) scratch: revalidate FID "
     "[0x200000007:0x1:0x0] error: rc = -108", "lustre-error-other", "infra", "low"),
    # the kernel and local disks
    ("[ 41.20] kernel BUG at fs/xfs/xfs_message.c:102!", "kernel-oops", "infra", "medium"),
    ("[ 41.20] EXT4-fs warning (device md0): ext4_end_bio:347: I/O error 10 writing to inode 131075 starting "
     "block 8650752)", "block-io-error", "infra", "medium"),
    ("[ 41.20] nvme2n1: Write(0x1) @ LBA 937703080, 256 blocks, Unrecovered Read Error (sct 0x2 / sc 0x81) DNR",
     "block-io-error", "infra", "medium"),
    ("[ 41.20] nvme nvme3: Removing after probe failure status: -19", "block-io-error", "infra", "medium"),
    ("[ 41.20] XFS (dm-4): Metadata I/O error in \"xfs_trans_read_buf_map+0x1d4/0x2c0 [xfs]\" at daddr 0x2 len 1 "
     "error 5", "block-io-error", "infra", "medium"),
    ("[ 41.20] md/raid:md0: Disk failure on nvme3n1, disabling device.", "block-io-error", "infra", "medium"),
    ("[ 41.20] sd 2:0:0:0: [sdc] tag#7 FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=31s",
     "scsi-ata-command-failed", "infra", "low"),
    ("[ 41.20] ata3.00: failed command: WRITE FPDMA QUEUED", "scsi-ata-command-failed", "infra", "low"),
    # a kworker's name holds a colon
    ("[ 41.20] watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:123]", "kernel-soft-lockup",
     "infra", "medium"),
    # torch's zip writer after a short write (the filesystem under it)
    ("RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos 704 vs 598",
     "torch-save-write-failed", "infra", "low"),
    # requests' HTTPError: a remote service's throttling or server error is not the job's
    ("huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url: "
     "https://huggingface.co/api/models/org/ckpt/preupload/main", "http-server-error-status", "infra", "low"),
    # EROFS: a read-only mount the job was given, or a remount: low
    ("OSError: [Errno 30] Read-only file system: '/workspace/.cache/huggingface/hub'", "read-only-filesystem",
     "infra", "low"),
    # torch.save could not create the file in an existing directory
    ("RuntimeError: File /scratch/run3/ckpt/epoch_12.pt cannot be opened.", "torch-save-open-failed",
     "infra", "low"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round9b_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # recoveries and routine notices
        "[ 5121.30] libceph: mon0 (1)10.4.0.11:6789 session established",
        "[ 5121.30] ceph: mds0 recovery completed",
        "[ 80.00] Lustre: scratch-OST0004-osc-ffff8e: Connection restored to 10.0.0.5@o2ib (at 10.0.0.5@o2ib)",
        "Mar  2 10:03:01 n7 kernel: nfs: server storage-01 OK",
        # a successful request's status and a 2xx/3xx status are not failures
        "\tstatus code: 200, request id: 11AA, host id: y=",
        # a status of some other HTTP client is not the object store's (the SDKs' shapes only)
        "rendezvous: unexpected status code: 503 from http://etcd:2379",
        "Uploading checkpoint to gs://bkt/run3/step_400 (reason: \"scheduled\")",
        # the memory controller's statistics outside an OOM report
        "memory.max: 68719476736",
    ],
)
def test_non_failures_make_no_cause(line: str) -> None:
    v = verdict_of(line + "\n")
    assert v.category == "unknown", line


def test_quota_and_full_disk_split_by_errno() -> None:
    # EDQUOT and ENOSPC are different errnos, and different owners
    quota = verdict_of("OSError: [Errno 122] Disk quota exceeded\n")
    full = verdict_of("OSError: [Errno 28] No space left on device\n")
    assert (quota.category, full.category) == ("job", "infra")
    assert quota.hosts == () and full.hosts == ()  # nothing to drain either way


def test_a_client_error_of_a_remote_service_stays_the_jobs() -> None:
    line = "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: https://huggingface.co/api/models/x"
    m = MATCHER.match_line(line)
    assert m is not None and m.signature.id != "http-server-error-status"
    assert verdict_of(line + "\n").category == "job"


def test_dcp_exception_defers_to_the_ranks_own_error() -> None:
    # DCP's wrapper alone is thin; the rank's ENOSPC under it decides
    alone = verdict_of("torch.distributed.checkpoint.api.CheckpointException: CheckpointException "
                       "ranks:dict_keys([0, 5])\n")
    assert alone.category == "unknown" or alone.confidence == "low"
    text = (
        "torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([5])\n"
        "Traceback (most recent call last): (RANK 5)\n"
        "  File \"/opt/conda/lib/python3.11/site-packages/torch/distributed/checkpoint/filesystem.py\", line 410, "
        "in _write_files_from_queue\n"
        "    _write_item(stream, data, write_item, storage_key)\n"
        "OSError: [Errno 28] No space left on device\n"
    )
    v = verdict_of(text, "gpu-r5.log")
    assert v.category == "infra"
    assert v.root_cause is not None and v.root_cause.signature.id == "disk-full"


_SEMLOCK_TRACEBACK = (
    "  File \"/usr/lib/python3.11/multiprocessing/context.py\", line 103, in Queue\n"
    "    return Queue(maxsize, ctx=self.get_context())\n"
    "  File \"/usr/lib/python3.11/multiprocessing/synchronize.py\", line 57, in __init__\n"
    "    sl = self._semlock = _multiprocessing.SemLock(\n"
    "OSError: [Errno 28] No space left on device\n"
)


def test_an_enospc_under_semaphore_creation_is_dev_shm() -> None:
    # the semaphore lives in /dev/shm: the ENOSPC under the frame is the container's shm
    v = verdict_of(_SEMLOCK_TRACEBACK, "worker-3.log")
    assert (v.category, v.confidence) == ("job", "medium")
    assert v.root_cause is not None and v.root_cause.signature.id == "multiprocessing-semlock-failed"
    # an ENOSPC far below (another save, another failure) is not explained by it
    far = _SEMLOCK_TRACEBACK + "step 1 ok\n" * 40 + "OSError: [Errno 28] No space left on device: '/ckpt/x.pt'\n"
    v_far = verdict_of(far, "worker-3.log")
    causes = {e.signature.id for e in (*v_far.causes, *v_far.other_causes)}
    assert "disk-full" in causes and "disk-full" not in {e.signature.id for e in v_far.symptoms}
    # in another file the explanation does not reach it either
    assert verdict_of("OSError: [Errno 28] No space left on device\n", "other.log").category == "infra"


def test_explains_is_for_causes_only() -> None:
    entry = {"id": "x", "pattern": "x", "category": "job", "role": "symptom", "explains": ["disk-full"]}
    with pytest.raises(CatalogError, match="explains"):
        parse_catalog({"version": 1, "signatures": [entry]}, source="t.yaml")
    ok = parse_catalog({"version": 1, "signatures": [dict(entry, role="cause")]}, source="t.yaml")
    assert ok[0].explains == ("disk-full",)


def test_lustre_debug_lines_are_not_the_jobs_exception() -> None:
    # "LustreError: ..." has a Python exception's shape; it must never be read as the job's own
    for line in ("LustreError: 3312:0:(osc_request.c:1834:osc_brw_redo_request()) @@@ redo for recoverable error -5",
                 "LNetError: 2431:0:(o2iblnd_cb.c:3371:kiblnd_check_txs_locked()) Timed out tx: tx_queue, 3 seconds"):
        m = MATCHER.match_line(line)
        assert m is not None and m.signature.id == "lustre-error-other", line
        assert verdict_of(line + "\n").category == "infra"


def test_syslogd_broadcast_names_the_host_of_the_lockup() -> None:
    text = (
        "Message from syslogd@gpu-t31 at Mar  2 10:04:44 ...\n"
        " kernel:[55716.328117] NMI watchdog: Watchdog detected hard LOCKUP on cpu 14\n"
    )
    v = verdict_of(text)
    assert v.category == "infra"
    assert "gpu-t31" in v.hosts


def test_object_store_codes_are_read_by_exactly_one_side() -> None:
    # a code is the service's trouble or the job's setup, never both
    service = {c for s in SIGNATURES if s.id in ("object-store-throttled", "object-store-clock-skew") for c in s.codes}
    refused = {c for s in SIGNATURES if s.id == "object-store-refused" for c in s.codes}
    assert refused and service and not (service & refused)
    statuses = [set(s.codes) for s in SIGNATURES if s.id.startswith(("object-store-status-", "gcs-api-status-"))]
    assert len(statuses) == 4
    assert not (statuses[0] & statuses[1]) and not (statuses[2] & statuses[3])
    reasons = [set(s.codes) for s in SIGNATURES if s.id.startswith("gcs-json-reason-")]
    assert len(reasons) == 2 and not (reasons[0] & reasons[1])


def test_new_signatures_record_their_source() -> None:
    ids = ("disk-quota-exceeded", "object-store-refused", "object-store-status-service", "object-store-status-refused",
           "gcs-api-status-service", "gcs-api-status-refused", "gcs-json-reason-service", "gcs-json-reason-refused",
           "gcs-json-usage-limits", "object-store-service-message", "object-store-refused-message",
           "torch-save-open-failed", "dcp-checkpoint-exception", "read-only-filesystem", "kernel-memcg-limit-oom",
           "kernel-oom-panic", "cephfs-mds-session-lost", "cephfs-connection-fault", "lustre-error-other",
           "syslogd-wall-message", "boto-transport-error", "boto-endpoint-unreachable", "boto-credentials-missing",
           "scsi-ata-command-failed", "http-server-error-status",
           "multiprocessing-semlock-failed")
    by_id = {s.id: s for s in SIGNATURES}
    for sig_id in ids:
        assert by_id[sig_id].source, sig_id
