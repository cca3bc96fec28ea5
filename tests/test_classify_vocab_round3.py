"""Round-3 open-world vocabularies: HTCondor hold codes, Flux exceptions, NVML init errors,
cuDNN/cuBLAS status codes, CUDA containment and P2P, the kernel's AER recovery on a GPU,
Determined's FailureType, Azure ML preemption and torch's checkpoint container.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence)
CASES = [
    ("\tCode 34 Subcode 0", "htcondor-hold-resources", "job", "high"),
    ("HoldReasonCode = 46", "htcondor-hold-time-limit", "preemption", "high"),
    ("\tCode 1 Subcode 0", "htcondor-hold-user", "preemption", "medium"),
    ("\tCode 13 Subcode 110", "htcondor-hold-node", "infra", "low"),
    ("Error from slot1_2@gpu-h3.example.org: Job has gone over memory limit of 8192 megabytes. Peak usage: 8301 megabytes.",
     "htcondor-memory-limit", "job", "high"),
    ("12.004s: job.exception type=timeout severity=0 resource allocation expired", "flux-exception-time-limit",
     "preemption", "high"),
    ("3.1s: job.exception type=cancel severity=0 Canceled by user", "flux-exception-cancel", "preemption", "medium"),
    ("fA1b2C3d4  node-failure  node failure on ruby22 (shell rank 5)", "flux-node-failure", "infra", "high"),
    ("Failed to initialize NVML: Driver/library version mismatch", "nvml-init-node-fault", "infra", "medium"),
    ("nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown", "nvml-init-node-fault",
     "infra", "medium"),
    ("Failed to initialize NVML: Unknown Error", "nvml-init-unclear", "infra", "low"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", "cudnn-cublas-unsupported", "job", "medium"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER", "cudnn-driver-incompatible",
     "infra", "medium"),
    ("[rank3]: torch.AcceleratorError: CUDA error: Invalid access of peer GPU memory over nvlink or a hardware error",
     "cuda-contained", "infra", "medium"),
    ("host-a:1:2 [0] transport/p2p.cc:275 NCCL WARN failed to open CUDA IPC handle : 217 peer access is not supported "
     "between these two devices", "cuda-peer-access-unsupported", "job", "medium"),
    ("ERROR: Trial 3 (Experiment 9) was terminated: allocation failed due to agent failure: agent failed while the "
     "container was running: agent closed with allocated containers", "determined-agent-lost", "infra", "medium"),
    ("UserError: AzureMLCompute job failed. PreemptionError: Nodes of this job got pre-empted.",
     "azureml-preemption-error", "preemption", "high"),
    ("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
     "torch-checkpoint-corrupt", "job", "medium"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round3_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb)`",
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "RuntimeError: [enforce fail at inline_container.cc:857] . PytorchStreamWriter failed writing file data/7: "
        "file write failed",
    ],
)
def test_ambiguous_library_failures_are_never_confident(line: str) -> None:
    v = verdict_of(line + "\n")
    assert v.category == "unknown" or v.confidence == "low", (v.category, v.confidence)


def test_htcondor_hold_codes_are_covered_once_each() -> None:
    seen: dict[str, str] = {}
    for sig in SIGNATURES:
        if sig.id.startswith("htcondor-hold-"):
            for code in sig.codes:
                assert code not in seen, (code, seen.get(code), sig.id)
                seen[code] = sig.id
    # condor_holdcodes.h: CONDOR_HOLD_CODE 0 (Unspecified) .. 48 (HookShadowPrepareJobFailure)
    assert set(seen) == {str(i) for i in range(49)}


def test_library_status_vocabularies_do_not_overlap() -> None:
    seen: dict[str, str] = {}
    for sig in SIGNATURES:
        if sig.id.startswith(("cudnn-", "nvml-init-", "determined-")):
            for code in sig.codes:
                assert code not in seen, (code, seen.get(code), sig.id)
                seen[code] = sig.id
    assert "CUBLAS_STATUS_ALLOC_FAILED" not in seen  # cuda-oom reads it
    assert MATCHER.match_line("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`").signature.id == "cuda-oom"


def test_aer_on_a_gpu_names_the_gpu_and_outweighs_the_mmu_fault_it_causes() -> None:
    text = (
        "Aug 21 13:05:44 gpu-r22 kernel: pcieport 0000:b0:01.0: AER: Uncorrectable (Non-Fatal) error message received "
        "from 0000:b1:00.0\n"
        "Aug 21 13:05:44 gpu-r22 kernel: nvidia 0000:b1:00.0: AER: can't recover (no error_detected callback)\n"
        "Aug 21 13:05:47 gpu-r22 kernel: NVRM: Xid (PCI:0000:b1:00): 31, pid=88213, name=python3, Ch 00000008, "
        "intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f1e_4a200000.\n"
    )
    v = verdict_of(text, file="kern.log")
    assert (v.category, v.confidence) == ("infra", "high")
    assert v.root_cause is not None and v.root_cause.signature.id == "pcie-gpu-unrecovered"
    assert "gpu-r22" in v.hosts
    assert any("b1:00" in str(g) for g in v.gpus)


def test_aer_on_another_device_names_no_gpu() -> None:
    line = "Aug 21 13:05:44 gpu-r22 kernel: snd_hda_intel 0000:b1:00.1: AER: can't recover (no error_detected callback)"
    match = MATCHER.match_line(line)
    assert match is None or match.signature.id != "pcie-gpu-unrecovered"
