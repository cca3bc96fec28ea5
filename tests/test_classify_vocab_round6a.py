"""Round-6a open-world vocabularies (schedulers): slurmstepd's execve of the batch script slurmd
spooled on the node (a node fault) against the job's own command (a job fault); Slurm's per-job
namespace (job_container/tmpfs, namespace/linux) failing on the node; Torque's job-mail sentences
(read instead of its exit statuses, whose numbers mean other things in OpenPBS) and Moab's
node-failure preemption; HTCondor's user-log event numbers and the OSPool memory hold policy.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence); a symptom alone is unknown/low
CASES = [
    # slurmstepd: the spooled batch script (SlurmdSpoolDir/job%05u/slurm_script) is the node's
    ("slurmstepd: error: execve(): /var/spool/slurmd/job00412/slurm_script: No such file or directory",
     "slurmstepd-exec-batch-script", "infra", "medium"),
    ("slurmstepd: error: execve(): /tmp/slurmd/job88120/slurm_script: Stale file handle",
     "slurmstepd-exec-batch-script", "infra", "medium"),
    # ... any other program is the job's command
    ("slurmstepd: error: execve(): python3.11: No such file or directory", "slurmstepd-exec-command", "job", "medium"),
    ("slurmstepd: error: execve(): ./run_pretrain.sh: Permission denied", "slurmstepd-exec-command", "job", "medium"),
    ("slurmstepd: error: execve(): bad interpreter(/usr/bin/env pythn): No such file or directory",
     "slurmstepd-exec-command", "job", "medium"),
    ("slurmstepd: error: execve(): /home/u/bin/trainer: Exec format error", "slurmstepd-exec-command", "job",
     "medium"),
    # the job's private namespace on the node, old and new names
    ("slurmstepd: error: container_p_join: open failed /local/tmpfs/5521/.active: No such file or directory",
     "slurm-job-container-failed", "infra", "medium"),
    ("slurmstepd: error: container_g_join failed: 5521", "slurm-job-container-failed", "infra", "medium"),
    ("slurmstepd: error: namespace_g_join(StepId=5521.0): Permission denied", "slurm-job-namespace-failed",
     "infra", "medium"),
    # Torque's job mail: the sentence, not the number
    ("Job exceeded its walltime limit. Job was aborted", "torque-mail-walltime", "preemption", "high"),
    ("Job exceeded its cpu time limit. Job was aborted", "torque-mail-walltime", "preemption", "high"),
    ("Job exceeded a memory resource limit (vmem, pvmem, etc.). Job was aborted", "torque-mail-memory", "job",
     "high"),
    ("Job cannot be executed", "torque-mail-cannot-execute", "infra", "low"),
    # Moab's preemption of a job whose node failed
    ("job preempted (node failure)", "moab-preempted-node-failure", "infra", "high"),
    # the OSPool's periodic memory hold
    ("Hold reason: Job in status 2 put on hold by SYSTEM_PERIODIC_HOLD due to memory usage 3100000.",
     "htcondor-policy-hold-memory", "job", "medium"),
    ("Error from slot1_4@wn-0412.example.org: memory usage exceeded request_memory",
     "htcondor-policy-memory-request", "job", "medium"),
    # HTCondor's user-log event numbers
    ("004 (771.000.000) 03/02 11:04:19 Job was evicted.", "htcondor-event-evicted", "preemption", "medium"),
    ("024 (771.000.000) 2026-03-02 11:04:19 Job reconnection failed", "htcondor-event-evicted", "preemption",
     "medium"),
    ("002 (771.000.000) 03/02 11:04:19 (1) Job file not executable.", "htcondor-event-failure", "job", "medium"),
    ("007 (771.000.000) 03/02 11:04:19 Shadow exception!", "htcondor-event-pool-error", "infra", "low"),
    ("012 (771.000.000) 03/02 11:04:19 Job was held.", "htcondor-event-stopped", "unknown", "low"),
    ("022 (771.000.000) 03/02 11:04:19 Job disconnected, attempting to reconnect", "htcondor-event-stopped",
     "unknown", "low"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round6a_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # benign user-log events say nothing failed
        "001 (771.000.000) 03/02 11:04:19 Job executing on host: <10.0.0.4:9618>",
        "005 (771.000.000) 03/02 11:04:19 Job terminated.",
        "023 (771.000.000) 03/02 11:04:19 Job reconnected to slot1@wn-0412.example.org",
        # a three-digit number in parentheses that is not a user-log header
        "004 (see note 3) 03/02 11:04:19 Job was evicted.",
        # a hold for something else than memory is not the memory policy
        "Hold reason: Job in status 2 put on hold by SYSTEM_PERIODIC_HOLD due to wall time.",
        # prose about execve without slurmstepd's "execve(): " shape
        "note: execve failed because the file was missing",
    ],
)
def test_non_failures_make_no_cause(line: str) -> None:
    v = verdict_of(line + "\n")
    assert v.category == "unknown"


def test_spool_script_outranks_the_command_rule() -> None:
    # the batch script in slurmd's spool is read as the node's, though the command rule matches its shape too
    ids = [s.id for s in SIGNATURES]
    assert ids.index("slurmstepd-exec-batch-script") < ids.index("slurmstepd-exec-command")
    m = MATCHER.match_line("slurmstepd: error: execve(): /var/spool/slurm/d/job12345/slurm_script: "
                           "No such file or directory")
    assert m is not None and m.signature.id == "slurmstepd-exec-batch-script"


def test_torque_mail_names_its_exec_host() -> None:
    text = (
        "PBS Job Id: 5120.head.cluster\n"
        "Job Name:   pretrain\n"
        "Exec host:  gpu-a07/3\n"
        "job deleted\n"
        "Job deleted at request of root@head.cluster\n"
        "job preempted (node failure)\n"
    )
    v = verdict_of(text, "mail.txt")
    assert (v.category, v.confidence) == ("infra", "high")
    assert v.root_cause is not None and v.root_cause.host == "gpu-a07"


def test_torque_walltime_sentence_decides_not_the_openpbs_number() -> None:
    # Torque -11 is a walltime kill; the same number in OpenPBS is a rerun (medium): the sentence is read
    text = (
        "PBS Job Id: 5121.head.cluster\n"
        "Exec host:  gpu-a07/0-7+gpu-a08/0-7\n"
        "Aborted by PBS Server\n"
        "Job exceeded its walltime limit. Job was aborted\n"
        "See Administrator for help\n"
        "Exit_status=-11\n"
    )
    v = verdict_of(text, "mail.txt")
    assert (v.category, v.confidence) == ("preemption", "high")
    assert v.root_cause is not None and v.root_cause.signature.id == "torque-mail-walltime"


def test_evicted_userlog_with_its_details() -> None:
    text = (
        "001 (88.000.000) 03/02 09:00:01 Job executing on host: <10.0.0.4:9618>\n"
        "...\n"
        "022 (88.000.000) 03/02 11:04:10 Job disconnected, attempting to reconnect\n"
        "    Socket between submit and execute hosts closed unexpectedly\n"
        "...\n"
        "024 (88.000.000) 03/02 11:04:19 Job reconnection failed\n"
        "    Job not found at execution machine\n"
        "    Can not reconnect to slot1@wn-0412.example.org, rescheduling job\n"
    )
    v = verdict_of(text, "job.log")
    assert (v.category, v.confidence) == ("preemption", "medium")
    assert v.root_cause is not None and v.root_cause.signature.id == "htcondor-event-evicted"


def test_new_signatures_record_their_source() -> None:
    for sig_id in ("slurmstepd-exec-batch-script", "slurmstepd-exec-command", "slurm-job-namespace-failed",
                   "slurm-job-container-failed", "htcondor-policy-memory-request", "torque-mail-exec-host", "torque-mail-walltime", "torque-mail-memory",
                   "torque-mail-cannot-execute", "moab-preempted-node-failure", "htcondor-policy-hold-memory",
                   "htcondor-event-evicted", "htcondor-event-failure", "htcondor-event-pool-error",
                   "htcondor-event-stopped", "htcondor-event-benign"):
        sig = next(s for s in SIGNATURES if s.id == sig_id)
        assert sig.source
    # the user-log vocabulary is whole: every event number 000-045 is in exactly one entry
    members = [c for s in SIGNATURES if s.id.startswith("htcondor-event-") for c in s.codes]
    assert sorted(members) == [f"{n:03d}" for n in range(46)]
