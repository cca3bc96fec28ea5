"""Round-4 open-world vocabularies: ROCm's HSA runtime (memory faults and HW exceptions),
TensorFlow/XLA allocator OOM (host memory vs GPU memory), Intel Gaudi's synStatus codes, the
object storage services' transient error codes (S3/botocore, GCS, Azure Blob) and Python
logging's "asctime - name - level - " prefix on exception lines.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence)
CASES = [
    # ROCR's VMFaultHandler: every reason it prints, with and without the agent handle
    ("Memory access fault by GPU node-2 (Agent handle: 0x55e0c1a0) on address 0x7f3a00000000. Reason: Page not "
     "present or supervisor privilege.", "hsa-memory-fault", "job", "medium"),
    ("Memory access fault by GPU node-3 on address 0x1000. Reason: Write access to a read-only page.",
     "hsa-memory-fault", "job", "medium"),
    ("Memory access fault by GPU node-3 (Agent handle: 0x1) on address (nil). Reason: Execute access to a page "
     "marked NX.", "hsa-memory-fault", "job", "medium"),
    ("Memory access fault by GPU node-1 (Agent handle: 0x1) on address 0x7f00. Reason: Host access only.",
     "hsa-memory-fault", "job", "medium"),
    ("Memory access fault by GPU node-9 (Agent handle: 0x2) on address 0x7f00(may not be exact address). Reason: "
     "DRAM ECC failure.", "hsa-memory-fault-ecc", "infra", "high"),
    ("Memory access fault by GPU node-9 (Agent handle: 0x2) on address 0x7f00. Reason: SRAM ECC failure.",
     "hsa-memory-fault-ecc", "infra", "high"),
    ("Memory access fault by GPU node-4 on address 0x7f00. Reason: ECC failure (if supported by HW).",
     "hsa-memory-fault-ecc", "infra", "high"),
    ("Memory access fault by GPU node-4 (Agent handle: 0x3) on address 0x40. Reason: Generic hang recovery.",
     "hsa-memory-fault-hang", "infra", "medium"),
    ("Memory access fault by GPU node-5 (Agent handle: 0x4) on address 0x90366000. Reason: Unknown.",
     "hsa-memory-fault-unknown", "job", "low"),
    ("HW Exception by GPU node-6 (Agent handle: 0x7f11c0) reason :GPU Hang", "hsa-hw-exception-hang", "infra",
     "medium"),
    ("HW Exception by GPU node-6 (Agent handle: 0x7f11c0) reason :ECC", "hsa-hw-exception-ecc", "infra", "high"),
    # XLA / TensorFlow allocators: the memory that ran out decides the advice
    ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.",
     "xla-gpu-oom", "job", "high"),
    ("XlaRuntimeError: RESOURCE_EXHAUSTED: Out of host memory while trying to allocate 1073741824 bytes.",
     "xla-host-oom", "job", "high"),
    ("W0102 03:04:05.000 bfc_allocator.cc:482] Allocator (GPU_3_bfc) ran out of memory trying to allocate 2.00GiB "
     "(rounded to 2147483648)requested by op Conv2D", "xla-gpu-oom", "job", "high"),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[64,512] "
     "and type float on /job:worker/replica:0/task:1/device:CPU:0 by allocator cpu", "xla-host-oom", "job", "high"),
    # Intel Gaudi's synStatus numbers
    ("RuntimeError: synStatus=4 [Out of device memory] allocation failed", "gaudi-device-memory", "job", "high"),
    ("RuntimeError: synHostMalloc failed with synStatus 3 [Out of host memory].", "gaudi-host-memory", "job", "high"),
    ("RuntimeError: synLaunch failed with synStatus 17 [Device reset].", "gaudi-device-reset", "infra", "medium"),
    ("RuntimeError: synStatus=22 [Device busy] could not open the device", "gaudi-device-unavailable", "infra", "low"),
    ("RuntimeError: synStatus=16 [No free device] Device acquire failed.", "gaudi-device-acquire-failed", "infra",
     "low"),
    # object storage: the SDKs' renderings of a transient service code
    ("botocore.exceptions.ClientError: An error occurred (ServiceUnavailable) when calling the UploadPart operation "
     "(reached max retries: 9): Service is unable to handle request.", "object-store-throttled", "infra", "medium"),
    ("botocore.exceptions.ClientError: An error occurred (InternalError) when calling the GetObject operation: We "
     "encountered an internal error. Please try again.", "object-store-throttled", "infra", "medium"),
    ("google.api_core.exceptions.TooManyRequests: 429 PUT https://storage.googleapis.com/upload/storage/v1/b/ckpt/o: "
     "The rate of change requests to the object ckpt/latest exceeds the rate limit.", "object-store-throttled",
     "infra", "medium"),
    ("azure.core.exceptions.HttpResponseError: Operation could not be completed within the specified time. "
     "ErrorCode:OperationTimedOut", "object-store-throttled", "infra", "medium"),
    ("upload failed: StatusCode=503, ErrorCode=ServerBusy, ErrorMessage=The server is busy.", "object-store-throttled",
     "infra", "medium"),
    ("botocore.exceptions.ClientError: An error occurred (RequestTimeTooSkewed) when calling the PutObject operation: "
     "The difference between the request time and the current time is too large.", "object-store-clock-skew",
     "infra", "medium"),
    ("urllib.error.HTTPError: HTTP Error 503: Slow Down", "object-store-slow-down", "infra", "medium"),
    # Python logging's documented format in front of an exception
    ("2026-03-02 11:12:13,456 - train - ERROR - ValueError: shapes (4,3) and (2,) not aligned", "python-exception-logged",
     "job", "medium"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round4_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # a client-side code is the job's configuration (the refusals' vocabulary since round 9b, or the
        # generic exception), not the service
        "botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the PutObject operation: "
        "Access Denied",
        "botocore.exceptions.ClientError: An error occurred (NoSuchKey) when calling the GetObject operation: The "
        "specified key does not exist.",
        "google.api_core.exceptions.Forbidden: 403 GET https://storage.googleapis.com/storage/v1/b/ckpt: caller does "
        "not have storage.objects.get access",
        # a generic Gaudi failure is the software stack's, left to the exception it came in
        "RuntimeError: Graph compile failed. synStatus=synStatus 26 [Generic failure].",
    ],
)
def test_client_side_codes_are_not_the_service(line: str) -> None:
    match = MATCHER.match_line(line)
    # the generic exception rules (a class name ending in Error, or one named by its errors module), or
    # the object stores' refusals, which are the job's
    assert match is None or match.signature.id in ("python-exception", "python-exception-qualified") or (
        match.signature.category == "job"
    )
    assert verdict_of(line + "\n").category in ("job", "unknown")


def test_unreadable_codes_are_not_read() -> None:
    # an address with no "Reason:" (a cut log) is a fault of unknown cause; a code outside the
    # sets is not a storage outage; "HW Exception" of another vendor's wording is not ROCR's
    assert MATCHER.match_line("Memory access fault by GPU node-1 on address 0x20000000").signature.id == (
        "hsa-memory-fault-unknown"
    )
    assert MATCHER.match_line("<Error><Code>InvalidRequest</Code></Error>") is None
    assert MATCHER.match_line("HW Exception reported by the BMC for slot 3") is None


def test_code_vocabularies_do_not_overlap() -> None:
    for prefix in ("hsa-memory-fault", "hsa-hw-exception-", "gaudi-", "object-store-"):
        seen: dict[str, str] = {}
        for sig in SIGNATURES:
            if sig.id.startswith(prefix):
                for code in sig.codes:
                    assert code not in seen, (code, seen.get(code), sig.id)
                    seen[code] = sig.id
    # ROCR's VMFaultHandler reasons (runtime.cpp), each read by one entry or the code-less fallback
    reasons = {code for sig in SIGNATURES if sig.id.startswith("hsa-memory-fault") for code in sig.codes}
    assert {"Page not present or supervisor privilege", "Write access to a read-only page",
            "Execute access to a page marked NX", "Host access only", "DRAM ECC failure", "SRAM ECC failure",
            "Generic hang recovery"} <= reasons


def test_hsa_gpu_hang_outweighs_the_abort_it_causes() -> None:
    text = (
        "HW Exception by GPU node-2 (Agent handle: 0x1c0) reason :GPU Hang\n"
        "W0301 02:03:04.000000 4100 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 4102 "
        "closing signal SIGTERM\n"
        "E0301 02:03:05.000000 4100 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) "
        "local_rank: 0 (pid: 4101) of binary: /usr/bin/python3\n"
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("infra", "medium")
    assert v.root_cause is not None and v.root_cause.signature.id == "hsa-hw-exception-hang"


def test_host_oom_is_not_gpu_advice() -> None:
    v = verdict_of("RESOURCE_EXHAUSTED: Out of host memory while trying to allocate 4096 bytes.\n")
    assert v.root_cause is not None and "host memory" in v.root_cause.signature.description
    assert "batch" not in v.action.split("a smaller GPU batch")[0]
