"""Round-7c open-world vocabularies (training frameworks and their launchers): Open MPI / PRRTE's
job-end reports (a rank ended by a signal on a named node, a non-zero exit, a lost node, the
memory sensor, launch configuration, the user's --timeout), its TCP transport's peer notice and
its fatal-signal handler; TensorFlow's OpError classes by status code; torch elastic's
rendezvous exceptions; a subprocess's negative exit status; checkpoint loading (torch's legacy
reader, safetensors' SafeTensorError variants, weights_only refusals); dynamic-loader ABI
mismatches.

Lines written for this test in each producer's wording (its source or help files, named in the
catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from ckptctl.core.classify.verdict import Verdict
from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of


def _named_hosts(v: Verdict) -> set[str]:
    """Every host the verdict names: to drain, suspected, or among its suspects."""
    return set(v.hosts) | set(v.suspect_hosts) | {s.host for s in v.suspects if s.host}

# (line, signature, verdict category, verdict confidence); a symptom alone is unknown/low
CASES = [
    # mpirun/mpiexec/prterun: the signal that ended a rank decides
    ("mpirun noticed that process rank 7 with PID 0 on node gpu-c03 exited on signal 9 (Killed).",
     "mpi-launcher-rank-killed", "unknown", "low"),
    ('mpirun noticed that job rank 2 with PID 4410 on node "gpu-c03" exited on signal 6.',
     "mpi-launcher-rank-aborted", "unknown", "low"),
    ("prterun noticed that process rank 1 with PID 881 on node gpu-c03 exited on signal 15 (Terminated).",
     "mpi-launcher-rank-terminated", "unknown", "low"),
    ("mpiexec noticed that process rank 0 with PID 17 on node gpu-c03 exited on signal 7 (Bus error).",
     "mpi-launcher-rank-bus-error", "job", "low"),
    ("mpirun noticed that process rank 4 with PID 3190 on node gpu-c03 exited on signal 11 (Segmentation fault).",
     "mpi-launcher-rank-native-crash", "job", "low"),
    # MPICH Hydra's banner and mpiexec's exit string: the same signal table
    ("=   KILLED BY SIGNAL: 9 (Killed)", "mpi-launcher-rank-killed", "unknown", "low"),
    ("=   KILLED BY SIGNAL: 11 (Segmentation fault)", "mpi-launcher-rank-native-crash", "job", "low"),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Bus error (signal 7)", "mpi-launcher-rank-bus-error",
     "job", "low"),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Terminated (signal 15)", "mpi-launcher-rank-terminated",
     "unknown", "low"),
    ("=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES", "mpi-launcher-rank-failed", "unknown", "low"),
    # the ranks' own errors ended the job: consequences
    ("mpirun detected that one or more processes exited with non-zero status, thus causing",
     "mpi-launcher-rank-failed", "unknown", "low"),
    ("Primary job  terminated normally, but 1 process returned", "mpi-launcher-rank-failed", "unknown", "low"),
    ("Child job 5 terminated normally, but 2 processes returned", "mpi-launcher-rank-failed", "unknown", "low"),
    ("mpirun has exited due to process rank 3 with PID 1201 on", "mpi-launcher-rank-failed", "unknown", "low"),
    ("A critical communication path was lost to:", "mpi-launcher-lost-node", "unknown", "low"),
    ("A process exceeded memory limits:", "mpi-launcher-memory-exceeded", "job", "medium"),
    ("mpirun was unable to find the specified executable file, and therefore", "mpi-launcher-launch-config",
     "job", "medium"),
    ('mpirun could not find the executable "pretrain".', "mpi-launcher-launch-config", "job", "medium"),
    ("The user-provided time limit for job execution has been reached:", "mpi-launcher-timeout",
     "preemption", "medium"),
    ("An MPI communication peer process has unexpectedly disconnected.  This", "mpi-peer-hung-up",
     "unknown", "low"),
    ("[gpu-c03:20117] Signal: Segmentation fault (11)", "mpi-signal-handler-native-crash", "job", "low"),
    ("[gpu-c03:20117] Signal: Floating point exception (8)", "mpi-signal-handler-native-crash", "job", "low"),
    # TensorFlow: the class is the status code
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: Incompatible shapes: [8,3] vs. [4,3]",
     "tf-op-error-job", "job", "medium"),
    ("tensorflow.python.framework.errors_impl.NotFoundError: /data/shards/train-00017; No such file or directory",
     "tf-op-error-job", "job", "medium"),
    ("tensorflow.python.framework.errors_impl.UnavailableError: Socket closed", "tf-op-error-peer",
     "unknown", "low"),
    ("tf.errors.DeadlineExceededError: Deadline Exceeded", "tf-op-error-peer", "unknown", "low"),
    ("ERROR:tensorflow:/job:worker/task:1 encountered the following error when processing closure: "
     "AbortedError():Graph execution error:", "tf-op-error-peer", "unknown", "low"),
    ("tensorflow.python.framework.errors_impl.DataLossError: truncated record at 88213", "tf-op-error-unclear",
     "unknown", "low"),
    # torchrun's rendezvous
    ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", "torchelastic-rendezvous-failed",
     "unknown", "low"),
    ('    "message": "RendezvousTimeoutError: ",', "torchelastic-rendezvous-failed", "unknown", "low"),
    # a raw negative returncode is a signal
    ("subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status -11.",
     "launcher-child-native-crash", "job", "low"),
    ("subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status -9.",
     "launcher-child-killed", "unknown", "low"),
    # checkpoint loading
    ("RuntimeError: unexpected EOF, expected 5521 more bytes. The file might be corrupted.",
     "torch-checkpoint-corrupt", "job", "medium"),
    ("safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge",
     "safetensors-file-corrupt", "job", "medium"),
    ("safetensors_rust.SafetensorError: Error while deserializing header: InvalidHeaderDeserialization",
     "safetensors-file-corrupt", "job", "medium"),
    ("_pickle.UnpicklingError: Weights only load failed. Re-running `torch.load` with `weights_only` set to "
     "`False` will likely succeed", "torch-load-weights-only", "job", "medium"),
    # CPython's faulthandler: the signal decides; its watchdog says a process hung
    ("Fatal Python error: Segmentation fault", "faulthandler-fatal-native", "job", "medium"),
    ("Fatal Python error: Illegal instruction", "faulthandler-fatal-native", "job", "medium"),
    ("Fatal Python error: Bus error", "faulthandler-fatal-bus-error", "job", "low"),
    ("(TrainWorker[rank=3] pid=8812, ip=10.0.0.9) Fatal Python error: Aborted", "faulthandler-fatal-abort",
     "unknown", "low"),
    ("Timeout (0:20:00)!", "faulthandler-hang-timeout", "unknown", "low"),
    # libstdc++'s terminate handler, all three wordings: an abort, a consequence
    ("terminate called without an active exception", "rank-sigabrt", "unknown", "low"),
    ("terminate called recursively", "rank-sigabrt", "unknown", "low"),
    # a SIGTERM ignored so that the job requeues itself: the scheduler's stop
    ("Bypassing SIGTERM.", "sigterm-bypassed-for-requeue", "unknown", "low"),
    # c10d's store-based barrier: the ranks that never joined are the question
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 12, for key: "
     "store_based_barrier_key:1 (world_size=64, worker_count=63, timeout=0:30:00)", "dist-store-error", "unknown",
     "low"),
    # Lightning stopped by an interrupt from outside
    ("Detected KeyboardInterrupt, attempting graceful shutdown ...", "lightning-keyboard-interrupt", "unknown",
     "low"),
    # the dynamic loader
    ("ImportError: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by /opt/v/lib/ext.so)",
     "dynamic-loader-abi-mismatch", "job", "medium"),
    ("ImportError: /opt/v/lib/python3.11/site-packages/ext/_C.so: undefined symbol: _ZN2at4_ops5zeros4callEv",
     "dynamic-loader-abi-mismatch", "job", "medium"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round7c_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    ("line", "not_sig"),
    [
        # a signal the launcher table does not list (SIGUSR1) is no verdict of its own
        ("mpirun noticed that process rank 1 with PID 55 on node gpu-c03 exited on signal 10 (User defined signal 1).",
         "mpi-launcher-rank-killed"),
        # prose about a signal line, not Open MPI's handler shape
        ("the handler printed Signal: Segmentation fault (11) and more text after it", "mpi-signal-handler-native-crash"),
        # an unqualified InternalError is any library's (psycopg2, sqlalchemy): not read as TensorFlow's
        ("psycopg2.errors.InternalError: current transaction is aborted", "tf-op-error-unclear"),
        # ResourceExhausted is left to the memory entries
        ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: failed to allocate 2.0GiB",
         "tf-op-error-job"),
        # the safetensors storage variant is not a damaged file
        ("safetensors_rust.SafetensorError: Error while deserializing header: IoError(Os { code: 5 })",
         "safetensors-file-corrupt"),
        # a missing library is not an ABI mismatch (a missing libcuda is a node without its driver)
        ("ImportError: libcuda.so.1: cannot open shared object file: No such file or directory",
         "dynamic-loader-abi-mismatch"),
        # faulthandler's timeout line only in its own shape, not inside prose
        ("the step took longer than the Timeout (0:30:00)! set by the user", "faulthandler-hang-timeout"),
        # a spare node leaving the rendezvous is no failure
        ("torch.distributed.elastic.rendezvous.api.RendezvousGracefulExitError: not in the rendezvous",
         "torchelastic-rendezvous-failed"),
    ],
)
def test_lines_outside_the_vocabulary(line: str, not_sig: str) -> None:
    m = MATCHER.match_line(line)
    assert m is None or m.signature.id != not_sig


@pytest.mark.parametrize(
    "line",
    [
        "torch.distributed.elastic.rendezvous.api.RendezvousGracefulExitError",
        "Fatal Python error: _enter_buffered_busy: could not acquire lock for <_io.BufferedWriter name='<stderr>'> "
        "at interpreter shutdown, possibly due to daemon threads",
    ],
)
def test_benign_endings(line: str) -> None:
    m = MATCHER.match_line(line)
    assert m is not None and m.signature.role == "benign"


def test_faulthandler_signals_are_whole() -> None:
    # the five signals faulthandler handles, each in exactly one entry
    codes = [c for s in SIGNATURES if s.id.startswith("faulthandler-fatal-") for c in s.codes]
    assert sorted(codes) == sorted(
        ["Segmentation fault", "Bus error", "Illegal instruction", "Floating point exception", "Aborted"])


def test_killed_rank_names_its_node() -> None:
    text = (
        "Primary job  terminated normally, but 1 process returned\n"
        "a non-zero exit code. Per user-direction, the job has been aborted.\n"
        "mpirun noticed that process rank 12 with PID 0 on node gpu-r4n09 exited on signal 9 (Killed).\n"
    )
    v = verdict_of(text, "mpirun.log")
    assert v.confidence == "low"
    assert "gpu-r4n09" in _named_hosts(v)


def test_hydra_banner_names_the_node_of_the_killed_rank() -> None:
    text = (
        "===================================================================================\n"
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
        "=   RANK 3 PID 7720 RUNNING AT gpu-h11\n"
        "=   KILLED BY SIGNAL: 9 (Killed)\n"
        "===================================================================================\n"
    )
    v = verdict_of(text, "mpiexec.log")
    assert v.confidence == "low"
    assert "gpu-h11" in _named_hosts(v)


def test_hydra_exit_code_is_not_read_as_a_signal() -> None:
    # Hydra's "EXIT CODE: N" is a raw wait status or an exit value: no signal entry reads it
    m = MATCHER.match_line("=   EXIT CODE: 9")
    assert m is None or not m.signature.id.startswith("mpi-launcher-rank-")


def test_peer_hung_up_names_the_peer_host() -> None:
    text = (
        "An MPI communication peer process has unexpectedly disconnected.  This\n"
        "usually indicates a failure in the peer process (e.g., a crash or\n"
        "  Local host: gpu-r2n01\n"
        "  Local PID:  20417\n"
        "  Peer host:  gpu-r2n05\n"
    )
    v = verdict_of(text, "rank0.log")
    assert (v.category, v.confidence) == ("unknown", "low")
    assert "gpu-r2n05" in _named_hosts(v)
    assert "gpu-r2n01" not in _named_hosts(v)


def test_rank_traceback_decides_over_the_launchers_report() -> None:
    text = (
        "[1,2]<stderr>:ValueError: sequence of length 4097 is longer than pad_to=4096\n"
        "Primary job  terminated normally, but 1 process returned\n"
        "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
        "mpirun noticed that process rank 0 with PID 311 on node gpu-c03 exited on signal 15 (Terminated).\n"
    )
    v = verdict_of(text, "mpirun.log")
    assert (v.category, v.confidence) == ("job", "medium")


def test_a_failed_subprocess_is_a_consequence_its_own_error_decides() -> None:
    # CalledProcessError says a child failed (as ChildFailedError does): alone it is a symptom ...
    line = "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1."
    m = MATCHER.match_line(line)
    assert m is not None and m.signature.id == "python-exception-symptom"
    assert (verdict_of(line + "\n").category, verdict_of(line + "\n").confidence) == ("unknown", "low")
    # ... and the error the job raised about it decides
    v = verdict_of(line + "\nRuntimeError: Error building extension 'fused_adam'\n")
    assert (v.category, v.confidence) == ("job", "medium")


def test_tf_classes_and_safetensors_variants_are_whole() -> None:
    # every OpError subclass of errors_impl.py but ResourceExhausted is in exactly one entry
    tf = [c for s in SIGNATURES if s.id.startswith("tf-op-error-") for c in s.codes]
    assert sorted(tf) == sorted(
        ["Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
         "PermissionDenied", "Unauthenticated", "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented",
         "Internal", "Unavailable", "DataLoss"])
    # safetensors: all SafeTensorError variants but the storage's (IoError) and a name mismatch
    st = next(s for s in SIGNATURES if s.id == "safetensors-file-corrupt").codes
    assert set(st) | {"IoError", "TensorNotFound"} == {
        "InvalidHeader", "InvalidHeaderStart", "InvalidHeaderDeserialization", "HeaderTooLarge", "HeaderTooSmall",
        "InvalidHeaderLength", "TensorNotFound", "TensorInvalidInfo", "InvalidOffset", "IoError", "JsonError",
        "InvalidTensorView", "MetadataIncompleteBuffer", "ValidationOverflow", "MisalignedSlice"}
    # the launcher's signal table: each signal in at most one entry
    sigs = [c for s in SIGNATURES if s.id.startswith("mpi-launcher-rank-") for c in s.codes]
    assert len(sigs) == len(set(sigs)) and {"9", "6", "15", "7", "11"} <= set(sigs)


def test_new_signatures_record_their_source() -> None:
    for sig_id in ("mpi-launcher-rank-killed", "mpi-launcher-rank-failed", "mpi-launcher-lost-node",
                   "mpi-launcher-memory-exceeded", "mpi-launcher-launch-config", "mpi-launcher-timeout",
                   "mpi-peer-hung-up", "mpi-signal-handler-native-crash", "mpi-hydra-running-at", "tf-op-error-job", "tf-op-error-peer",
                   "tf-op-error-unclear", "torchelastic-rendezvous-failed", "torchelastic-rendezvous-graceful-exit",
                   "safetensors-file-corrupt", "torch-load-weights-only", "dynamic-loader-abi-mismatch",
                   "faulthandler-fatal-native", "faulthandler-fatal-bus-error", "faulthandler-fatal-abort",
                   "faulthandler-hang-timeout", "python-fatal-at-shutdown", "lightning-keyboard-interrupt",
                   "sigterm-bypassed-for-requeue"):
        sig = next(s for s in SIGNATURES if s.id == sig_id)
        assert sig.source
