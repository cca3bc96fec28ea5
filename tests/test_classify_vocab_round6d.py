"""Round-6d open-world vocabularies (accelerators other than NVIDIA CUDA): the AWS Neuron runtime's
NRT_STATUS (by number and by name), AMD HIP's hipError_t names, the absl status code that XLA / JAX /
TensorFlow / PJRT / libtpu errors carry, and XLA:TPU's memory-space OOM.

Lines written for this test in each producer's wording (its source, named in the catalogs'
``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence); a symptom alone is unknown/low
CASES = [
    # Neuron: the framework prints the number, nrt_infodump the name
    ("RuntimeError: nrt_execute status=1201", "neuron-hw-error", "infra", "high"),
    ("2026-Feb-03 10:11:12.000101 4410:4490 ERROR   NRT:nrt_infodump      Failure: NRT_EXEC_HW_ERR_NC_UE in "
     "nrt_execute()", "neuron-hw-error", "infra", "high"),
    ("RuntimeError: nrt_execute status=1203", "neuron-exec-unit-fault", "infra", "medium"),
    ("RuntimeError: nrt_execute status=1200", "neuron-collectives-peer", "unknown", "low"),
    ("RuntimeError: nrt_load status=9", "neuron-cores-unavailable", "infra", "low"),
    ("RuntimeError: nrt_load_collectives status=4 message=\"Allocation Failure\"", "neuron-out-of-resources",
     "job", "medium"),
    ("2026-Feb-03 10:11:12.000101 4410:4490 ERROR   NRT:nrt_infodump      Failure: NRT_UNSUPPORTED_NEFF_VERSION "
     "in nrt_load()", "neuron-program-invalid", "job", "medium"),
    ("  (0) INTERNAL: Nrt::Load failed on NeuronCores 2-3(2): nrt_load status=1, error message=\"Non specific "
     "failure\".", "neuron-status-unclear", "unknown", "low"),
    # HIP: the hipError_t name decides
    (":3:hip_platform.cpp         :715 : 912 us: [pid:77 tid:0x7f01] init: Returned hipErrorNoBinaryForGpu : "
     "continue parsing remaining modules", "hip-error-build-mismatch", "job", "medium"),
    ("E tensorflow/stream_executor/rocm/rocm_driver.cc:600] failed to allocate 2.00G (2147483648 bytes) from "
     "device: HIP_ERROR_OutOfMemory", "hip-error-out-of-memory", "job", "high"),
    ("hipMemcpy failed: hipErrorECCNotCorrectable", "hip-error-ecc", "infra", "high"),
    ("HIP runtime init failed: hipErrorNoDevice", "hip-error-no-device", "infra", "low"),
    ("Search for `hipErrorLaunchFailure' in https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more "
     "information.", "hip-error-unclear", "unknown", "low"),
    # absl status codes in exceptions and failed CHECKs
    ("F0203 10:11:12.000000   4410 pjrt_registry.cc:117] Non-OK-status: LoadPjrtPlugin(\"tpu\", path).status() "
     "status: ALREADY_EXISTS: PJRT_Api already exists for device type tpu", "absl-status-job", "job", "medium"),
    ("jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: failed to connect to all addresses", "absl-status-peer",
     "unknown", "low"),
    ("RuntimeError: INTERNAL: From /job:localservice/replica:0/task:0:", "absl-status-unclear", "unknown", "low"),
    # XLA:TPU: the program does not fit the TPU's memory
    ("W0203 10:11:12.000000     892 op_kernel.cc:1639] Resource exhausted: Compilation failure: Ran out of memory "
     "in memory space hbm. Used 18.1G of 16.0G hbm. Exceeded hbm capacity by 2.1G.", "xla-tpu-memory-space-oom",
     "job", "high"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round6d_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # a status= field that is not the Neuron runtime's
        "INFO worker heartbeat status=4 queue=2",
        "HTTP request finished status=404",
        # a hipError name that is not in hipError_t
        "hipErrorFooBar returned by a wrapper",
        # a status code word in prose, not after an exception or a status
        "the INTERNAL: field of the config is unused",
    ],
)
def test_lines_that_are_not_the_new_families(line: str) -> None:
    match = MATCHER.match_line(line)
    assert match is None or not match.signature.id.startswith(("neuron-", "hip-error-", "absl-status-")), (
        match and match.signature.id
    )


def test_an_internal_status_defers_to_the_runtime_cause_below_it() -> None:
    # before round 6d the RuntimeError read as the job's Python exception (job/medium)
    text = (
        "RuntimeError: INTERNAL: From /job:localservice/replica:0/task:0:\n"
        "  (0) INTERNAL: Nrt::Execute failed on NeuronCores 0-1: nrt_execute status=1201\n"
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("infra", "high")
    assert v.root_cause is not None and v.root_cause.signature.id == "neuron-hw-error"


def test_a_cuda_error_in_an_internal_status_still_decides() -> None:
    text = ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA error: an illegal memory access was "
            "encountered\n")
    v = verdict_of(text)
    assert v.category == "job"
    assert v.root_cause is not None and not v.root_cause.signature.id.startswith("absl-status-")


def test_new_signatures_record_their_source_and_order() -> None:
    ids = [s.id for s in SIGNATURES]
    new = [s for s in SIGNATURES if s.id.startswith(("neuron-", "hip-error-", "absl-status-"))]
    assert len(new) == 7 + 6 + 3 + 1  # (+1: round 9a's hip-error-no-device-text, torch's "HIP error: <sentence>")
    for sig in new:
        assert sig.source, sig.id
    # the absl statuses come after the specific entries and before the generic Python exception
    assert ids.index("cuda-oom") < ids.index("absl-status-unclear") < ids.index("python-exception")
    assert ids.index("xla-gpu-oom") < ids.index("xla-tpu-memory-space-oom")


def test_the_nrt_and_hip_vocabularies_are_whole() -> None:
    # every NRT_STATUS of nrt_status.h but NRT_SUCCESS, by number and by name, exactly once
    nrt = {1: "FAILURE", 2: "INVALID", 3: "INVALID_HANDLE", 4: "RESOURCE", 5: "TIMEOUT", 6: "HW_ERROR",
           7: "QUEUE_FULL", 9: "LOAD_NOT_ENOUGH_NC", 10: "UNSUPPORTED_NEFF_VERSION", 11: "FAIL_HOST_MEM_ALLOC",
           13: "UNINITIALIZED", 14: "CLOSED", 15: "QUEUE_EMPTY", 101: "EXEC_UNIT_UNRECOVERABLE",
           1002: "EXEC_BAD_INPUT", 1003: "EXEC_COMPLETED_WITH_NUM_ERR", 1004: "EXEC_COMPLETED_WITH_ERR",
           1005: "EXEC_NC_BUSY", 1006: "EXEC_OOB", 1100: "COLL_PENDING", 1200: "EXEC_HW_ERR_COLLECTIVES",
           1201: "EXEC_HW_ERR_HBM_UE", 1202: "EXEC_HW_ERR_NC_UE", 1203: "EXEC_HW_ERR_DMA_ABORT",
           1204: "EXEC_SW_NQ_OVERFLOW", 1205: "EXEC_HW_ERR_REPAIRABLE_HBM_UE", 1206: "NETWORK_PROXY_FAILURE"}
    for number, name in nrt.items():
        for code in (str(number), "NRT_" + name):
            m = MATCHER.match_line(f"2026-Feb-03 ERROR NRT:nrt_infodump  Failure: {code} in nrt_execute()")
            assert m is not None and m.signature.id.startswith("neuron-"), code
    m = MATCHER.match_line("RuntimeError: nrt_execute status=0")
    assert m is None or not m.signature.id.startswith("neuron-")
