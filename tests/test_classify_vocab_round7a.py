"""Round-7a open-world vocabularies (schedulers and managed platforms): Flux's job-exception
types (both the attach shape and the eventlog shape) with the scheduler's denial note and the job
shell's start failure; the PBS / Torque server's deletion line; Grid Engine's qacct record logged
with escaped newlines; Kueue's never-fitting quota request; Azure ML's user-error codes of a failed
script.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence)
CASES = [
    # Flux: the scheduler's note decides before the exception type
    ('1.204s: job.exception type=alloc severity=0 alloc denied due to type="unsatisfiable"',
     "flux-alloc-denied-unsatisfiable", "job", "medium"),
    ('0.031s: job.exception type=alloc severity=0 alloc denied due to type="match error"',
     "flux-alloc-denied-match-error", "infra", "low"),
    # the job shell's fatal start failure is the job's command
    ("0.212s: flux-shell[3]: FATAL: task 12: start failed: pretrain.sh: Permission denied",
     "flux-shell-task-start-failed", "job", "medium"),
    # a lost job shell names its broker's node
    ("2.871s: job.exception type=exec severity=0 lost contact with job shell on broker gpu-b14 (rank 6)",
     "flux-lost-job-shell", "infra", "medium"),
    # the exception types, attach shape and eventlog shape
    ("3.004s: job.exception type=exec severity=0 task 5: exited with exit code 1",
     "flux-exception-exec", "job", "low"),
    ('[  +4.101233] exception type="prolog" severity=0 userid=0 note="prolog failed for rank 2"',
     "flux-exception-prolog", "infra", "medium"),
    ('[  +0.000412] exception type="dependency" severity=0 userid=1002 note="dependency: afterok: job f3Qx failed"',
     "flux-exception-dependency", "job", "medium"),
    ('[Jan14 03:12] exception type="cancel" severity=0 userid=1002 note="canceled by owner"',
     "flux-exception-cancel", "preemption", "medium"),
    # PBS / Torque server log: deleted by someone
    ("01/14/2026 03:12:44;0008;PBS_Server.2210;Job;8812.pbs01;Job deleted at request of root@pbs01",
     "pbs-deleted-at-request", "preemption", "low"),
    # Grid Engine's qacct record logged as one string
    (r"read: (hostname     gn-17\nqsub_time    Wed Jan 14 03:00:01 2026\nfailed       8   : in prolog\nexit_status  0)",
     "sge-failed-host", "infra", "low"),
    (r"qacct output: 'qname        gpu.q\nfailed       26  : opening output file\nexit_status  0\n'",
     "sge-failed-job-setup", "job", "medium"),
    # Kueue: a request no flavor can ever hold
    ("      assign flavors to pod set trainer: insufficient quota for nvidia.com/gpu in flavor a100, "
     "request > maximum capacity (64 > 32)", "kueue-request-never-fits", "job", "medium"),
    ("    message: 'couldn''t assign flavors to pod set main: resource example.com/tpu unavailable in ClusterQueue'",
     "kueue-request-never-fits", "job", "medium"),
    # Azure ML: the script's own failure
    ("User error:{'code': ExecutionFailed, 'message': [{\"exit_code\":2,\"error_message\":\"Execution failed with "
     "error: Traceback (most recent call last):", "azureml-user-execution-failed", "job", "low"),
    ("Run failed: AzureMLCompute job failed. JobFailed: Submitted script failed with a non-zero exit code; "
     "see the driver log file for details.", "azureml-user-execution-failed", "job", "low"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round7a_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # Kueue waiting for quota to free up is not a failure
        "    message: 'couldn''t assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "default, 4 more needed'",
        # a non-fatal (severity 1) exception ends nothing
        "job.exception type=exec severity=1 rank 3 exited and exit-timeout=30s has expired",
        # a qacct "failed" word inside prose, not a record field
        "the job failed 3 times: see the log",
        # an Azure ML code that is not a user script failure
        "AzureMLCompute job failed. ImageBuildFailure: the environment image could not be built",
    ],
)
def test_non_failures_make_no_cause(line: str) -> None:
    v = verdict_of(line + "\n")
    assert v.category == "unknown"


def test_the_note_outranks_the_exception_type() -> None:
    # the denial note, the start failure and the lost shell are read before the type vocabulary
    ids = [s.id for s in SIGNATURES]
    for specific in ("flux-alloc-denied-unsatisfiable", "flux-alloc-denied-match-error",
                     "flux-shell-task-start-failed", "flux-lost-job-shell", "flux-node-failure"):
        assert ids.index(specific) < ids.index("flux-exception-exec")
        assert ids.index(specific) < ids.index("flux-exception-alloc")
    m = MATCHER.match_line('0.040s: job.exception type=alloc severity=0 alloc denied due to type="unsatisfiable"')
    assert m is not None and m.signature.id == "flux-alloc-denied-unsatisfiable"


def test_flux_run_whose_command_is_missing() -> None:
    text = (
        "0.411s: flux-shell[0]: FATAL: task 0: start failed: torchrun: No such file or directory\n"
        "0.415s: flux-shell[1]: FATAL: task 0: start failed: torchrun: No such file or directory\n"
        "0.420s: job.exception type=exec severity=0 task 0: start failed: torchrun: No such file or directory\n"
    )
    v = verdict_of(text, "flux.out")
    assert (v.category, v.confidence) == ("job", "medium")
    assert v.root_cause is not None and v.root_cause.signature.id == "flux-shell-task-start-failed"


def test_flux_lost_shell_names_the_node_to_drain() -> None:
    text = (
        "12.02s: job.exception type=exec severity=0 lost contact with job shell on broker gpu-b14 (rank 6)\n"
        "12.04s: flux-job: task(s) exited with exit code 143\n"
    )
    v = verdict_of(text, "flux.out")
    assert v.category == "infra"
    assert v.root_cause is not None and v.root_cause.host == "gpu-b14"


def test_preemption_error_still_outranks_the_user_error_code() -> None:
    text = ("UserError: AzureMLCompute job failed. PreemptionError: Nodes of this job got pre-empted. "
            "Check if the run has failed or restarted. Reason: Received pre-emption warning signal.\n")
    v = verdict_of(text, "run.txt")
    assert v.category == "preemption"


def test_new_signatures_record_their_source() -> None:
    for sig_id in ("flux-alloc-denied-unsatisfiable", "flux-alloc-denied-match-error", "flux-shell-task-start-failed",
                   "flux-lost-job-shell", "flux-exception-exec", "flux-exception-alloc", "flux-exception-prolog",
                   "flux-exception-dependency", "pbs-deleted-at-request", "kueue-request-never-fits",
                   "azureml-user-execution-failed"):
        sig = next(s for s in SIGNATURES if s.id == sig_id)
        assert sig.source
    # every exception type the Flux core raises is in exactly one entry
    members = [c for s in SIGNATURES if s.id.startswith("flux-exception-") for c in s.codes]
    assert sorted(members) == sorted(["alloc", "cancel", "dependency", "epilog", "exec", "node-failure", "prolog",
                                      "timeout"])
