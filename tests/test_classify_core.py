"""``ckptctl.core.classify``: catalog validation, line matching, prefilter, scanning, verdict tables."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from typing import Any

import pytest

from ckptctl.core.classify.attribution import normalize_host, normalize_pci
from ckptctl.core.classify.catalog import (
    MAX_EVIDENCE_CHARS,
    CatalogError,
    merge_catalogs,
    parse_catalog,
)
from ckptctl.core.classify.events import Event, FileScanner
from ckptctl.core.classify.evidence import Evidence, EvidenceCollector, SignatureTally
from ckptctl.core.classify.scan import Matcher, plan_prefilter
from ckptctl.core.classify.verdict import GpuRef, Verdict, decide_verdict, iter_events
from ckptctl.ops.classify_catalog import load_default_signatures

CATALOG = load_default_signatures()
BY_ID = {s.id: s for s in CATALOG}
MATCHER = Matcher(CATALOG)


# --------------------------------------------------------------------------------------
# The shipped catalog
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sig_id", "example"),
    [(s.id, ex) for s in CATALOG for ex in s.examples],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_every_catalog_example_matches_its_own_signature_first(sig_id: str, example: str) -> None:
    sig = BY_ID[sig_id]
    assert any(kw in example + "\n" for kw in sig.keywords), "the prefilter would never see this line"
    match = MATCHER.match_line(example + "\n")
    assert match is not None
    if sig.codes and match.signature.id != sig_id:
        # A vocabulary table lists every member of its set; a member whose lines an earlier,
        # wording-specific entry already claims (k8s-oomkilled for "Reason: OOMKilled") must
        # mean the same there: same category and role.
        first = match.signature
        assert (first.category, first.role) == (sig.category, sig.role), (first.id, sig_id)
        assert not first.codes, "a vocabulary member is shadowed by another vocabulary"
        return
    assert match.signature.id == sig_id


def test_every_cause_and_symptom_has_examples_and_keywords() -> None:
    missing = [s.id for s in CATALOG if s.role != "context" and not s.examples]
    assert missing == []
    assert [s.id for s in CATALOG if not s.keywords] == []


@pytest.mark.parametrize(
    ("code", "category", "drains"),
    [
        (13, "job", False), (31, "job", False), (43, "job", False), (45, "job", False),
        (68, "job", False), (69, "job", False),
        (32, "infra", True), (38, "infra", True), (48, "infra", True), (61, "infra", True),
        (62, "infra", True), (63, "infra", True), (64, "infra", True), (74, "infra", True),
        (79, "infra", True), (94, "infra", True), (95, "infra", True), (119, "infra", True),
        (120, "infra", True), (121, "infra", True), (140, "infra", True), (154, "infra", True),
        (145, "infra", True),
        # weak evidence: named as a suspect, never drained on its own
        (92, "infra", False), (109, "infra", False), (8, "infra", False), (999, "infra", False),
    ],
)  # fmt: skip
def test_xid_codes_are_told_apart(code: int, category: str, drains: bool) -> None:
    line = (
        f"Jan 14 03:12:44 gpu-node-05 kernel: NVRM: Xid (PCI:0000:18:00): {code}, pid=91822, "
        "name=python3, something happened\n"
    )
    match = MATCHER.match_line(line)
    assert match is not None
    assert match.signature.category == category
    assert match.signature.drain is drains
    assert match.fields["xid"] == str(code)
    assert match.fields["gpu"] == "0000:18:00"
    assert match.fields["host"] == "gpu-node-05"
    if code == 45:
        assert match.signature.role == "symptom"


def test_every_documented_xid_has_its_own_entry() -> None:
    """Every code of NVIDIA's Xid catalog (1-172), NVLink5's 144-150 included."""
    assert set(range(1, 173)) <= {s.xid for s in CATALOG if s.xid is not None}
    assert all(s.description for s in CATALOG if s.xid is not None)


# --------------------------------------------------------------------------------------
# Catalog validation
# --------------------------------------------------------------------------------------

GOOD = {"id": "my-sig", "pattern": "boom", "keywords": ["boom"], "category": "job"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"signatures": [{**GOOD, "patern": "x"}]}, "unknown key 'patern'"),
        ({"signaturez": []}, "unknown top-level key 'signaturez'"),
        ({"version": 2, "signatures": []}, "unsupported 'version' 2"),
        ({"signatures": [{**GOOD, "category": "hardware"}]}, "'category' must be one of infra, job, preemption"),
        ({"signatures": [{k: v for k, v in GOOD.items() if k != "category"}]}, "missing required key 'category'"),
        ({"signatures": [{k: v for k, v in GOOD.items() if k != "pattern"}]}, "missing required key 'pattern'"),
        ({"signatures": [{**GOOD, "pattern": "(unclosed"}]}, "not a valid regular expression"),
        ({"signatures": [{**GOOD, "pattern": "(?P<hots>x)"}]}, "pattern group 'hots'"),
        ({"signatures": [GOOD, GOOD]}, "id 'my-sig' appears twice"),
        ({"signatures": [{**GOOD, "role": "root"}]}, "'role' must be one of cause, symptom, context"),
        ({"signatures": [{**GOOD, "drain": "yes"}]}, "'drain' must be true or false"),
        ({"signatures": [{**GOOD, "keywords": [""]}]}, "'keywords' must be a list of non-empty strings"),
        ({"signatures": [{**GOOD, "xid": -1}]}, "'xid' must be a non-negative integer"),
        ({"signatures": [{**GOOD, "id": "two words"}]}, "'id' must be a non-empty word"),
        ({"signatures": "nope"}, "'signatures' must be a list"),
        ({"signatures": ["nope"]}, "each signature must be a mapping"),
        (["nope"], "must be a mapping"),
    ],
)
def test_invalid_catalogs_name_the_problem(document: Any, message: str) -> None:
    with pytest.raises(CatalogError, match=re.escape(message)) as info:
        parse_catalog(document, source="extra.yaml")
    assert str(info.value).startswith("extra.yaml")


def test_catalog_defaults_and_xid_shorthand() -> None:
    (sig,) = parse_catalog({"signatures": [{"id": "xid-200", "xid": 200, "category": "infra"}]}, source="f")
    assert sig.keywords == ("Xid",) and sig.role == "cause" and sig.drain is True
    assert sig.confidence == "medium" and sig.severity == "error"
    assert re.search(sig.pattern, "NVRM: Xid (PCI:0000:3b:00): 200, pid=1")
    assert not re.search(sig.pattern, "NVRM: Xid (PCI:0000:3b:00): 2000, pid=1")
    (job,) = parse_catalog({"signatures": [GOOD]}, source="f")
    assert job.drain is False
    assert parse_catalog(None, source="empty.yaml") == ()


def test_user_signatures_take_precedence_and_replace_by_id() -> None:
    user = parse_catalog(
        {
            "signatures": [
                # same id as the built-in: replaces it (here: XID 13 treated as hardware)
                {"id": "xid-13", "xid": 13, "category": "infra", "confidence": "high"},
                # a new line that would otherwise be a generic Python exception
                {"id": "flaky-fs", "pattern": r"OSError: \[Errno 5\]", "keywords": ["OSError"],
                 "category": "infra", "drain": False},
            ]
        },
        source="site.yaml",
    )  # fmt: skip
    merged = merge_catalogs(CATALOG, [user])
    assert [s.id for s in merged[:2]] == ["xid-13", "flaky-fs"]
    assert sum(s.id == "xid-13" for s in merged) == 1
    matcher = Matcher(merged)
    xid = matcher.match_line("NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=python3, Graphics Exception\n")
    assert xid is not None and xid.signature.category == "infra"
    io = matcher.match_line("OSError: [Errno 5] Input/output error\n")
    assert io is not None and io.signature.id == "flaky-fs"
    assert MATCHER.match_line("OSError: [Errno 5] Input/output error\n").signature.id == "storage-unreachable"  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------
# Matching real log lines
# --------------------------------------------------------------------------------------

LINES = [
    # (line, signature, expected fields)
    ("Nov 21 03:12:44 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
     "xid-79", {"host": "gpu-node-17", "gpu": "0000:3b:00", "xid": "79"}),
    ("2026-01-14T03:40:17.401122+00:00 gpu-node-22.cluster.local kernel: NVRM: Xid (PCI:0000:b7:00): 94, pid=3310, name=python, Contained: SM (0x1). RST: No, D-RST: No",
     "xid-94", {"host": "gpu-node-22", "gpu": "0000:b7:00"}),
    ("[1829344.402114] NVRM: Xid (0000:03:00): 48, pid=77, name=python, An uncorrectable double bit error (DBE) has been detected",
     "xid-48", {"gpu": "0000:03:00"}),
    ("<3>Jan 14 03:12:44 gpu-node-09 kernel: NVRM: Xid (PCI:0000:c1:00): 74, pid=2941, name=python, NVLink: fatal error detected on link 14",
     "xid-74", {"host": "gpu-node-09"}),
    ("gpu-node-12:48211:48450 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.1.4.22<53282> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
     "nccl-ib-wc-retry-exceeded", {"host": "gpu-node-12", "gpu_index": "2", "peer": "10.1.4.22"}),
    ("3: gpu-node-04:3310:3390 [5] misc/socket.cc:560 NCCL WARN Net : Connection closed by remote peer gpu-node-17<49152>",
     "nccl-remote-error", {"host": "gpu-node-04", "gpu_index": "5"}),
    ("[rank12]:[E1121 03:22:45.123456789 ProcessGroupNCCL.cpp:616] [Rank 12] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.",
     "nccl-watchdog-timeout", {"rank": "12"}),
    ("[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800460 milliseconds before timing out.",
     "nccl-watchdog-timeout", {"rank": "3"}),
    ("[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.11 GiB",
     "cuda-oom", {"rank": "5"}),
    ("RuntimeError: CUDA error: out of memory", "cuda-oom", {}),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-illegal-address", {}),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "cuda-ecc-error", {}),
    ("RuntimeError: CUDA error: unspecified launch failure", "cuda-launch-failure", {}),
    ("  traceback : Signal 9 (SIGKILL) received by PID 48211", "rank-sigkill", {"signal": "9", "pid": "48211"}),
    ("  traceback : Signal 15 (SIGTERM) received by PID 48212", "rank-sigterm", {"signal": "15"}),
    ("  traceback : Signal 11 (SIGSEGV) received by PID 6174", "segfault", {}),
    ("E1121 03:12:51.004000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 3 (pid: 48211) of binary: /usr/bin/python3",
     "rank-sigkill", {"exitcode": "-9", "local_rank": "3"}),
    ("failed (exitcode: 1) local_rank: 0 (pid: 1886) of binary: /usr/bin/python3", "torchrun-worker-failed", {"exitcode": "1"}),
    ("srun: error: gpu-node-03: task 12: Killed", "rank-sigkill", {"host": "gpu-node-03"}),
    ("srun: error: gpu-node-03: tasks 8-15: Exited with exit code 1", "torchrun-worker-failed", {"host": "gpu-node-03"}),
    ("slurmstepd: error: *** JOB 4412937 ON gpu-node-03 CANCELLED AT 2026-01-14T03:12:44 DUE TO PREEMPTION ***",
     "slurm-preempted", {"host": "gpu-node-03"}),
    ("slurmstepd: error: *** STEP 4412937.0 ON gpu-node-03 CANCELLED AT 2026-01-14T15:00:07 DUE TO TIME LIMIT ***",
     "slurm-time-limit", {}),
    ("slurmstepd: error: *** JOB 4412937 ON gpu-node-03 CANCELLED AT 2026-01-14T03:12:44 ***", "slurm-cancelled", {}),
    ("srun: error: Node failure on gpu-node-07", "slurm-node-failure", {"host": "gpu-node-07"}),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=4412937.0. Some of the step tasks have been OOM Killed.", "slurm-oom", {}),
    ("Jan 14 03:12:50 gpu-node-03 kernel: Out of memory: Killed process 48211 (python) total-vm:612345632kB",
     "kernel-oom-killer", {"host": "gpu-node-03", "pid": "48211"}),
    ("5m   Warning   Evicted   pod/trainer-worker-3   The node was low on resource: memory.", "k8s-evicted", {}),
    ("  Normal   Preempted  pod/trainer-worker-3  Preempted by default/high-prio on node gpu-node-12", "k8s-preempted", {}),
    ("      Reason:       OOMKilled", "k8s-oomkilled", {}),
    ("3m   Warning   NodeNotReady   node/gpu-node-7   Node gpu-node-7 status is now: NodeNotReady", "k8s-node-not-ready", {"host": "gpu-node-7"}),
    ("ValueError: Loss is NaN, stopping training at step 48210", "nan-loss", {}),
    ("[2026-01-14 03:12:44,301][train][INFO] step 48210 | loss nan | lr 2.95e-04", "nan-loss-value", {}),
    ("  host      : gpu-node-17.cluster.local", "torchrun-table-host", {"host": "gpu-node-17.cluster.local"}),
    ("  rank      : 9 (local_rank: 1)", "torchrun-table-rank", {"rank": "9", "local_rank": "1"}),
    ("[default3]:  exitcode  : -9 (pid: 41211)", "torchrun-table-exitcode", {"exitcode": "-9"}),
    ("KeyError: 'attention_mask'", "python-exception", {}),
    ("[rank3]: AssertionError", "python-exception", {"rank": "3"}),
    ("2026-01-14T03:12:44.123456789Z RuntimeError: shapes (4,3) and (2,2) not aligned", "python-exception", {}),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
     "nccl-system-error", {}),
    ("OSError: [Errno 28] No space left on device: '/ckpt/run7/step_48000/__3_0.distcp'", "disk-full", {}),
    ("\x1b[31mRuntimeError: CUDA error: an illegal memory access was encountered\x1b[0m", "cuda-illegal-address", {}),
    # issue 22, open-world families (cls22): GPU drivers without an XID, JAX/XLA, Grid Engine,
    # Moab, older UCX, EFA errors of any wording, Ray's actor record, salloc
    ("Nov 21 13:07:55 dgx-h2-31 kernel: NVRM: GPU3 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 5512009 heartbeat 90122",
     "nvrm-gsp-timeout", {"host": "dgx-h2-31"}),
    ("[Mon Nov 23 18:02:13 2026] amdgpu 0000:29:00.0: amdgpu: Ring comp_1.2.0 reset failed", "amdgpu-reset-failed", {"gpu": "0000:29:00"}),
    ("amdgpu 0000:29:00.0: amdgpu: ring comp_1.2.0 timeout, signaled seq=881204, emitted seq=881207", "amdgpu-ring-timeout", {}),
    ("2026-11-24 09:17:48.004512: E external/xla/xla/tsl/distributed_runtime/coordination/coordination_service.cc:1170] /job:jax_worker/replica:0/task:11 has been set to ERROR in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:11 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly.",
     "xla-coordination-task-error", {"rank": "11"}),
    ("failed       37  : qmaster enforced h_rt, h_cpu, or h_vmem limit", "sge-failed-limit", {"code": "37"}),
    ("failed       8   : in prolog", "sge-failed-host", {"code": "8"}),
    ("MOAB_INFO:  job exceeded wallclock limit", "moab-wallclock", {}),
    ("[gpu-node-12:19546:0:19546] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)",
     "ucx-link-error", {"host": "gpu-node-12", "code": "Transport retry count exceeded"}),
    ("libfabric:2231:1763977412::efa:cq:efa_rdm_pke_handle_tx_error():512<warn> err: 5, message: Remote peer is in an unexpected state My EFA addr: fi_addr_efa://[fe80::1]:0:8 My host id: i-04c1d2e3f4a5b6c70 Peer EFA addr: fi_addr_efa://[fe80::2]:0:5 Peer host id: i-0aa12bb34cc56dd78 (12)",
     "efa-error-other", {"peer": "i-0aa12bb34cc56dd78"}),
    ("The actor is dead because its node has died. Node Id: 3f0b9e2d7a6c5148e1d2c3b4a5968778", "ray-actor-node-died", {}),
    ("salloc: error: Node failure on a100-08", "slurm-node-failure", {"host": "a100-08"}),
]  # fmt: skip


@pytest.mark.parametrize(("line", "sig_id", "fields"), LINES)
def test_real_lines_match_with_attribution(line: str, sig_id: str, fields: dict[str, str]) -> None:
    match = MATCHER.match_line(line + "\n")
    assert match is not None, line
    assert match.signature.id == sig_id
    for key, value in fields.items():
        assert match.fields.get(key) == value, key


QUIET = [
    # Healthy lines that carry a keyword-like word and must not become evidence.
    " iteration    48210/  500000 | lm loss: 2.314216E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "wandb: Network error (ReadTimeout), entering retry loop. Error while calling W&B API: context deadline exceeded (<Response [502]>)",
    'containerd[2211]: time="2026-01-14T03:12:44Z" level=info msg="ImageCreate event"',
    "gpu-node-12:48211:48250 [2] NCCL INFO Channel 03/0 : 17[2] -> 25[2] [send] via NET/IB/3/GDRDMA",
    "[2026-01-14 03:12:44,301][train][INFO] [rank0] step 48210 | loss 2.3141 | lr 2.95e-04 | grad_norm 0.812",
    "Jan 14 03:12:44 gpu-node-17 kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 511",
    "/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:91: UserWarning: None of the inputs have requires_grad=True.",
    "    raise ChildFailedError(",
    "  error_file: <N/A>",
    "[W114 03:12:44.000 ProcessGroupNCCL.cpp:4115] Warning: TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0",
    "INFO: preemption handler installed (SIGTERM -> checkpoint and exit)",
    "eval | loss 1.93 | inference took 12.1 s",
    "[inductor] cache: 12 entries evicted (LRU)",
    "Jan 14 03:12:44 gpu-node-3 kubelet[2211]: eviction manager: attempting to reclaim memory",
    "amdgpu 0000:29:00.0: amdgpu: Ring comp_1.2.0 reset succeeded",
    "summary: 3 checks failed    (see report)",
]


@pytest.mark.parametrize("line", QUIET)
def test_healthy_lines_do_not_match(line: str) -> None:
    assert MATCHER.match_line(line + "\n") is None


# --------------------------------------------------------------------------------------
# Prefilter
# --------------------------------------------------------------------------------------


def test_prefilter_plan_anchors_are_suffixes_of_their_keywords() -> None:
    keywords = [kw.encode() for kw in {k for s in CATALOG for k in s.keywords}]
    keywords.sort()
    groups = plan_prefilter(keywords)
    covered = set()
    for first, members in groups.items():
        for anchor, index in members:
            assert anchor[0] == first
            assert keywords[index].endswith(anchor)
            assert len(anchor) >= min(len(keywords[index]), 4)
            covered.add(index)
    assert covered == set(range(len(keywords)))
    # Far fewer passes than distinct first bytes: the point of the plan.
    assert len(groups) < len({k[0] for k in keywords}) / 2


def test_prefilter_plan_keeps_no_redundant_pass() -> None:
    # every pass is some keyword's only anchor among the chosen passes (a pass whose
    # keywords all have an anchor elsewhere is dropped: each pass costs a scan of the block)
    keywords = sorted({k.encode() for s in CATALOG for k in s.keywords})
    chosen = set(plan_prefilter(keywords))
    for b in chosen:
        only = [
            kw for kw in keywords
            if b in (opts := {kw[i] for i in range(len(kw) - min(len(kw), 4) + 1)}) and not opts & (chosen - {b})
        ]  # fmt: skip
        assert only, f"the pass on {chr(b)!r} is redundant"


def test_candidate_lines_find_every_line_with_a_keyword() -> None:
    rng = random.Random(4)
    keywords = sorted({k for s in CATALOG for k in s.keywords})
    filler = ["step 12 | loss 2.31", "NCCL INFO Channel 00/0", "level=info msg=ok", "x" * 300, ""]
    lines = []
    for _ in range(3000):
        text = rng.choice(filler)
        if rng.random() < 0.2:
            kw = rng.choice(keywords).rstrip("\r\n")
            at = rng.randrange(len(text) + 1)
            text = text[:at] + kw + text[at:]
        lines.append(text)
    block = ("\n".join(lines) + "\n").encode()
    found = {start for start, _, _ in MATCHER.candidate_lines(block)}
    offset = 0
    for text in lines:
        has_keyword = any(kw in text + "\n" for kw in keywords)
        if has_keyword:
            assert offset in found, text
        offset += len(text.encode()) + 1


# --------------------------------------------------------------------------------------
# Scanning files: line numbers, torchrun records, attribution
# --------------------------------------------------------------------------------------

TORCHRUN = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-01-14_04:09:42
  host      : gpu-node-04.cluster.local
  rank      : 9 (local_rank: 1)
  exitcode  : -15 (pid: 48212)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 48212
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-14_04:09:41
  host      : gpu-node-03.cluster.local
  rank      : 27 (local_rank: 3)
  exitcode  : -9 (pid: 48211)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 48211
============================================================
[rank9]:[E114 04:09:41.000 ProcessGroupNCCL.cpp:616] [Rank 9] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600013 milliseconds before timing out.
"""


def scan(text: str, *, file: str = "f.log", block_bytes: int | None = None, host: str | None = None) -> tuple[list[Event], FileScanner]:
    scanner = FileScanner(MATCHER, file=file, file_host=host)
    data = text.encode()
    events: list[Event] = []
    if block_bytes is None:
        return scanner.feed(data), scanner
    pos = 0
    while pos < len(data):  # blocks of whole lines, as the adapter delivers them
        end = data.rfind(b"\n", pos, pos + block_bytes) + 1 or len(data)
        if end <= pos:
            end = data.find(b"\n", pos) + 1 or len(data)
        events.extend(scanner.feed(data[pos:end]))
        pos = end
    return events, scanner


@pytest.mark.parametrize("block_bytes", [None, 64, 200, 1000])
def test_torchrun_table_attributes_records_and_marks_the_root_cause(block_bytes: int | None) -> None:
    events, scanner = scan(TORCHRUN, block_bytes=block_bytes)
    by_line = {e.line: e for e in events}
    sigterm, sigkill, timeout = by_line[12], by_line[21], by_line[23]
    assert (sigterm.signature.id, sigterm.host, sigterm.rank, sigterm.first_failure) == ("rank-sigterm", "gpu-node-04", 9, False)
    assert (sigkill.signature.id, sigkill.host, sigkill.rank, sigkill.local_rank) == ("rank-sigkill", "gpu-node-03", 27, 3)
    assert sigkill.first_failure and sigkill.signal == "SIGKILL" and sigkill.exitcode == -9
    assert sigkill.host_source == "torchrun table"
    assert timeout.signature.id == "nccl-watchdog-timeout" and timeout.rank == 9
    assert scanner.rank_hosts == {9: "gpu-node-04", 27: "gpu-node-03"}
    assert scanner.num_lines == TORCHRUN.count("\n")


def test_rank_only_lines_get_their_host_from_torchruns_table() -> None:
    collector = EvidenceCollector()
    timeout_events, s1 = scan(TORCHRUN.splitlines(keepends=True)[-1], file="rank9.log")
    table_events, s2 = scan(TORCHRUN, file="torchrun.out")
    for e in timeout_events + table_events:
        collector.add(e)
    collector.add_file(s1)
    collector.add_file(s2)
    evidence = collector.evidence()
    tally = next(t for t in evidence.tallies if t.signature.id == "nccl-watchdog-timeout")
    assert tally.hosts == ("gpu-node-04",)
    rank9 = next(e for e in tally.samples if e.file == "rank9.log")
    assert (rank9.host, rank9.host_source) == ("gpu-node-04", "rank map")


def test_line_numbers_and_file_host() -> None:
    text = "ok\n" * 9 + "[12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
    events, scanner = scan(text, block_bytes=7, host="gpu-node-17.example.org")
    (event,) = [e for e in events if e.signature.id == "xid-79"]
    assert (event.line, event.host, event.host_source, event.gpu) == (10, "gpu-node-17", "file name", "0000:3b:00")
    assert scanner.num_lines == 10 and scanner.num_matched_lines == 1
    fixed = FileScanner(MATCHER, file="error.json").feed(b"a\nRuntimeError: CUDA error: out of memory\n", fixed_line=1)
    assert [(e.line, e.signature.id) for e in fixed] == [(1, "cuda-oom")]


def test_long_lines_are_clipped_around_the_match() -> None:
    line = "x" * 5000 + " RuntimeError: CUDA error: an illegal memory access was encountered " + "y" * 5000
    (event,), _ = scan("0123: " + line + "\n")
    assert len(event.text) <= MAX_EVIDENCE_CHARS + 6
    assert "illegal memory access" in event.text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("gpu-node-17.cluster.local", "gpu-node-17"), ("GPU-NODE-3", "GPU-NODE-3"), ("10.1.4.22", "10.1.4.22"),
     ("1.0.0.127.in-addr.arpa", "1.0.0.127.in-addr.arpa"), ("localhost", None), ("<N/A>", None), ("", None),
     (None, None)],
)  # fmt: skip
def test_normalize_host(raw: str | None, expected: str | None) -> None:
    assert normalize_host(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("PCI:0000:3B:00", "0000:3b:00"), ("00000000:3B:00.0", "0000:3b:00"), ("0000:3b:00.0", "0000:3b:00"),
     ("0009:01:00", "0009:01:00"), (None, None)],
)  # fmt: skip
def test_normalize_pci(raw: str | None, expected: str | None) -> None:
    assert normalize_pci(raw) == expected


def test_collector_memory_is_bounded_but_counts_are_exact() -> None:
    collector = EvidenceCollector(max_samples=3, max_hosts=50)
    sig = BY_ID["nccl-watchdog-timeout"]
    for i in range(20_000):
        collector.add(Event(signature=sig, file="f", line=i + 1, text="t", host=f"h{i % 200}", order=i))
    (tally,) = collector.evidence().tallies
    assert tally.count == 20_000
    assert len(tally.samples) == 3 and [e.line for e in tally.samples] == [1, 2, 3]
    assert tally.num_hosts == 50


# --------------------------------------------------------------------------------------
# The verdict, on plain data
# --------------------------------------------------------------------------------------


def ev(sig_id: str, host: str | None = None, **kw: Any) -> Event:
    kw.setdefault("order", ev.counter)  # type: ignore[attr-defined]
    ev.counter += 1  # type: ignore[attr-defined]
    return Event(signature=BY_ID[sig_id], file=kw.pop("file", "log"), line=kw.pop("line", 1),
                   text=sig_id, host=host, **kw)  # fmt: skip


ev.counter = 0  # type: ignore[attr-defined]


def decide(*events: Event) -> Verdict:
    collector = EvidenceCollector()
    for e in events:
        collector.add(e)
    return decide_verdict(collector.evidence())


def timeouts(n: int) -> list[Event]:
    return [ev("nccl-watchdog-timeout", f"gpu-node-{r // 8:02d}", rank=r) for r in range(n)]


VERDICTS: list[tuple[str, list[Event], str, str, tuple[str, ...], str | None]] = [
    # (case, events, category, confidence, hosts to drain, root-cause signature)
    ("XID 79 on one host, timeouts on 64 ranks", [*timeouts(64), ev("xid-79", "gpu-node-17", gpu="0000:3b:00")],
     "infra", "high", ("gpu-node-17",), "xid-79"),
    ("one rank's CUDA OOM, timeouts everywhere", [*timeouts(64), ev("cuda-oom", "gpu-node-03", rank=5)],
     "job", "high", (), "cuda-oom"),
    ("SIGTERM after a preemption notice", [ev("rank-sigterm", "gpu-node-03"), ev("slurm-preempted", "gpu-node-03")],
     "preemption", "high", (), "slurm-preempted"),
    ("SIGTERM after a spot interruption", [ev("rank-sigterm"), ev("cloud-spot-interruption")],
     "preemption", "high", (), "cloud-spot-interruption"),
    ("bare NCCL timeout", timeouts(16), "unknown", "low", (), None),
    ("bare SIGKILL", [ev("rank-sigkill", "gpu-node-03", rank=27, first_failure=True)], "unknown", "low", (), None),
    ("SIGKILL after the OOM killer", [ev("rank-sigkill", "gpu-node-03"), ev("kernel-oom-killer", "gpu-node-03")],
     "job", "high", (), "kernel-oom-killer"),
    ("application XIDs never drain", [ev("xid-13", "gpu-node-05"), ev("xid-31", "gpu-node-05"), ev("xid-43", "gpu-node-05"),
                                      ev("xid-45", "gpu-node-05"), *timeouts(8)], "job", "high", (), "xid-13"),
    ("one application XID alone", [ev("xid-13", "gpu-node-05")], "job", "medium", (), "xid-13"),
    ("XID 48 + 63 + CUDA ECC error", [ev("xid-63", "gpu-node-22"), ev("xid-48", "gpu-node-22"), ev("cuda-ecc-error", "gpu-node-22")],
     "infra", "high", ("gpu-node-22",), "xid-48"),
    ("XID 63 + 64", [ev("xid-63", "gpu-node-05"), ev("xid-64", "gpu-node-05")], "infra", "high", ("gpu-node-05",), "xid-64"),
    ("two broken hosts", [ev("xid-79", "gpu-node-17"), ev("xid-95", "gpu-node-23"), *timeouts(32)],
     "infra", "high", ("gpu-node-17", "gpu-node-23"), "xid-79"),
    ("XID 79 and a CUDA OOM: infra wins, less sure", [ev("cuda-oom", "gpu-node-03"), ev("xid-79", "gpu-node-17")],
     "infra", "medium", ("gpu-node-17",), "xid-79"),
    ("IB errors alone: fabric, no drain", [ev("nccl-ib-completion-error", "gpu-node-12"), ev("nccl-ib-completion-error", "gpu-node-13"), *timeouts(16)],
     "infra", "medium", (), "nccl-ib-completion-error"),
    ("IB errors after a rank's OOM are its consequence", [ev("nccl-ib-completion-error", "gpu-node-12"), ev("cuda-oom", "gpu-node-03")],
     "job", "high", (), "cuda-oom"),
    ("XID 92 alone: weak, no drain", [ev("xid-92", "gpu-node-22")], "infra", "low", (), "xid-92"),
    ("NaN loss and a preemption: the divergence wins, less sure", [ev("slurm-preempted"), ev("nan-loss")], "job", "medium", (), "nan-loss"),
    ("time limit", [ev("slurm-time-limit", "gpu-node-11"), ev("rank-sigterm")], "preemption", "high", (), "slurm-time-limit"),
    ("Slurm node failure", [ev("slurm-node-failure", "gpu-node-07"), *timeouts(8)], "infra", "high", ("gpu-node-07",), "slurm-node-failure"),
    ("disk full: infra, nothing to drain", [ev("disk-full", "gpu-node-03")], "infra", "medium", (), "disk-full"),
    ("eviction", [ev("k8s-evicted"), ev("rank-sigterm")], "preemption", "medium", (), "k8s-evicted"),
    ("generic exception after preemption: preemption", [ev("slurm-preempted"), ev("python-exception")], "preemption", "high", (), "slurm-preempted"),
    ("gloo peer closed after a SIGKILL: thin", [ev("gloo-peer-closed", rank=0, peer="10.0.0.2"), ev("rank-sigkill", "h1", rank=1, first_failure=True)],
     "unknown", "low", (), None),
    ("gloo peer closed after a rank's exception: the exception", [ev("gloo-peer-closed", rank=0), ev("python-exception", rank=1)],
     "job", "medium", (), "python-exception"),
    ("an XID naming the earlier XID it follows: the earlier is the root",
     [ev("xid-95", "gpu-node-22", gpu="0000:b7:00", cause_xid=48), ev("xid-48", "gpu-node-22", gpu="0000:b7:00")],
     "infra", "high", ("gpu-node-22",), "xid-48"),
    ("a link fault drains neither end", [ev("nccl-ib-wc-retry-exceeded", "gpu-node-12", peer="10.1.4.22")],
     "infra", "medium", (), "nccl-ib-wc-retry-exceeded"),
    ("an HCA port error drains its host", [ev("nccl-ib-async-fatal", "gpu-node-12"), *timeouts(8)],
     "infra", "high", ("gpu-node-12",), "nccl-ib-async-fatal"),
    ("NCCL invalid usage is the job's", [ev("nccl-invalid-usage", rank=1), ev("nccl-system-error", rank=0)],
     "job", "medium", (), "nccl-invalid-usage"),
    ("a power-button shutdown alone: weak", [ev("acpi-power-button", "a2-ultra-7")], "preemption", "low", (), "acpi-power-button"),
]  # fmt: skip


# (case, events, [(role, host, rank, peer), ...] the suspects must start with)
SUSPECTS: list[tuple[str, list[Event], list[tuple[str, str | None, int | None, str | None]]]] = [
    ("XID 79: the host and GPU", [*timeouts(8), ev("xid-79", "gpu-node-17", gpu="0000:3b:00")],
     [("culprit", "gpu-node-17", None, None)]),
    ("a link fault: both ends, the peer's host when resolved",
     [ev("nccl-ib-wc-retry-exceeded", "gpu-node-12", peer="10.1.4.22", peer_host="gpu-node-30")],
     [("endpoint", "gpu-node-12", None, None), ("endpoint", "gpu-node-30", None, "10.1.4.22")]),
    ("a job fault: the rank", [ev("cuda-oom", "gpu-node-03", rank=5), *timeouts(8)], [("culprit", "gpu-node-03", 5, None)]),
    ("bare SIGKILL: torchrun's first failure, then the peer a survivor names",
     [ev("gloo-peer-closed", rank=0, peer="10.0.0.2"), ev("rank-sigkill", "h1", rank=1, first_failure=True)],
     [("first-failure", "h1", 1, None), ("peer", None, None, "10.0.0.2")]),
    ("preemption: the host was stopped, nothing wrong with it", [ev("slurm-preempted", "gpu-node-03")],
     [("stopped", "gpu-node-03", None, None)]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "events", "expected"), SUSPECTS, ids=[s[0] for s in SUSPECTS])
def test_suspects(case: str, events: list[Event], expected: list[tuple[str, str | None, int | None, str | None]]) -> None:
    v = decide(*events)
    assert [(s.role, s.host, s.rank, s.peer) for s in v.suspects][: len(expected)] == expected
    assert all(s.reason for s in v.suspects)


def test_link_fault_action_says_how_to_tell_the_bad_end() -> None:
    v = decide(ev("nccl-ib-wc-retry-exceeded", "gpu-node-12", peer="10.1.4.22"))
    assert "gpu-node-12" in v.action and "10.1.4.22" in v.action
    assert "ibstat" in v.action and "ibv_devinfo" in v.action and "counters" in v.action
    assert set(v.suspect_hosts) == {"gpu-node-12", "10.1.4.22"} and v.hosts == ()


@pytest.mark.parametrize(
    ("case", "events", "category", "confidence", "hosts", "root"), VERDICTS, ids=[v[0] for v in VERDICTS]
)
def test_verdicts(
    case: str, events: list[Event], category: str, confidence: str, hosts: tuple[str, ...], root: str | None
) -> None:
    for order in (events, list(reversed(events))):  # the order of the input never matters
        v = decide(*order)
        assert (v.category, v.confidence, v.hosts) == (category, confidence, hosts), case
        assert (v.root_cause.signature.id if v.root_cause else None) == root
        assert v.action
        if category == "unknown":
            assert v.what_would_settle_it and not v.causes
        if category != "infra":
            assert v.hosts == () and v.gpus == ()


def test_unknown_verdicts_say_which_log_would_settle_it() -> None:
    v = decide(ev("rank-sigkill", "gpu-node-03", rank=27, first_failure=True), ev("torchrun-worker-failed"))
    assert v.suspect_hosts == ("gpu-node-03",)
    assert "kernel log of gpu-node-03" in v.what_would_settle_it[0]
    assert "OOM killer" in v.what_would_settle_it[0]
    timeout = decide(*timeouts(8))
    assert any("earliest error" in s for s in timeout.what_would_settle_it)
    assert any("kernel log" in s for s in timeout.what_would_settle_it)
    nothing = decide_verdict(Evidence(tallies=(), rank_hosts={}, num_files=2, num_lines=1200))
    assert nothing.category == "unknown" and "no known failure signature in 1200 lines of 2 files" in nothing.reasons[0]


def test_infra_verdict_names_gpus_and_suspects() -> None:
    v = decide(
        ev("xid-79", "gpu-node-17", gpu="0000:3b:00"),
        ev("gpu-fallen-off-bus", "gpu-node-17", gpu="0000:3b:00"),
        ev("cuda-unknown-error", "gpu-node-17", gpu_index=2),
        ev("nccl-ib-completion-error", "gpu-node-12"),
    )
    assert v.gpus == (GpuRef(host="gpu-node-17", pci_bus_id="0000:3b:00", index=None),)
    assert v.suspect_hosts == ("gpu-node-12",)
    assert v.action.startswith("Drain gpu-node-17 (GPU 0000:3b:00) and resume")
    # CUDA's "unknown error" is a weak infra cause of its own (no drain): outweighed here
    assert "cuda-unknown-error" in [e.signature.id for e in v.causes] and v.symptoms == ()


def test_infra_without_a_hostname_says_how_to_find_it() -> None:
    v = decide(ev("xid-48", None, file="dmesg.txt", gpu="0000:b7:00"))
    assert v.category == "infra" and v.hosts == ()
    assert "hostname of the machine that wrote dmesg.txt" in v.what_would_settle_it[0]
    assert v.action.startswith("Drain the failed host")


def test_conflicting_causes_are_reported_with_how_to_settle() -> None:
    v = decide(ev("cuda-oom", "gpu-node-03", file="rank5.log", line=40), ev("xid-79", "gpu-node-17", file="kern.log", line=7))
    assert [e.signature.id for e in v.other_causes] == ["cuda-oom"]
    assert any(r.startswith("outweighed:") for r in v.reasons)
    assert any("timestamps of kern.log:7 and rank5.log:40" in s for s in v.what_would_settle_it)


def test_corroboration_needs_the_same_host() -> None:
    same = decide(ev("xid-13", "a"), ev("xid-31", "a"))
    apart = decide(ev("xid-13", "a"), ev("xid-31", "b"))
    assert (same.confidence, apart.confidence) == ("high", "medium")


def test_torchrun_first_failure_picks_the_root_among_equals() -> None:
    v = decide(ev("cuda-oom", "h1", rank=1), ev("cuda-oom", "h2", rank=2, first_failure=True))
    assert v.root_cause is not None and v.root_cause.rank == 2


def test_low_confidence_actions_say_so() -> None:
    v = decide(ev("xid-109", "gpu-node-05"))
    assert v.confidence == "low" and v.action.startswith("Likely, not certain")
    assert v.suspect_hosts == ("gpu-node-05",)


def test_iter_events_lists_each_event_once_root_first() -> None:
    root = ev("xid-79", "gpu-node-17")
    v = decide(ev("nccl-watchdog-timeout"), root, ev("cuda-oom"))
    events = list(iter_events(v))
    assert events[0] == root and len(events) == len({id(e) for e in events}) == 3


def test_signature_templates_fill_known_fields() -> None:
    sig = replace(BY_ID["rank-sigkill"], settle="log of {host} for {rank} ({gpu}, {xid}, {nope})")
    e = Event(signature=sig, file="f", line=1, text="t", host=None, rank=None)
    v = decide_verdict(
        Evidence(tallies=(SignatureTally(signature=sig, count=1, hosts=(), num_hosts=0, samples=(e,)),), rank_hosts={})
    )
    assert v.what_would_settle_it[0] == "log of the host that wrote f for the failed rank (the GPU, ?, ?)"


def test_root_cause_prefers_a_line_that_names_its_host() -> None:
    v = decide(ev("slurm-node-failure", None, file="sacct.txt"), ev("slurm-node-failure", "gpu-node-07", file="slurm.out"))
    assert v.root_cause is not None and v.root_cause.host == "gpu-node-07"
    assert "nodename=gpu-node-07" in v.action


def test_a_keyword_ending_in_newline_does_not_hide_the_next_line() -> None:
    # "Error\n" ends past its line: the pass once resumed after the next line's
    # newline and missed a keyword there.
    block = b"x BrokenPipeError\nhost-3:1:2 [0] NCCL INFO CUDA_ERROR_ILLEGAL_ADDRESS\n"
    matches, _ = MATCHER.scan_block(block)
    assert [m[0] for m in matches] == [1]


def _marked_training_lines() -> list[str]:
    """The format strings of the training library's log calls marked as read by classify,
    read from its source (the vocabulary of ckptctl's own words, complete by construction)."""
    import ast
    from pathlib import Path

    import ckptctl.training as training

    out: list[str] = []
    for path in sorted(Path(training.__file__).parent.glob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            above = lines[node.lineno - 2] if node.lineno >= 2 else ""
            if "read by classify" not in above:
                continue
            fmt = node.args[0]
            if isinstance(fmt, ast.JoinedStr | ast.BinOp):
                continue
            text = "".join(
                p.value for p in ast.walk(fmt) if isinstance(p, ast.Constant) and isinstance(p.value, str)
            )
            out.append(text)
    return out


def test_every_training_line_marked_for_classify_is_a_preemption_signature() -> None:
    marked = _marked_training_lines()
    assert len(marked) >= 2, marked
    for fmt in marked:
        line = "[rank0]:" + fmt.replace("%s", "SIGTERM").replace("%d", "3") + "\n"
        match = MATCHER.match_line(line)
        assert match is not None, fmt
        assert match.signature.category == "preemption", (fmt, match.signature.id)
