"""Round-6c open-world vocabularies (training frameworks and runtimes): the launchers' reports of a
worker ended by a signal (DeepSpeed's launcher, torch.multiprocessing.spawn, CPython's
CalledProcessError, bash's job notice) read by the signal, the failure signal handler of JAX / XLA /
libtpu (abseil, glog), numpy's host-memory error, torch's CUDA start-up "unknown error", Triton's
OutOfResources, vLLM's engine-dead reports and Python exceptions named by their errors module.

Lines written for this test in each producer's wording (its source, named in the catalogs'
``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence); a symptom alone is unknown/low
CASES = [
    # DeepSpeed's launcher: Python's negative return code is the signal
    ("[2026-02-03 11:24:51,090] [ERROR] [launch.py:325:sigkill_handler] ['/opt/venv/bin/python', '-u', "
     "'pretrain.py', '--local_rank=1'] exits with return code = -9", "launcher-child-killed", "unknown", "low"),
    ("[2026-02-03 11:24:51,090] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'pretrain.py'] "
     "exits with return code = -7", "launcher-child-bus-error", "job", "low"),
    ("[2026-02-03 11:24:51,090] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'pretrain.py'] "
     "exits with return code = -11", "launcher-child-native-crash", "job", "low"),
    ("[2026-02-03 11:24:51,090] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'pretrain.py'] "
     "exits with return code = -15", "launcher-child-terminated", "unknown", "low"),
    ("[2026-02-03 11:24:51,090] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'pretrain.py'] "
     "exits with return code = 1", "launcher-child-exit-code", "unknown", "low"),
    # torch.multiprocessing.spawn, now and in torch 1.x
    ("torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal SIGKILL",
     "launcher-child-killed", "unknown", "low"),
    ("Exception: process 0 terminated with signal SIGKILL", "launcher-child-killed", "unknown", "low"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGABRT",
     "launcher-child-aborted", "unknown", "low"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 1",
     "launcher-child-exit-code", "unknown", "low"),
    # CPython's CalledProcessError (DeepSpeed's runner re-raises it) and bash's job notice
    ("subprocess.CalledProcessError: Command '['/opt/venv/bin/python', '-u', 'pretrain.py']' died with "
     "<Signals.SIGKILL: 9>.", "launcher-child-killed", "unknown", "low"),
    ("subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGHUP: 1>.",
     "launcher-child-terminated", "unknown", "low"),
    ("./run_pretrain.sh: line 42: 88120 Killed                  python train.py --cfg a.yaml",
     "launcher-child-killed", "unknown", "low"),
    ("./run_pretrain.sh: line 42: 88120 Bus error               (core dumped) python train.py",
     "launcher-child-bus-error", "job", "low"),
    # the failure signal handler of JAX / XLA / libtpu (abseil; glog and Google's own)
    ("*** SIGSEGV received at time=1770110063 on cpu 17 ***", "native-crash-signal-handler", "job", "medium"),
    ("*** SIGILL (@0x7f8c21a3b1c2) received by PID 5512 (TID 5512) on cpu 2; stack trace: ***",
     "native-crash-signal-handler", "job", "medium"),
    # numpy: host memory, not GPU memory
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 214. GiB for an array with shape "
     "(1874012, 15360) and data type int64", "host-memory-exhausted", "job", "high"),
    # torch's start-up wording of cudaErrorUnknown: the node's driver
    ("RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env "
     "variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.",
     "cuda-unknown-error", "infra", "low"),
    # Triton: a kernel config too large for the GPU
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 196608, Hardware limit: "
     "101376. Reducing block sizes or `num_stages` may help.", "triton-out-of-resources", "job", "medium"),
    # vLLM's client: a consequence
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
     "root cause.", "vllm-engine-dead", "unknown", "low"),
    ("ERROR 02-03 10:02:12 [core_client.py:590] Engine core proc EngineCore_DP0 died unexpectedly, shutting down "
     "client.", "vllm-engine-dead", "unknown", "low"),
    # exceptions named by their errors module, whatever their class name ends in
    ("[rank1]: torch._dynamo.exc.Unsupported: Data-dependent branching", "python-exception-qualified", "job",
     "medium"),
    ("google.api_core.exceptions.NotFound: 404 Requested entity was not found.",
     "python-exception-qualified", "job", "medium"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round6c_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # a subprocess that returned an error code is not a launcher's worker report (a build step, a tool)
        "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.",
        # a traceback frame's ", line N," is not bash's job notice
        '  File "/work/train.py", line 42, in <module> Killed',
        # prose about signals
        "note: the process was terminated with signals disabled",
        # a dotted name that is not an exception
        "loading module torch._dynamo.exc.Unsupported from cache",
    ],
)
def test_lines_that_are_not_the_new_families(line: str) -> None:
    match = MATCHER.match_line(line)
    new = {"launcher-child-killed", "launcher-child-aborted", "launcher-child-terminated",
           "launcher-child-bus-error", "launcher-child-native-crash", "launcher-child-exit-code",
           "python-exception-qualified"}
    assert match is None or match.signature.id not in new, match and match.signature.id


def test_spawn_sigkill_is_no_longer_a_confident_job_fault() -> None:
    # before round 6c the spawn exception read as a Python exception of the job (job/medium)
    text = ("Traceback (most recent call last):\n"
            "  File \"/work/train_ddp.py\", line 210, in <module>\n"
            "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL\n")
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("unknown", "low")


def test_the_engine_cause_outweighs_the_engine_dead_report() -> None:
    text = (
        "(EngineCore_DP0 pid=5120) ERROR 02-03 10:02:11 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 3.50 GiB.\n"
        "(TaskRunner pid=4410) ERROR 02-03 10:02:11 [async_llm.py:420] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("job", "high")
    assert v.root_cause is not None and v.root_cause.signature.id == "cuda-oom"


def test_a_launcher_sigkill_after_the_oom_killer_is_the_job() -> None:
    # the launcher's SIGKILL report is the consequence; the kernel's OOM-killer line decides
    text = (
        "[Tue Feb  3 11:24:50 2026] Out of memory: Killed process 7713 (python) total-vm:912344120kB, "
        "anon-rss:501223312kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:990112kB oom_score_adj:0\n"
        "[2026-02-03 11:24:51,090] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'pretrain.py'] "
        "exits with return code = -9\n"
    )
    v = verdict_of(text)
    assert v.category == "job"
    assert v.root_cause is not None and v.root_cause.signature.id != "launcher-child-killed"


def test_new_signatures_record_their_source_and_order() -> None:
    ids = [s.id for s in SIGNATURES]
    for sig_id in ("launcher-child-killed", "launcher-child-aborted", "launcher-child-terminated",
                   "launcher-child-bus-error", "launcher-child-native-crash", "launcher-child-exit-code",
                   "native-crash-signal-handler", "triton-out-of-resources", "vllm-engine-dead",
                   "python-exception-qualified", "cuda-unknown-error"):
        sig = next(s for s in SIGNATURES if s.id == sig_id)
        assert sig.source, sig_id
    # the launchers' reports come before the generic Python exception rules that used to take them
    assert ids.index("launcher-child-killed") < ids.index("python-exception")
    # after python-exception: a class name ending in Error or Exception stays its own
    assert ids.index("python-exception") < ids.index("python-exception-qualified")
    m = MATCHER.match_line("botocore.exceptions.ClientError: An error occurred (ValidationException) when calling "
                           "the CreateJob operation: 1 validation error detected")
    assert m is not None and m.signature.id == "python-exception"
