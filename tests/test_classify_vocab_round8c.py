"""Round-8c open-world vocabularies (training runtimes): every CUDA runtime and driver error code
(cudaError_t / CUresult, by name and by its cudaGetErrorString sentence) that default.yaml does
not already decide, the CUDA math libraries' status enums (cuFFT, cuRAND, cuSPARSE, cuSOLVER and
XLA/jaxlib's words for them), NVRTC, PaddlePaddle's "(External) X error(N)." wrapper, and Ray's
node-dead line (its own sentence names both sides: weak).

Lines written for this test in each producer's wording (its header or source, named in the
catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import re

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence)
CASES = [
    # the program's GPU code has no build for this GPU: the image, medium
    ("[rank3]: RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "cuda-build-mismatch-text", "job", "medium"),
    ("F0114 03:12:44.118000 2201 stream_executor_util.cc:504] Could not create kernel: INTERNAL: Failed call to "
     "cudaGetFuncBySymbol: no kernel image is available for execution on the device", "cuda-build-mismatch-text",
     "job", "medium"),
    ("RuntimeError: Triton Error [CUDA]: device kernel image is invalid", "cuda-build-mismatch-text", "job", "medium"),
    ("RuntimeError: HIP error: invalid device function", "cuda-build-mismatch-text", "job", "medium"),
    ("E0114 03:12:44 cuda_driver.cc:548] failed to load PTX text as a module: CUDA_ERROR_INVALID_PTX: a PTX JIT "
     "compilation failed", "cuda-build-mismatch", "job", "medium"),
    ("launch of flash_fwd returned cudaErrorNoKernelImageForDevice", "cuda-build-mismatch", "job", "medium"),
    ("RuntimeError: nvrtc: error: invalid value for --gpu-architecture (-arch)", "nvrtc-compile-failed",
     "job", "medium"),
    # the node's driver is older than the toolkit: the node, medium, no drain
    ("RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.",
     "cuda-driver-too-old-text", "infra", "medium"),
    ("cuda failed with error 222 the provided PTX was compiled with an unsupported toolchain.",
     "cuda-driver-too-old-text", "infra", "medium"),
    ("cuModuleLoadData: CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "cuda-driver-too-old", "infra", "medium"),
    # the program's own call refused: the job, medium
    ("RuntimeError: CUDA error: too many resources requested for launch", "cuda-call-refused-text", "job", "medium"),
    ("<2026-01-14 03:12:44.118> CudaLog(Error)::cuCheckForError: too many resources requested for launch(7) in "
     "kernels.cu on line 88.", "cuda-call-refused-text", "job", "medium"),
    ("[rank0]: RuntimeError: CUDA error: operation not permitted when stream is capturing",
     "cuda-call-refused-text", "job", "medium"),
    ("Warp CUDA error 901: operation failed due to a previous error during capture (in function capture_end)",
     "cuda-call-refused-text", "job", "medium"),
    ("Exception: Capture cuda graph failed: CUDA error: capturing stream has unjoined work",
     "cuda-call-refused-text", "job", "medium"),
    ("INTERNAL: CUDA error: Failed to end stream capture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: operation failed",
     "cuda-call-refused", "job", "medium"),
    ("cudaLaunchCooperativeKernel returned cudaErrorCooperativeLaunchTooLarge", "cuda-call-refused", "job", "medium"),
    ("RuntimeError: CUDA error: invalid argument", "cuda-call-refused-prefixed", "job", "medium"),
    ("RuntimeError: Triton Error [CUDA]: invalid resource handle", "cuda-call-refused-prefixed", "job", "medium"),
    ("RuntimeError: cuda runtime error (500) : named symbol not found at /src/THC/generic/THCTensorMath.cu:35",
     "cuda-call-refused-prefixed", "job", "medium"),
    # a device ordinal the node does not have: weak
    ("[rank6]: RuntimeError: CUDA error: invalid device ordinal", "cuda-invalid-device-ordinal", "job", "low"),
    ("RuntimeError: cuda runtime error (101) : invalid device ordinal at /pytorch/torch/csrc/cuda/Module.cpp:59",
     "cuda-invalid-device-ordinal", "job", "low"),
    # the node's GPU setup: infra, low
    ("cuInit: CUDA_ERROR_STUB_LIBRARY", "cuda-node-setup", "infra", "low"),
    ("cudaSetDevice returned cudaErrorMpsConnectionFailed", "cuda-node-setup", "infra", "low"),
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 34: CUDA driver is a stub library",
     "cuda-node-setup-text", "infra", "low"),
    # no side named: the job, low
    ("RuntimeError: cuda runtime error (3) : initialization error at ../torch/csrc/cuda/Module.cpp:33",
     "cuda-error-unclear-text", "job", "low"),
    ("RuntimeError: CUDA driver error: operation not supported", "cuda-error-unclear-text", "job", "low"),
    ("cuMemCreate failed: CUDA_ERROR_NOT_SUPPORTED", "cuda-error-unclear", "job", "low"),
    # math libraries: an allocation failure is GPU memory, a refusal the call's
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: cuSolver allocation failed",
     "cuda-math-library-alloc", "job", "medium"),
    ("RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED", "cuda-math-library-alloc", "job", "medium"),
    ("RuntimeError: cuFFT error: CUFFT_INVALID_SIZE", "cuda-math-library-refused", "job", "medium"),
    ("RuntimeError: cusolver error: CUSOLVER_STATUS_INVALID_VALUE, when calling `cusolverDnXgeqrf_bufferSize(h)`",
     "cuda-math-library-refused", "job", "medium"),
    ("XlaRuntimeError: FAILED_PRECONDITION: cuSolver architecture mismatch error", "cuda-math-library-refused",
     "job", "medium"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round8c_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


# A library failing to run is a consequence (an earlier fault, a version mismatch, full memory):
# alone, it decides nothing; and it takes the line from the generic Python exception rule.
@pytest.mark.parametrize(
    ("line", "sig_id"),
    [
        ("RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR", "cuda-math-library-failed"),
        ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: cuSolver internal error", "cuda-math-library-failed"),
        ("F0114 03:12:44.118 9487 math_functions.cu:394] Check failed: status == CURAND_STATUS_SUCCESS (201 vs. 0)  "
         "CURAND_STATUS_LAUNCH_FAILURE", "cuda-math-library-failed"),
        ("RuntimeError: CUDA error: kernel launch failure when calling `cusparseXcsrgeam2Nnz( handle, m, n)`",
         "cuda-math-library-call-failed"),
        ("OSError: (External) CUFFT error(5). ", "paddle-external-error"),
    ],
)
def test_library_failures_alone_decide_nothing(line: str, sig_id: str) -> None:
    v = line_verdict(line, sig_id)
    assert v.category == "unknown" or v.confidence == "low"


def test_paddle_hint_line_decides_for_its_wrapper() -> None:
    # the wrapper's line is a symptom; the Hint's code decides (here a refusal: the job, medium)
    text = ("OSError: (External) CUFFT error(8). \n"
            "  [Hint: 'CUFFT_INVALID_SIZE'. User specified an invalid transform size] (at cufft_util.h:127)\n")
    v = verdict_of(text, "workerlog.0")
    assert (v.category, v.confidence) == ("job", "medium")
    assert v.root_cause is not None and v.root_cause.signature.id == "cuda-math-library-refused"
    # with the CUDA sentence on the wrapper's own line, that sentence's entry takes it
    m = MATCHER.match_line("OSError: (External) CUDA error(700), an illegal memory access was encountered.")
    assert m is not None and m.signature.id == "cuda-illegal-address"


@pytest.mark.parametrize(
    ("line", "sig_id"),
    [
        # the codes default.yaml decides keep their entries (this file lists none of them)
        ("RuntimeError: CUDA error: out of memory", "cuda-oom"),
        ("failed to synchronize: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
         "cuda-illegal-address"),
        ("cudaStreamSynchronize returned cudaErrorMemoryAllocation", "cuda-oom"),
        ("RuntimeError: CUDA error: unspecified launch failure", "cuda-launch-failure"),
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "cuda-ecc-error"),
        ("RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
         "cuda-driver-mismatch"),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED", "cudnn-cublas-unsupported"),
        # NCCL's own CUDA failure with a generic sentence stays NCCL's (weak, the GPU or driver)
        ("gpu-a3:1822:1901 [2] enqueue.cc:1556 NCCL WARN Cuda failure 'invalid resource handle'",
         "nccl-unhandled-cuda-error"),
        # default.yaml's longer sentence that starts with a generic one of this file
        ("RuntimeError: CUDA error: operation not supported on global/shared address space", "cuda-illegal-address"),
        # the first code of a line decides, whichever entry holds it
        ("CUDA_ERROR_OUT_OF_MEMORY after CUDA_ERROR_INVALID_VALUE", "cuda-oom"),
    ],
)
def test_codes_decided_elsewhere_keep_their_entry(line: str, sig_id: str) -> None:
    m = MATCHER.match_line(line)
    assert m is not None and m.signature.id == sig_id, (line, m and m.signature.id)


@pytest.mark.parametrize(
    "line",
    [
        # generic sentences without a CUDA prefix are anybody's
        "ValueError: invalid argument 'lr' for optimizer",
        "warning: operation not supported on this filesystem, falling back to copy",
        "initialization error in config loader, using defaults",
        "RuntimeError: file not found: /data/shard-0003.tar",
    ],
)
def test_generic_sentences_need_a_cuda_prefix(line: str) -> None:
    m = MATCHER.match_line(line)
    assert m is None or not m.signature.id.startswith(("cuda-", "nvrtc-", "paddle-")), m.signature.id


@pytest.mark.parametrize(
    "line",
    [
        # success codes and enum members that are no status are no failure
        "status == CURAND_STATUS_SUCCESS",
        "plan = cufftPlan1d(&p, n, CUFFT_R2C, 1) returned CUFFT_SUCCESS",
        "cudaGetLastError() == cudaSuccess after warmup",
        "cusolverDnCreate -> CUSOLVER_STATUS_SUCCESS",
    ],
)
def test_non_failures_make_no_cause(line: str) -> None:
    v = verdict_of(line + "\n")
    assert v.category == "unknown"


def test_ray_node_dead_alone_is_weak() -> None:
    # Ray's sentence lists a crashed raylet (OOM, preemption) and lagging heartbeats (a busy
    # workload): the node it names is a suspect, not a verdict
    line = ("2026-01-14 03:12:44,741 WARNING worker.py:2037 -- The node with node id: 9426f445 and address: "
            "10.130.0.113 and node name: gpu-r3 has been marked dead because the detector has missed too many "
            "heartbeats from it.")
    v = line_verdict(line, "ray-node-dead")
    assert (v.category, v.confidence) == ("infra", "low")


# driver_types.h (CUDA 12.x), enum cudaError, every member but cudaSuccess and the API base: each
# is decided by exactly one entry (a cuda.yaml name entry, or the default.yaml entry that reads it).
_CUDA_ERROR_T_NAMES = """
InvalidValue MemoryAllocation InitializationError CudartUnloading ProfilerDisabled ProfilerNotInitialized
ProfilerAlreadyStarted ProfilerAlreadyStopped InvalidConfiguration InvalidPitchValue InvalidSymbol
InvalidHostPointer InvalidDevicePointer InvalidTexture InvalidTextureBinding InvalidChannelDescriptor
InvalidMemcpyDirection AddressOfConstant TextureFetchFailed TextureNotBound SynchronizationError
InvalidFilterSetting InvalidNormSetting MixedDeviceExecution NotYetImplemented MemoryValueTooLarge StubLibrary
InsufficientDriver CallRequiresNewerDriver InvalidSurface DuplicateVariableName DuplicateTextureName
DuplicateSurfaceName DevicesUnavailable IncompatibleDriverContext MissingConfiguration PriorLaunchFailure
LaunchMaxDepthExceeded LaunchFileScopedTex LaunchFileScopedSurf SyncDepthExceeded LaunchPendingCountExceeded
InvalidDeviceFunction NoDevice InvalidDevice DeviceNotLicensed SoftwareValidityNotEstablished StartupFailure
InvalidKernelImage DeviceUninitialized MapBufferObjectFailed UnmapBufferObjectFailed ArrayIsMapped AlreadyMapped
NoKernelImageForDevice AlreadyAcquired NotMapped NotMappedAsArray NotMappedAsPointer ECCUncorrectable
UnsupportedLimit DeviceAlreadyInUse PeerAccessUnsupported InvalidPtx InvalidGraphicsContext NvlinkUncorrectable
JitCompilerNotFound UnsupportedPtxVersion JitCompilationDisabled UnsupportedExecAffinity UnsupportedDevSideSync
Contained InvalidSource FileNotFound SharedObjectSymbolNotFound SharedObjectInitFailed OperatingSystem
InvalidResourceHandle IllegalState LossyQuery SymbolNotFound NotReady IllegalAddress LaunchOutOfResources
LaunchTimeout LaunchIncompatibleTexturing PeerAccessAlreadyEnabled PeerAccessNotEnabled SetOnActiveProcess
ContextIsDestroyed Assert TooManyPeers HostMemoryAlreadyRegistered HostMemoryNotRegistered HardwareStackError
IllegalInstruction MisalignedAddress InvalidAddressSpace InvalidPc LaunchFailure CooperativeLaunchTooLarge
TensorMemoryLeak NotPermitted NotSupported SystemNotReady SystemDriverMismatch CompatNotSupportedOnDevice
MpsConnectionFailed MpsRpcFailure MpsServerNotReady MpsMaxClientsReached MpsMaxConnectionsReached
MpsClientTerminated CdpNotSupported CdpVersionMismatch StreamCaptureUnsupported StreamCaptureInvalidated
StreamCaptureMerge StreamCaptureUnmatched StreamCaptureUnjoined StreamCaptureIsolation StreamCaptureImplicit
CapturedEvent StreamCaptureWrongThread Timeout GraphExecUpdateFailure ExternalDevice InvalidClusterSize
FunctionNotLoaded InvalidResourceType InvalidResourceConfiguration Unknown
"""
CUDA_ERROR_T = _CUDA_ERROR_T_NAMES.split()

#: Read by name by an earlier entry (default.yaml, fabric.yaml), with their sentences.
DECIDED_IN_DEFAULT = {"MemoryAllocation", "InsufficientDriver", "DevicesUnavailable", "ECCUncorrectable",
                      "PeerAccessUnsupported", "NvlinkUncorrectable", "Contained", "IllegalAddress", "LaunchTimeout",
                      "HardwareStackError", "InvalidAddressSpace", "InvalidPc", "LaunchFailure",
                      "SystemDriverMismatch", "CompatNotSupportedOnDevice", "Unknown",
                      "SystemNotReady"}  # (fabric.yaml: Fabric Manager down)
#: Read by default.yaml by their sentence only ("misaligned address", "an illegal instruction
#: was encountered", "device-side assert triggered"): a bare name of them stays unclaimed.
BY_SENTENCE_IN_DEFAULT = {"MisalignedAddress", "IllegalInstruction", "Assert"}


def test_every_cuda_error_t_has_one_owner() -> None:
    name_entries = [s for s in SIGNATURES if s.codes and s.pattern.startswith(r"\b(?:cudaError|CUDA_ERROR_)")]
    assert {s.id for s in name_entries} == {"cuda-build-mismatch", "cuda-driver-too-old", "cuda-call-refused",
                                            "cuda-node-setup", "cuda-error-unclear"}
    owners: dict[str, list[str]] = {}
    for s in name_entries:
        for c in s.codes:
            owners.setdefault(c, []).append(s.id)
    assert all(len(ids) == 1 for ids in owners.values()), {c: i for c, i in owners.items() if len(i) > 1}
    for name in CUDA_ERROR_T:
        line = f"call returned cudaError{name}"
        m = MATCHER.match_line(line)
        if name in BY_SENTENCE_IN_DEFAULT:
            assert name not in owners
            continue
        assert m is not None, name
        if name in DECIDED_IN_DEFAULT:
            # an earlier entry or default.yaml's reads it; no name entry of cuda.yaml lists it
            assert name not in owners and m.signature.id not in {s.id for s in name_entries}, name
        elif name == "InvalidDevice":
            assert m.signature.id == "cuda-invalid-device-ordinal"
        else:
            assert owners.get(name) == [m.signature.id], (name, m.signature.id)


def test_every_math_library_status_has_one_entry() -> None:
    # cufft.h, curand.h, cusparse.h, cusolver_common.h: every status but SUCCESS is in exactly one entry
    statuses = {
        "CUFFT_": "INVALID_PLAN ALLOC_FAILED INVALID_TYPE INVALID_VALUE INTERNAL_ERROR EXEC_FAILED SETUP_FAILED "
                  "INVALID_SIZE UNALIGNED_DATA INCOMPLETE_PARAMETER_LIST INVALID_DEVICE PARSE_ERROR NO_WORKSPACE "
                  "NOT_IMPLEMENTED LICENSE_ERROR NOT_SUPPORTED",
        "CURAND_STATUS_": "VERSION_MISMATCH NOT_INITIALIZED ALLOCATION_FAILED TYPE_ERROR OUT_OF_RANGE LENGTH_NOT_MULTIPLE "
                          "DOUBLE_PRECISION_REQUIRED LAUNCH_FAILURE PREEXISTING_FAILURE INITIALIZATION_FAILED "
                          "ARCH_MISMATCH INTERNAL_ERROR",
        "CUSPARSE_STATUS_": "NOT_INITIALIZED ALLOC_FAILED INVALID_VALUE ARCH_MISMATCH MAPPING_ERROR EXECUTION_FAILED "
                            "INTERNAL_ERROR MATRIX_TYPE_NOT_SUPPORTED ZERO_PIVOT NOT_SUPPORTED INSUFFICIENT_RESOURCES",
        "CUSOLVER_STATUS_": "NOT_INITIALIZED ALLOC_FAILED INVALID_VALUE ARCH_MISMATCH MAPPING_ERROR EXECUTION_FAILED "
                            "INTERNAL_ERROR MATRIX_TYPE_NOT_SUPPORTED NOT_SUPPORTED ZERO_PIVOT INVALID_LICENSE",
    }
    entries = [s for s in SIGNATURES if s.id.startswith("cuda-math-library-") and s.codes]
    for prefix, names in statuses.items():
        for name in names.split():
            code = prefix + name
            holders = [s.id for s in entries if code in s.codes]
            assert len(holders) == 1, (code, holders)
            m = MATCHER.match_line(f"RuntimeError: library error: {code}")
            assert m is not None and m.signature.id == holders[0], (code, m and m.signature.id)


def test_new_signatures_record_their_source_and_are_linear() -> None:
    ids = [s.id for s in SIGNATURES]
    for s in SIGNATURES:
        if s.id.startswith(("cuda-build", "cuda-driver-too-old", "cuda-call-refused", "cuda-invalid-device",
                            "cuda-node-setup", "cuda-error-unclear", "cuda-math-library", "nvrtc-", "paddle-")):
            assert s.source, s.id
            # before the general catalog's generic exception rule, which would take their lines
            assert ids.index(s.id) < ids.index("python-exception"), s.id
            re.compile(s.pattern)
