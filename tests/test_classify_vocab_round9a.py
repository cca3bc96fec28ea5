"""Round-9a vocabularies (accelerators beyond NVIDIA's XIDs and their node tools): amdgpu's RAS
reports (deferred / poison consumption / correctable counts, the "in total" wording), the rest
of its page-fault report, its init and mode-reset failures, amd-smi / rocm-smi RAS counters,
``dcgmi health -c``'s rows, libtpu's unexpected halt, NCCL/RCCL's P2P IPC failures, and HIP's
hipError_t as a whole set.

Lines written for this test in each producer's wording (its source, named in the catalogs'
``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence)
CASES = [
    # amdgpu RAS: poisoned data in the GPU's memory, consumed or caught
    ("[ 9120.118302] amdgpu 0000:05:00.0: amdgpu: {31} socket: 0, die: 2, 4 new deferred hardware errors "
     "detected in umc block", "amdgpu-ras-deferred", "infra", "medium"),
    ("amdgpu 0000:26:00.0: amdgpu: socket: 1, die: 0, 1 new poison consumption detected in sdma block",
     "amdgpu-ras-deferred", "infra", "medium"),
    ("amdgpu 0000:26:00.0: amdgpu: socket: 1, die: 0, 6 deferred hardware errors detected in total in umc block",
     "amdgpu-ras-deferred", "infra", "medium"),
    # ... the uncorrectable count in its newer "in total" wording
    ("amdgpu 0000:75:00.0: amdgpu: {2} socket: 3, die: 1, 2 uncorrectable hardware errors detected in total "
     "in umc block", "amdgpu-ras-uncorrectable", "infra", "high"),
    # ... corrected by the hardware: evidence at low
    ("Mar 03 11:02:19 mi-n21 kernel: amdgpu 0000:8c:00.0: {9}socket: 5, die: 0, 230 new correctable hardware "
     "errors detected in xgmi_wafl block", "amdgpu-ras-correctable", "infra", "low"),
    ("amdgpu 0000:8c:00.0: amdgpu: socket: 5, die: 0 1 correctable hardware errors detected in mmhub block, "
     "no user action is needed", "amdgpu-ras-correctable", "infra", "low"),
    # amdgpu's page-fault report without its header: the program's fault, at low
    ("[ 3011.552120] amdgpu 0000:c4:00.0: amdgpu: GCVM_L2_PROTECTION_FAULT_STATUS:0x00B40A30",
     "amdgpu-page-fault-detail", "job", "low"),
    ("[ 3011.552131] amdgpu 0000:c4:00.0: amdgpu:          Faulty UTCL2 client ID: CPC (0x5)",
     "amdgpu-page-fault-detail", "job", "low"),
    ("amdgpu 0000:43:00.0: amdgpu:   in page starting at address 0x00007a1c00a00000 from IH client 0x12 (VMC)",
     "amdgpu-page-fault-detail", "job", "low"),
    ("amdgpu 0000:43:00.0: amdgpu: MMVM_L2_PROTECTION_FAULT_STATUS_LO32:0x00000B33",
     "amdgpu-page-fault-detail", "job", "low"),
    # amdgpu could not bring the GPU up or back
    ("[   31.004412] amdgpu 0000:c1:00.0: amdgpu: Fatal error during GPU init", "amdgpu-init-failed", "infra", "medium"),
    ("[   30.871250] [drm:amdgpu_device_ip_init [amdgpu]] *ERROR* hw_init of IP block <psp> failed -22",
     "amdgpu-init-failed", "infra", "medium"),
    ("amdgpu 0000:0f:00.0: amdgpu: GPU mode1 reset failed", "amdgpu-reset-failed", "infra", "high"),
    ("amdgpu 0000:0f:00.0: amdgpu: Mode2 reset failed!", "amdgpu-reset-failed", "infra", "high"),
    # the RAS counters as amd-smi / rocm-smi print them: readings of the state, low alone
    ("        TOTAL_UNCORRECTABLE_COUNT: 3", "amdsmi-uncorrectable-count", "infra", "low"),
    ("        TOTAL_DEFERRED_COUNT: 12", "amdsmi-uncorrectable-count", "infra", "low"),
    ("            UNCORRECTABLE_COUNT: 1", "amdsmi-uncorrectable-count", "infra", "low"),
    ("           UMC        ENABLED                  0                    4", "amdsmi-uncorrectable-count",
     "infra", "low"),
    # dcgmi health -c
    ("|       -> Memory system    | Failure                                                  |",
     "dcgmi-health-failure", "infra", "low"),
    ("| Overall Health            | Failure                                                  |",
     "dcgmi-health-failure", "infra", "low"),
    ("|       -> InfoROM system   | Warning                                                  |",
     "dcgmi-health-warning", "infra", "low"),
    # libtpu's unexpected halt: the runtime blames the compiled program
    ("E0102 18:40:11.204117   11873 real_program_continuator.cc:1331] 0x0x0_TC0: *** Halt is unexpected, all "
     "pending programs will fail. This is likely an XLA compiler bug, please file a bug to xla-tpu@ and CC "
     "tfrt-devs@.", "tpu-unexpected-halt", "job", "low"),
    # NCCL / RCCL P2P IPC
    ("mi-n04:7711:7790 [1] /opt/rocm/share/rccl/src/transport/p2p.cc:238 NCCL WARN hipIpcGetMemHandle failed : "
     "invalid argument", "nccl-p2p-ipc-failed", "job", "low"),
    ("gpu-a7:4410:4502 [6] transport/p2p.cc:326 NCCL WARN failed to peer with device 2(=41000): 1 invalid argument",
     "nccl-p2p-ipc-failed", "job", "low"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round9a_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # zero counts and healthy rows are no evidence
        "        TOTAL_UNCORRECTABLE_COUNT: 0",
        "        TOTAL_DEFERRED_COUNT: 0",
        "           UMC        ENABLED                  7                    0",
        "          SDMA       DISABLED",
        "| Overall Health            | Healthy                                                  |",
        "|       -> PCIe system      | Healthy                                                  |",
        # a count of zero in the RAS report
        "amdgpu 0000:8c:00.0: amdgpu: socket: 5, die: 0, 0 correctable hardware errors detected in total in gfx block",
    ],
)
def test_non_failures_make_no_cause(line: str) -> None:
    assert verdict_of(line + "\n").category == "unknown"


def test_deferred_error_and_reset_on_one_gpu_point_at_the_gpu() -> None:
    text = (
        "[ 812.100231] amdgpu 0000:1b:00.0: amdgpu: {3} socket: 0, die: 0, 2 new deferred hardware errors "
        "detected in umc block\n"
        "[ 812.100990] amdgpu 0000:1b:00.0: amdgpu: GPU reset begin!\n"
        "HW Exception by GPU node-2 (Agent handle: 0x5a1c) reason :GPU Hang\n"
    )
    v = verdict_of(text, "mi-n07.dmesg")
    assert v.category == "infra" and v.confidence in ("medium", "high")


def test_correctable_count_alone_is_not_confident() -> None:
    v = verdict_of("amdgpu 0000:8c:00.0: amdgpu: socket: 5, die: 0, 9 new correctable hardware errors detected "
                   "in umc block\n")
    assert (v.category, v.confidence) == ("infra", "low")


def test_page_fault_detail_names_the_gpu() -> None:
    v = verdict_of("Mar 03 11:02:19 mi-n21 kernel: amdgpu 0000:c4:00.0: amdgpu: "
                   "GCVM_L2_PROTECTION_FAULT_STATUS:0x00B40A30\n", "kern.log")
    assert v.category == "job"
    assert v.root_cause is not None and (v.root_cause.gpu or "").startswith("0000:c4:00")


# HIP's hipError_t, every member but hipSuccess (ROCm/HIP include/hip/hip_runtime_api.h, typedef
# enum hipError_t, read for this round): each is in exactly one hip-error-* entry.
HIP_ERRORS = ["AlreadyAcquired", "AlreadyMapped", "ArrayIsMapped", "Assert", "CapturedEvent", "ContextAlreadyCurrent", "ContextAlreadyInUse", "ContextIsDestroyed", "CooperativeLaunchTooLarge", "Deinitialized", "ECCNotCorrectable", "FileNotFound", "GraphExecUpdateFailure", "HostMemoryAlreadyRegistered", "HostMemoryNotRegistered", "IllegalAddress", "IllegalState", "InitializationError", "InsufficientDriver", "InvalidChannelDescriptor", "InvalidConfiguration", "InvalidContext", "InvalidDevice", "InvalidDeviceFunction", "InvalidDevicePointer", "InvalidGraphicsContext", "InvalidHandle", "InvalidImage", "InvalidKernelFile", "InvalidMemcpyDirection", "InvalidPitchValue", "InvalidResourceHandle", "InvalidSource", "InvalidSymbol", "InvalidTexture", "InvalidValue", "LaunchFailure", "LaunchOutOfResources", "LaunchTimeOut", "MapBufferObjectFailed", "MapFailed", "MemoryAllocation", "MissingConfiguration", "NoBinaryForGpu", "NoDevice", "NotFound", "NotInitialized", "NotMapped", "NotMappedAsArray", "NotMappedAsPointer", "NotReady", "NotSupported", "OperatingSystem", "OutOfMemory", "PeerAccessAlreadyEnabled", "PeerAccessNotEnabled", "PeerAccessUnsupported", "PriorLaunchFailure", "ProfilerAlreadyStarted", "ProfilerAlreadyStopped", "ProfilerDisabled", "ProfilerNotInitialized", "RuntimeMemory", "RuntimeOther", "SetOnActiveProcess", "SharedObjectInitFailed", "SharedObjectSymbolNotFound", "StreamCaptureImplicit", "StreamCaptureInvalidated", "StreamCaptureIsolation", "StreamCaptureMerge", "StreamCaptureUnjoined", "StreamCaptureUnmatched", "StreamCaptureUnsupported", "StreamCaptureWrongThread", "Tbd", "Unknown", "UnmapFailed", "UnsupportedLimit"]


def test_hip_error_vocabulary_is_complete() -> None:
    members = [c for s in SIGNATURES if s.id.startswith("hip-error-") for c in s.codes]
    assert sorted(members) == sorted(HIP_ERRORS)


def test_dcgmi_health_rows_need_a_system_name() -> None:
    # a table row of another tool with "Failure" in it is not dcgmi's health report
    m = MATCHER.match_line("| Test Result               | Failure                                                  |")
    assert m is None or not m.signature.id.startswith("dcgmi-health-")


@pytest.mark.parametrize(
    ("line", "sig_id", "category", "confidence"),
    [
        ("[51022.118004] habanalabs hl2: Device heartbeat failed! PCI link is broken",
         "habanalabs-heartbeat-failed", "infra", "medium"),
        ("[51022.118004] habanalabs 0000:19:00.0: Device heartbeat failed!",
         "habanalabs-heartbeat-failed", "infra", "medium"),
        ("habanalabs hl2: Collective Wait command submission 7731 has not finished in 30 seconds!",
         "habanalabs-cs-timeout", "infra", "low"),
        ("habanalabs hl6: 0000:cc:00.0 Consecutive FW fatal errors received, stopping hard reset",
         "habanalabs-device-unusable", "infra", "medium"),
        ("habanalabs hl6: 0000:cc:00.0 Failed to reset! Device is NOT usable",
         "habanalabs-device-unusable", "infra", "medium"),
    ],
)
def test_round9a_gaudi_driver_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    ("line", "sig_id", "category"),
    [
        ("state: PREEMPTED", "tpu-node-state-taken", "preemption"),
        ("  'state': 'TERMINATED',", "tpu-node-state-taken", "preemption"),
        ('    "state": "SUSPENDED",', "tpu-node-state-taken", "preemption"),
        ("state: REPAIRING", "tpu-node-state-repairing", "infra"),
    ],
)
def test_tpu_node_states(line: str, sig_id: str, category: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, "low")  # a reading of the state alone


@pytest.mark.parametrize("line", ["state: READY", "  state: ACTIVE", "state: terminated", "  lastState: PREEMPTED extra"])
def test_tpu_lifecycle_steps_are_no_evidence(line: str) -> None:
    m = MATCHER.match_line(line)
    assert m is None or not m.signature.id.startswith("tpu-node-state-")


@pytest.mark.parametrize(
    ("line", "sig_id"),
    [
        ("jaxlib.xla_extension.XlaRuntimeError: ABORTED: The TPU is already in use by process with pid 8812. Not "
         "attempting to load libtpu.so in this process.", "tpu-device-held"),
        ("ABORTED: The TPU is already in use by another process probably owned by another user. Run \"$ sudo lsof -w "
         "/dev/accel0\" to figure out which process is using the TPU.", "tpu-device-held"),
        ("RuntimeError: Bad StatusOr access: UNKNOWN: TPU initialization failed: open(/dev/accel3): Permission denied",
         "tpu-initialization-failed"),
    ],
)
def test_tpu_device_lock_and_init(line: str, sig_id: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == ("infra", "low")


def test_coordination_barrier_timeout_is_a_symptom() -> None:
    line = ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: ckpt_commit::7. This "
            "usually happens because a task triggered the barrier too early or too slowly.")
    m = MATCHER.match_line(line)
    assert m is not None and m.signature.id == "xla-coordination-barrier-timeout"
    assert verdict_of(line + "\n").category == "unknown"


HCCL_RESULTS = ["Uninitialized", "NoDeviceFound", "Unsupported", "OutOfMemory", "UnhandledSynapseError", "SystemError",
                "InternalError", "InvalidArgument", "InvalidUsage", "SocketError", "LibfabricError", "TryAgainError",
                "Busy", "NumResults", "StreamError", "SynapseTerminated"]


def test_gaudi_hccl_result_vocabulary_is_complete() -> None:
    # hccl_types.h hcclResult_t, every member but hcclSuccess, each in exactly one entry
    members = [c for s in SIGNATURES if s.id.startswith("hccl-gaudi-") for c in s.codes]
    assert sorted(members) == sorted(HCCL_RESULTS)


@pytest.mark.parametrize(
    ("line", "sig_id", "category"),
    [
        ("RuntimeError: [Rank:2] hcclAllReduce returned hcclInvalidUsage", "hccl-gaudi-usage", "job"),
        ("[Rank:5] HCCL call failed: hcclUnhandledSynapseError", "hccl-gaudi-device", "infra"),
        ("hcclCommInitRank failed with hcclLibfabricError", "hccl-gaudi-system", "infra"),
    ],
)
def test_gaudi_hccl_lines(line: str, sig_id: str, category: str) -> None:
    assert line_verdict(line, sig_id).category == category


def test_huawei_hccl_is_not_read_as_gaudi() -> None:
    m = MATCHER.match_line("RuntimeError: InnerRunOpApi:OpParamMaker.cpp:281 OPS function error: HcclAllreduce, error code is 6")
    assert m is None or not m.signature.id.startswith("hccl-gaudi-")


@pytest.mark.parametrize(
    "line",
    [
        "  Warning  UnexpectedAdmissionError  40s  kubelet  Allocate failed due to requested number of devices "
        "unavailable for habana.ai/gaudi. Requested: 8, Available: 7, which is unexpected",
        "Allocate failed due to previously allocated devices are no longer healthy; cannot allocate unhealthy devices "
        "google.com/tpu, which is unexpected",
    ],
)
def test_device_manager_refusal_is_the_nodes(line: str) -> None:
    v = line_verdict(line, "k8s-device-manager-unhealthy")
    assert (v.category, v.confidence) == ("infra", "medium")


@pytest.mark.parametrize(
    "line",
    [
        "F0311 07:44:02.118233   90211 sharding_propagation.cc:3012] Check failed: operand_sharding.IsTiled() ",
        "2024-06-02 08:11:40.501234: F external/xla/xla/service/shape_inference.cc:221] Check failed: "
        "ShapeUtil::IsArray(shape)",
        "*** Check failure stack trace: ***",
    ],
)
def test_native_check_failure_is_the_program_at_low(line: str) -> None:
    v = line_verdict(line, "native-check-failed")
    assert (v.category, v.confidence) == ("job", "low")


def test_a_library_status_in_a_check_is_read_by_its_own_entry() -> None:
    m = MATCHER.match_line("F0203 19:28:13.953368  9487 math_functions.cu:394] Check failed: status == "
                           "CURAND_STATUS_SUCCESS (201 vs. 0)  CURAND_STATUS_LAUNCH_FAILURE")
    assert m is not None and m.signature.id != "native-check-failed"


@pytest.mark.parametrize(
    "line",
    [
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Core halted unexpectedly: INTERNAL: Accelerator device halted "
        "prematurely, perhaps due to an on-device check-failure. Node 0 halted unexpectedly at tag:pc "
        "TensorCoreSequencer:41:0x2c (from TensorCoreSequencer:41:0x90): no debugging message found for this tag:pc. "
        "HLO: fusion.77; HLO computation: main.402_spmd",
        "jax.errors.JaxRuntimeError: FAILED_PRECONDITION: The program continuator has halted unexpectedly.",
    ],
)
def test_tpu_program_halts_are_the_program_at_low(line: str) -> None:
    v = line_verdict(line, "tpu-unexpected-halt")
    assert (v.category, v.confidence) == ("job", "low")


@pytest.mark.parametrize(
    ("line", "sig_id", "category", "confidence"),
    [
        # torch on ROCm prints HIP's sentences after "HIP error: "; they are CUDA's for the same codes
        ("RuntimeError: HIP error: invalid resource handle", "cuda-call-refused-prefixed", "job", "medium"),
        ("torch.AcceleratorError: HIP error: out of memory", "cuda-oom", "job", "high"),
        ("RuntimeError: HIP error: driver shutting down", "cuda-error-unclear-text", "job", "low"),
        ("RuntimeError: HIP error: no ROCm-capable device is detected", "hip-error-no-device-text", "infra", "low"),
    ],
)
def test_hip_sentences_after_the_torch_prefix(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


ROCBLAS_STATUS = ["success", "invalid_handle", "not_implemented", "invalid_pointer", "invalid_size", "memory_error",
                  "internal_error", "perf_degraded", "size_query_mismatch", "size_increased", "size_unchanged",
                  "invalid_value", "continue", "check_numerics_fail", "excluded_from_build", "arch_mismatch"]


def test_rocblas_status_vocabulary_is_complete() -> None:
    # rocblas-types.h rocblas_status 0-15, each in exactly one rocm-math-* entry
    members = [c for s in SIGNATURES if s.id.startswith("rocm-math-") for c in s.codes if c.startswith("rocblas_status_")]
    assert sorted(members) == sorted("rocblas_status_" + n for n in ROCBLAS_STATUS)


@pytest.mark.parametrize(
    ("line", "sig_id", "category", "confidence"),
    [
        ("RuntimeError: CUDA error: HIPBLAS_STATUS_ARCH_MISMATCH when calling `hipblasGemmStridedBatchedEx(handle)`",
         "rocm-math-refused", "job", "medium"),
        ("RuntimeError: CUDA error: HIPBLAS_STATUS_ALLOC_FAILED when calling `hipblasCreate(handle)`",
         "rocm-math-alloc-failed", "job", "medium"),
        ("MIOpen(HIP): Error [Compile] 'hiprtcCompileProgram' failed: miopenStatusInternalError",
         "rocm-math-failed", "unknown", "low"),
        ("rocBLAS error: Cannot read /opt/rocm-6.2.0/lib/rocblas/library/TensileLibrary_lazy_gfx1151.dat: No such file "
         "or directory for GPU arch : gfx1151", "rocblas-no-kernels-for-arch", "job", "medium"),
    ],
)
def test_rocm_math_library_statuses(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


HSA_STATUS = ["SUCCESS", "INFO_BREAK", "ERROR", "ERROR_INVALID_ARGUMENT", "ERROR_INVALID_QUEUE_CREATION",
              "ERROR_INVALID_ALLOCATION", "ERROR_INVALID_AGENT", "ERROR_INVALID_REGION", "ERROR_INVALID_SIGNAL",
              "ERROR_INVALID_QUEUE", "ERROR_OUT_OF_RESOURCES", "ERROR_INVALID_PACKET_FORMAT", "ERROR_RESOURCE_FREE",
              "ERROR_NOT_INITIALIZED", "ERROR_REFCOUNT_OVERFLOW", "ERROR_INCOMPATIBLE_ARGUMENTS", "ERROR_INVALID_INDEX",
              "ERROR_INVALID_ISA", "ERROR_INVALID_CODE_OBJECT", "ERROR_INVALID_EXECUTABLE", "ERROR_FROZEN_EXECUTABLE",
              "ERROR_INVALID_SYMBOL_NAME", "ERROR_VARIABLE_ALREADY_DEFINED", "ERROR_VARIABLE_UNDEFINED",
              "ERROR_EXCEPTION", "ERROR_INVALID_ISA_NAME", "ERROR_INVALID_CODE_SYMBOL", "ERROR_INVALID_EXECUTABLE_SYMBOL",
              "ERROR_INVALID_FILE", "ERROR_INVALID_CODE_OBJECT_READER", "ERROR_INVALID_CACHE", "ERROR_INVALID_WAVEFRONT",
              "ERROR_INVALID_SIGNAL_GROUP", "ERROR_INVALID_RUNTIME_STATE", "ERROR_FATAL",
              # hsa_ext_amd.h 40-47
              "ERROR_INVALID_MEMORY_POOL", "ERROR_MEMORY_APERTURE_VIOLATION", "ERROR_ILLEGAL_INSTRUCTION",
              "ERROR_MEMORY_FAULT", "CU_MASK_REDUCED", "ERROR_OUT_OF_REGISTERS", "ERROR_RESOURCE_BUSY",
              "ERROR_NOT_SUPPORTED"]


def test_hsa_status_vocabulary_is_complete() -> None:
    members = [c for s in SIGNATURES if s.id.startswith("hsa-status-") for c in s.codes]
    assert sorted(members) == sorted(HSA_STATUS)


@pytest.mark.parametrize(
    ("line", "sig_id", "category", "confidence"),
    [
        (":0:rocdevice.cpp            :3020: 1120419330 us: [pid:77   tid:0x7ef1] Device::callbackQueue aborting with "
         "error : HSA_STATUS_ERROR_MEMORY_FAULT: Agent attempted to access an inaccessible address. code: 0x2b",
         "hsa-status-program-fault", "job", "medium"),
        ("HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid.", "hsa-status-program-invalid", "job", "medium"),
        (":0:rocdevice.cpp            :3020: 1 us: [pid:77 tid:0x7e] Device::callbackQueue aborting with error : "
         "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016",
         "hsa-status-unclear", "unknown", "low"),
    ],
)
def test_hsa_statuses(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


def test_absl_uninitialised_log_prefix_is_a_check_failure() -> None:
    line = "F0000 00:00:1733000000.112233  1201 pjrt_client.cc:540] Check failed: device != nullptr"
    assert line_verdict(line, "native-check-failed").category == "job"


@pytest.mark.parametrize(
    ("line", "sig_id", "category", "confidence"),
    [
        ("amdgpu 0000:c1:00.0: amdgpu: SMU: I'm very busy for your command: index:38 param:0x00000000 message:"
         "GetMetricsTable", "amdgpu-smu-not-responding", "infra", "medium"),
        ("[ 811.004012] amdgpu: The cp might be in an unrecoverable state due to an unsuccessful queues preemption",
         "amdgpu-kfd-preemption-failed", "infra", "low"),
        ("[drm:amdgpu_device_ip_suspend_phase2 [amdgpu]] *ERROR* suspend of IP block <smu> failed -62",
         "amdgpu-init-failed", "infra", "medium"),
    ],
)
def test_amdgpu_firmware_and_queue_hangs(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


def test_smu_normal_response_is_no_evidence() -> None:
    m = MATCHER.match_line("amdgpu 0000:c1:00.0: amdgpu: SMU: response:0x00000001 for index:12 param:0x00000000 message:X?")
    assert m is None or m.signature.id != "amdgpu-smu-not-responding"
