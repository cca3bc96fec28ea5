"""Round-5 open-world vocabularies: the MPI standard's argument/usage error classes as Open MPI
and MPICH (and its derivatives) print them, MPICH's OFI completion-error frame, the kernel EFA
driver's admin-command failures, old NCCL's verbs warning without an errno, Gloo's TCP transport
errors (the whole transport, widened from the closed/reset wordings), CUDA's launch timeout, the CUDA driver API's out-of-memory name and Horovod's shutdown.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from ckptctl.ops.classify_catalog import BUILTIN_CATALOGS
from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence); a symptom alone is unknown/low
CASES = [
    # Open MPI's predefined error handler: "*** MPI_ERR_<CLASS>: <text>"
    ("[n12:5521] *** MPI_ERR_COMM: invalid communicator", "mpi-usage-error-class", "job", "medium"),
    ("[n12:5521] *** MPI_ERR_TRUNCATE: message truncated", "mpi-usage-error-class", "job", "medium"),
    ("[n12:5521] *** MPI_ERR_RANK: invalid rank", "mpi-usage-error-class", "job", "medium"),
    ("[n12:5521] *** MPI_ERR_COUNT: invalid count argument", "mpi-usage-error-class", "job", "medium"),
    # MPICH's class texts, at the end of an error-stack frame or of the "Fatal error in" header
    ("MPIR_Bcast_impl(310)..........: Invalid communicator", "mpi-usage-error-class", "job", "medium"),
    ("Fatal error in PMPI_Send: Invalid rank, error stack:", "mpi-usage-error-class", "job", "medium"),
    ("MPIR_Reduce_intra_binomial(117): Message truncated", "mpi-usage-error-class", "job", "medium"),
    ("MPIR_Gather_intra(201): Invalid datatype", "mpi-usage-error-class", "job", "medium"),
    ("MPIDI_Cray_shared_mem_coll_bcast(411): message sizes do not match across processes in the collective "
     "routine: Received 8 but expected 16", "mpi-usage-error-class", "job", "medium"),
    # MPICH's OFI completion error: a symptom, never a storage failure
    ("MPIDI_OFI_handle_cq_error(1062)......: OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:"
     "Input/output error - CANCELED)", "cxi-rc-peer-gone", "unknown", "low"),
    # the kernel's EFA driver
    ("[1201.55] infiniband efa_0: Failed to process command CREATE_QP (opcode 1) comp_status 7 err -22",
     "efa-admin-command-failed", "infra", "medium"),
    ("[1201.56] infiniband efa_3: Failed to register mr [-14]", "efa-admin-command-failed", "infra", "medium"),
    # NCCL 2.8 and before: the verbs call without its errno
    ("node-4:1201:1288 [1] ibvwrap.c:106 NCCL WARN Call to ibv_reg_mr failed", "nccl-verbs-call-failed-no-errno",
     "infra", "low"),
    # Gloo's TCP transport: always a consequence
    ("  what():  [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [10.0.0.4]:41880: "
     "Connection reset by peer", "gloo-peer-closed", "unknown", "low"),
    ("  what():  [/src/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [10.3.0.12]:29400: Connection "
     "refused", "gloo-peer-closed", "unknown", "low"),
    ("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:310] Connect "
     "timeout [10.3.0.12]:31877", "gloo-peer-closed", "unknown", "low"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
     "[10.0.0.9]:11022", "gloo-peer-closed", "unknown", "low"),
    # CUDA's launch timeout in the runtime's and the driver API's names
    ("RuntimeError: CUDA error: the launch timed out and was terminated", "cuda-launch-timeout", "infra", "medium"),
    ("cudaErrorLaunchTimeout: the launch timed out and was terminated", "cuda-launch-timeout", "infra", "medium"),
    ("E1102 cuda_event.cc:48] failed to query event: CUDA_ERROR_LAUNCH_TIMEOUT", "cuda-launch-timeout", "infra",
     "medium"),
    # the driver API's name of a GPU OOM
    ("E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 1.00G (1073741824 bytes) from "
     "device: CUDA_ERROR_OUT_OF_MEMORY", "cuda-oom", "job", "high"),
    # Horovod: the others' shutdown is a consequence
    ("AbortedError: Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt "
     "to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.",
     "horovod-shut-down", "unknown", "low"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round5_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # the classes that say nothing by themselves are not read as a job fault
        "Fatal error in PMPI_Wait: Other MPI error, error stack:",
        "[n12:5521] *** MPI_ERR_OTHER: known error not in list",
        "[n12:5521] *** MPI_ERR_INTERN: internal error",
        # "Invalid argument" as an errno text is not MPI's class (MPI_ERR_ARG is read only by name)
        "MPIDI_OFI_send_normal(370)..: OFI tagged send failed (ofi_send.h:370:MPIDI_OFI_send_normal:Invalid argument)",
        # prose that mentions a class text without MPI's frame shape
        "note: Invalid communicator handles are reported by the checker",
    ],
)
def test_uninformative_mpi_lines_are_not_a_job_fault(line: str) -> None:
    match = MATCHER.match_line(line)
    assert match is None or match.signature.id != "mpi-usage-error-class"


def test_ofi_cq_error_is_not_storage() -> None:
    # before round 5 the errno text of this frame read as shared storage failing (infra/medium)
    text = (
        "Abort(2695311) (rank 4 in comm 0): Fatal error in PMPI_Allreduce: Other MPI error, error stack:\n"
        "MPIDI_OFI_handle_cq_error(1075)......: OFI poll failed (ofi_events.c:1077:MPIDI_OFI_handle_cq_error:"
        "Input/output error - CANCELED)\n"
    )
    v = verdict_of(text)
    assert v.confidence == "low"
    assert v.root_cause is None or v.root_cause.signature.id != "storage-unreachable"
    # a real storage I/O error still reads as storage
    m = MATCHER.match_line("OSError: [Errno 5] Input/output error: '/ckpt/step_100/.metadata'")
    assert m is not None and m.signature.id == "storage-unreachable"


def test_verbs_warning_with_errno_keeps_its_own_rule() -> None:
    m = MATCHER.match_line("h:1:2 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error "
                           "Network is unreachable")
    assert m is not None and m.signature.id == "nccl-verbs-call-failed"


def test_gpu_oom_outweighs_the_horovod_shutdown_it_causes() -> None:
    text = (
        "[1,2]<stderr>:E cuda_driver.cc:806] failed to allocate 2.00G (2147483648 bytes) from device: "
        "CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
        "[1,0]<stderr>:AbortedError: Horovod has been shut down. This was caused by an exception on one of the "
        "ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished "
        "execution.\n"
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("job", "high")
    assert v.root_cause is not None and v.root_cause.signature.id == "cuda-oom"


def test_mpi_catalog_is_loaded_before_the_general_one() -> None:
    assert BUILTIN_CATALOGS.index("mpi.yaml") < BUILTIN_CATALOGS.index("default.yaml")
    ids = [s.id for s in SIGNATURES]
    assert ids.index("mpich-ofi-cq-error") < ids.index("storage-unreachable")
    # every new signature records the source it was read from
    for sig_id in ("mpi-usage-error-class", "mpich-ofi-cq-error", "efa-admin-command-failed",
                   "nccl-verbs-call-failed-no-errno", "gloo-peer-closed", "cuda-launch-timeout",
                   "horovod-shut-down"):
        sig = next(s for s in SIGNATURES if s.id == sig_id)
        assert sig.source
