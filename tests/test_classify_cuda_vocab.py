"""CUDA runtime, NVML and NCCL error strings: which say the node, which say the program.

Lines written for this test from the producers' documented strings (NVIDIA CUDA runtime
API: cudaError_t / cudaGetErrorString; NVML: nvmlErrorString; NCCL: ncclResult_t and
ncclGetErrorString, as older torch printed them), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import line_verdict

# (line, signature, verdict category, verdict confidence)
CASES = [
    # the node's driver does not fit the runtime: the node, weakly (the image may be the misfit)
    ("[rank0]: RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
     "cuda-driver-mismatch", "infra", "medium"),
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
     "NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / "
     "cuda driver combination", "cuda-driver-mismatch", "infra", "medium"),
    ("CUDA error: forward compatibility was attempted on non supported HW", "cuda-driver-mismatch", "infra", "medium"),
    # a GPU held by another process
    ("[rank3]: RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
     "cuda-devices-unavailable", "infra", "medium"),
    ("torch.AcceleratorError: CUDA error: all CUDA-capable devices are busy or unavailable",
     "cuda-devices-unavailable", "infra", "medium"),
    # sticky kernel exceptions: the program's kernel
    ("[rank1]: RuntimeError: CUDA error: hardware stack error", "cuda-illegal-address", "job", "high"),
    ("RuntimeError: CUDA error: invalid program counter", "cuda-illegal-address", "job", "high"),
    ("RuntimeError: CUDA error: operation not supported on global/shared address space",
     "cuda-illegal-address", "job", "high"),
    # NVML through nvidia-smi, alone: a state report, low
    ("Unable to determine the device handle for GPU 00000000:41:00.0: GPU requires reset", "gpu-lost", "infra", "low"),
    ("Unable to determine the device handle for GPU 00000000:41:00.0: Unknown Error", "gpu-handle-error", "infra", "low"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_cuda_and_nvml_strings(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id, "rank0.err")
    assert (v.category, v.confidence) == (category, confidence)
    assert v.hosts == ()  # none of these drains a node on its own


# older torch: "NCCL Error %d: %s". A system/remote error alone is NCCL's word for the
# system or the network: infra at low confidence (the WARN lines before it say which call
# failed); an internal error says nothing of where (unknown); invalid usage is the program's.
@pytest.mark.parametrize(
    ("line", "sig_id", "category"),
    [
        ("RuntimeError: NCCL Error 2: unhandled system error", "nccl-system-error", "infra"),
        ("RuntimeError: NCCL Error 3: internal error", "nccl-comm-failed", "unknown"),
        ("RuntimeError: NCCL Error 6: remote error", "nccl-system-error", "infra"),
        ("RuntimeError: NCCL Error 4: invalid argument", "nccl-invalid-usage", "job"),
        ("RuntimeError: NCCL Error 5: invalid usage", "nccl-invalid-usage", "job"),
    ],
)
def test_older_torch_nccl_error_numbers(line: str, sig_id: str, category: str) -> None:
    v = line_verdict(line, sig_id, "rank0.err")
    assert v.category == category
    if category != "job":
        assert v.confidence == "low" and v.hosts == ()  # never a drain on NCCL's word alone
