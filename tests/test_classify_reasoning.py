"""Reasoning across lines (``ckptctl.core.classify.reasoning``), table-tested.

Each rule is a function of typed event fields: a fallback cause demoted when another
cause explains it, a desync when ranks disagree on the collective, several programs
failing on one host, a hostless cause attached to the one host its file or its second
names. The lines of the text-level cases are written in the producers' wording (torch's
ProcessGroupNCCL watchdog, the Linux kernel's segfault/traps reports, the CPU allocator).
"""

from __future__ import annotations

from typing import Any

import pytest

from ckptctl.core.classify.events import Event, FileScanner
from ckptctl.core.classify.evidence import EvidenceCollector, time_key
from ckptctl.core.classify.reasoning import DESYNC, HOST_MANY_PROGRAMS, reason_across_lines
from ckptctl.core.classify.scan import Matcher
from ckptctl.core.classify.verdict import Verdict, decide_verdict
from ckptctl.ops.classify_catalog import load_default_signatures

CATALOG = load_default_signatures()
BY_ID = {s.id: s for s in CATALOG}
MATCHER = Matcher(CATALOG)
_ORDER = iter(range(1, 1_000_000))


def ev(sig_id: str, host: str | None = None, **kw: Any) -> Event:
    kw.setdefault("order", next(_ORDER))
    if host is not None:
        kw.setdefault("host_source", "line")
    return Event(signature=BY_ID[sig_id], file=kw.pop("file", "log"), line=kw.pop("line", 1),
                 text=sig_id, host=host, **kw)  # fmt: skip


def decide(*events: Event) -> Verdict:
    collector = EvidenceCollector()
    for e in events:
        collector.add(e)
    return decide_verdict(collector.evidence())


def decide_text(files: dict[str, str]) -> Verdict:
    """The verdict on a few files of text, through the real scanner."""
    collector = EvidenceCollector()
    for index, (name, text) in enumerate(files.items()):
        scanner = FileScanner(MATCHER, file=name, file_index=index)
        for e in scanner.feed(text.encode()):
            collector.add(e)
        collector.add_file(scanner)
    return decide_verdict(collector.evidence())


def watchdog(rank: int, seq: int, op: str = "ALLREDUCE", numel: int = 1048576, host: str | None = None) -> Event:
    return ev("nccl-watchdog-timeout", host, rank=rank, seq=seq, op=op, numel=numel)


# -- desync: the ranks disagree on the collective ------------------------------------------

# (case, events, desync expected, odd ranks)
DESYNCS: list[tuple[str, list[Event], bool, list[int]]] = [
    ("every rank in the same collective: no desync", [watchdog(r, 9001) for r in range(4)], False, []),
    ("one rank in another op", [*(watchdog(r, 9001) for r in (0, 1, 3)), watchdog(2, 9001, "BROADCAST", 3)], True, [2]),
    ("one rank one collective behind", [*(watchdog(r, 500) for r in range(1, 8)), watchdog(0, 499)], True, [0]),
    ("an allreduce of another size", [*(watchdog(r, 7) for r in range(3)), watchdog(3, 7, numel=4096)], True, [3]),
    ("all-to-all sizes differ legitimately", [watchdog(r, 7, "ALLTOALL_BASE", numel=100 + r) for r in range(4)], False, []),
    ("a tie: every rank is odd", [watchdog(0, 5), watchdog(1, 5), watchdog(2, 6), watchdog(3, 6)], True, [0, 1, 2, 3]),
    ("one rank only: nothing to compare", [watchdog(0, 5)], False, []),
    ("process groups are compared apart",
     [ev("nccl-watchdog-timeout", rank=0, pg="0", seq=10, op="ALLREDUCE"),
      ev("nccl-watchdog-timeout", rank=1, pg="0", seq=10, op="ALLREDUCE"),
      ev("nccl-watchdog-timeout", rank=0, pg="3", seq=2, op="ALLGATHER"),
      ev("nccl-watchdog-timeout", rank=1, pg="3", seq=2, op="ALLGATHER")], False, []),
    ("enqueued counts from the progress lines",
     [ev("nccl-watchdog-progress", rank=r, seq=32) for r in (0, 1, 2)] + [ev("nccl-watchdog-progress", rank=3, seq=31)],
     True, [3]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "events", "desync", "odd"), DESYNCS, ids=[d[0] for d in DESYNCS])
def test_desync_names_the_odd_ranks(case: str, events: list[Event], desync: bool, odd: list[int]) -> None:
    v = decide(*events)
    if not desync:
        assert v.category == "unknown", case
        assert not any("desync" in r for r in v.reasons)
        return
    assert (v.category, v.confidence) == ("job", "medium"), case
    assert v.root_cause is not None and v.root_cause.signature.id == DESYNC.id
    assert sorted(e.rank for e in v.causes if e.rank is not None) == odd
    assert [s.rank for s in v.suspects if s.rank is not None][: len(odd)] == sorted(odd)
    assert any("desync" in r and "odd ranks" in r for r in v.reasons)
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in v.action


def test_a_hardware_cause_outweighs_a_desync() -> None:
    events = [*(watchdog(r, 9001) for r in range(3)), watchdog(3, 8999, host="gpu-n4")]
    v = decide(*events, ev("xid-79", "gpu-n4", gpu="0000:3b:00"))
    assert (v.category, v.hosts) == ("infra", ("gpu-n4",))


def test_desync_from_real_watchdog_lines() -> None:
    line = (
        "[rank{r}]:[E219 07:22:10.101433612 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=1800000) "
        "ran for 1800004 milliseconds before timing out.\n"
    )
    files = {f"rank{r}.log": line.format(r=r, seq=9001, op="ALLREDUCE", n=1048576) for r in (0, 1, 3)}
    files["rank2.log"] = line.format(r=2, seq=9001, op="BROADCAST", n=3)
    v = decide_text(files)
    assert (v.category, v.confidence) == ("job", "medium")
    assert [s.rank for s in v.suspects if s.role == "culprit"] == [2]
    # the same ranks agreeing: only consequences
    files["rank2.log"] = line.format(r=2, seq=9001, op="ALLREDUCE", n=1048576)
    assert decide_text(files).category == "unknown"


# -- several programs failing on one host ----------------------------------------------------

SEGV = "Feb 19 11:02:13 {host} kernel: {prog}[77110]: segfault at 18 ip 00007f8d1c2a90b1 sp 00007ffe6c1d4e80 error 4 in lib.so[7f8d18a00000+1c4e1000]\n"
TRAP = "Feb 19 11:05:40 {host} kernel: traps: {prog}[1902] general protection fault ip:4a1c3b sp:c000b1de30 error:0 in {prog}[400000+6b9000]\n"


@pytest.mark.parametrize(
    ("case", "text", "category", "drain"),
    [
        ("python and sshd crash on one host: the host",
         SEGV.format(host="cpu-44", prog="python3") + TRAP.format(host="cpu-44", prog="sshd"), "infra", ("cpu-44",)),
        ("the trainer crashes twice: the job's", SEGV.format(host="cpu-44", prog="python3") * 2, "job", ()),
        ("the trainer under two names is one program",
         SEGV.format(host="cpu-44", prog="python3.11") + SEGV.format(host="cpu-44", prog="pt_main_thread"), "job", ()),
        ("two programs on two hosts: no host rule",
         SEGV.format(host="cpu-44", prog="python3") + TRAP.format(host="cpu-45", prog="sshd"), "job", ()),
        ("the OOM killer's victims are not failing programs",
         "Feb 19 11:02:13 cpu-44 kernel: Out of memory: Killed process 7710 (python3) total-vm:61234kB\n"
         "Feb 19 11:02:14 cpu-44 kernel: Out of memory: Killed process 1902 (node_exporter) total-vm:1234kB\n",
         "job", ()),
    ],
)  # fmt: skip
def test_several_programs_failing_on_one_host(case: str, text: str, category: str, drain: tuple[str, ...]) -> None:
    v = decide_text({"kern.log": text})
    assert (v.category, v.hosts) == (category, drain), case
    if category == "infra":
        assert v.root_cause is not None and v.root_cause.signature.id == HOST_MANY_PROGRAMS.id
        assert v.confidence == "medium" and not v.other_causes  # the crashes are its consequences
        assert any("different programs failed on cpu-44" in r for r in v.reasons)


# -- a fallback cause is a consequence when another cause explains the failure ---------------


@pytest.mark.parametrize(
    ("case", "events", "root"),
    [
        ("the exception alone decides", [ev("python-exception", rank=1)], "python-exception"),
        ("a worker killed, then the re-raised exception", [ev("python-exception", rank=1), ev("dataloader-killed", rank=1)],
         "dataloader-killed"),
        ("a CUDA OOM on another line", [ev("cuda-oom", rank=3), ev("python-exception", rank=0)], "cuda-oom"),
    ],
)  # fmt: skip
def test_fallback_cause_is_a_consequence_of_another(case: str, events: list[Event], root: str) -> None:
    v = decide(*events)
    assert v.category == "job" and v.root_cause is not None and v.root_cause.signature.id == root, case
    if root != "python-exception":
        assert "python-exception" not in {e.signature.id for e in (*v.causes, *v.other_causes)}
        assert any("a consequence, not a cause" in r for r in v.reasons)


# -- a hostless cause takes the one host its file, or its second, names ----------------------


def test_a_hostless_cause_takes_the_one_host_of_its_file() -> None:
    v = decide(ev("nccl-watchdog-timeout", "gpu-n7", file="a.log", rank=0), ev("xid-79", None, file="a.log", gpu="0000:3b:00"))
    assert v.hosts == ("gpu-n7",)
    assert any("the rest of its file names only gpu-n7" in r for r in v.reasons)


def test_two_hosts_in_the_file_is_no_guess() -> None:
    v = decide(
        ev("nccl-watchdog-timeout", "gpu-n7", file="a.log", rank=0),
        ev("nccl-watchdog-timeout", "gpu-n8", file="a.log", rank=1),
        ev("xid-79", None, file="a.log", gpu="0000:3b:00"),
    )
    assert v.category == "infra" and v.hosts == ()


# Labelled before running: the host is the output line of the echoed command; a
# command whose output is not one name, or a command that prints no name, names nobody.
@pytest.mark.parametrize(
    ("command", "output", "host"),
    [
        ("$ hostname", "gpu-w41", "gpu-w41"),
        ("+ hostname -s", "gpu-w41", "gpu-w41"),
        ("# uname -n", "gpu-w41.cluster.internal", "gpu-w41"),
        ("$ cat /etc/hostname", "gpu-w41", "gpu-w41"),
        ("$ hostname", "hostname: Name or service not known", None),
        ("$ hostnamectl", "gpu-w41", None),
        ("$ echo hostname", "gpu-w41", None),
    ],
)
def test_the_output_of_an_echoed_hostname_command_is_the_host(command: str, output: str, host: str | None) -> None:
    text = f"{command}\n{output}\n$ dmesg | tail -2\n[88211.104411] NVRM: Xid (PCI:0000:5e:00): 79, pid=7711, name=python, GPU has fallen off the bus.\n"
    v = decide_text({"node-report.txt": text})
    assert v.category == "infra"
    assert v.hosts == ((host,) if host else ())


# Labelled before running: NCCL's init line names a host of its file; one host in the
# file is taken, two are no guess, and it never names the lines below it (no section).
@pytest.mark.parametrize(
    ("banners", "hosts"),
    [
        (["gpu-w07:811:811 [2] NCCL INFO cudaDriverVersion 12040"], ("gpu-w07",)),
        (["gpu-w07:811:811 [0] NCCL INFO Bootstrap : Using ib0:10.8.0.7<0>"], ("gpu-w07",)),
        (["gpu-w07:811:811 [0] NCCL INFO NCCL version 2.19.3+cuda12.3"], ("gpu-w07",)),
        (["gpu-w07:811:811 [2] NCCL INFO cudaDriverVersion 12040", "gpu-w08:990:990 [2] NCCL INFO cudaDriverVersion 12040"], ()),
        (["gpu-w07:811:811 [2] NCCL INFO Channel 00/32 : 0 1 2 3"], ()),
    ],
)
def test_nccls_init_line_names_a_host_of_its_file(banners: list[str], hosts: tuple[str, ...]) -> None:
    text = "\n".join([*banners, "[rank2]: RuntimeError: CUDA error: uncorrectable NVLink error was detected during the execution"]) + "\n"
    v = decide_text({"rank2.log": text})
    assert v.category == "infra"
    assert v.hosts == hosts
    assert v.causes[0].host_source == ("the rest of its file" if hosts else None)


# Labelled before running: a raw dmesg XID (no host) takes the host that another file's
# syslog lines pair its GPU with; two hosts pairing the same bus id (bus ids repeat
# across machines) is no guess, and another GPU's pairing says nothing.
@pytest.mark.parametrize(
    ("kern_log", "hosts"),
    [
        ("Mar 03 11:20:41 gpu-w12 kernel: NVRM: GPU at PCI:0000:5e:00: GPU-1c0d5b7e-2b71-4e1d-9a44-0f2d7c1e9b30\n", ("gpu-w12",)),
        ("Mar 03 11:20:41 gpu-w12 kernel: NVRM: GPU at PCI:0000:5e:00: GPU-1c0d5b7e-2b71-4e1d-9a44-0f2d7c1e9b30\n"
         "Mar 03 11:20:44 gpu-w13 kernel: NVRM: GPU at PCI:0000:5e:00: GPU-77e1aa01-0b3c-4c55-8e10-2a9d6f3b4c21\n", ()),
        # other GPUs' pairings (two hosts, so the "only host in the input" rule does not apply either)
        ("Mar 03 11:20:41 gpu-w12 kernel: NVRM: GPU at PCI:0000:1b:00: GPU-1c0d5b7e-2b71-4e1d-9a44-0f2d7c1e9b30\n"
         "Mar 03 11:20:44 gpu-w13 kernel: NVRM: GPU at PCI:0000:3d:00: GPU-77e1aa01-0b3c-4c55-8e10-2a9d6f3b4c21\n", ()),
        ("Mar 03 11:20:41 gpu-w12 kernel: NVRM: Xid (PCI:0000:5e:00): 94, pid=7711, name=python, Contained: CE User Channel\n", ("gpu-w12",)),
    ],
)
def test_a_raw_xid_takes_the_host_its_gpu_is_paired_with(kern_log: str, hosts: tuple[str, ...]) -> None:
    dmesg = "[88211.104411] NVRM: Xid (PCI:0000:5e:00): 79, pid=7711, name=python, GPU has fallen off the bus.\n"
    v = decide_text({"dmesg.txt": dmesg, "kern.log": kern_log})
    assert v.category == "infra"
    assert v.hosts == hosts
    assert (v.causes[0].host_source == "every line naming its GPU") == bool(hosts)


def test_a_hostname_command_on_the_last_line_of_a_block_names_nobody() -> None:
    # the output line is in the next block: the rule does not guess (documented)
    scanner = FileScanner(MATCHER, file="r.txt")
    assert scanner.feed(b"$ hostname\n") == [] and scanner.section_hosts == set()
    scanner.feed(b"gpu-w41\n")
    assert scanner.section_hosts == set()


def test_a_hostless_cause_takes_the_host_of_the_same_second_elsewhere() -> None:
    def case(second: str) -> Verdict:
        return decide(
            ev("xid-79", None, file="dmesg.txt", gpu="0000:3b:00", time="2026-01-14T03:12:44.118"),
            ev("nccl-watchdog-timeout", "gpu-n9", file="syslog", time=f"Jan 14 03:{second}", rank=5),
            ev("nccl-watchdog-timeout", "gpu-n3", file="syslog", time="Jan 14 03:20:00", rank=6),
        )

    v = case("12:44")
    assert v.hosts == ("gpu-n9",)
    assert any("every line of the same second" in r for r in v.reasons)
    assert case("13:44").hosts == ()  # two hosts in the input, none at that second: no guess


# -- a state report alone: a query tool's reading, not an event ------------------------------
# Labelled before running: nvidia-smi's reading alone is low; with the job failing on the
# same input, or the kernel's XID, it is corroborated and keeps its confidence.
@pytest.mark.parametrize(
    ("case", "files", "category", "confidence"),
    [
        ("smi alone", {"smi.txt": "$ nvidia-smi\nUnable to determine the device handle for GPU 00000000:86:00.0: GPU is lost.  Reboot the system to recover this GPU\n"},
         "infra", "low"),
        ("smi unknown error alone", {"smi.txt": "Unable to determine the device handle for GPU 0000:86:00.0: Unknown Error\n"},
         "infra", "low"),
        ("smi and the job's CUDA error", {"smi.txt": "Unable to determine the device handle for GPU 00000000:86:00.0: GPU is lost.\n",
                                          "rank3.err": "[rank3]: RuntimeError: CUDA error: unknown error\n"},
         "infra", "high"),
        ("smi and the kernel's XID", {"smi.txt": "Unable to determine the device handle for GPU 00000000:86:00.0: GPU requires reset\n",
                                      "dmesg": "[9921.33] NVRM: Xid (PCI:0000:86:00): 79, pid=4410, name=python, GPU has fallen off the bus.\n"},
         "infra", "high"),
    ],
)
def test_a_state_report_alone_is_low_confidence(case: str, files: dict[str, str], category: str, confidence: str) -> None:
    v = decide_text(files)
    assert (v.category, v.confidence) == (category, confidence), case
    lone = any("a reading of the device's state" in r for r in v.reasons)
    assert lone == (confidence == "low"), case


@pytest.mark.parametrize(
    ("time", "key"),
    [
        ("Jan 14 03:12:44", "01-14 03:12:44"),
        ("Sun Jan  4 03:12:44 2026", "01-04 03:12:44"),
        ("2026-01-14T03:12:44.118+00:00", "01-14 03:12:44"),
        ("2026-01-14 03:12:44,118", "01-14 03:12:44"),
        ("0114 03:12:44.118000", "01-14 03:12:44"),
        ("[401122.880114]", None),
        ("", None),
        (None, None),
    ],
)
def test_time_key(time: str | None, key: str | None) -> None:
    assert time_key(time) == key


def test_reasoning_leaves_evidence_without_cross_line_facts_alone() -> None:
    collector = EvidenceCollector()
    for e in (ev("cuda-oom", "gpu-1", rank=3), ev("nccl-watchdog-timeout", "gpu-2", rank=0)):
        collector.add(e)
    evidence = collector.evidence()
    after, notes = reason_across_lines(evidence)
    assert notes == () and after.tallies == evidence.tallies


# -- host memory is not GPU memory --------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "sig_id"),
    [
        ("[rank4]: RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
         "you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)", "host-memory-exhausted"),
        ("OSError: [Errno 12] Cannot allocate memory", "host-memory-exhausted"),
        ("[rank2]: MemoryError", "host-memory-exhausted"),
        ("terminate called after throwing an instance of 'std::bad_alloc'", "host-memory-exhausted"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB",
         "cuda-oom"),
    ],
)  # fmt: skip
def test_host_memory_is_told_apart_from_gpu_memory(line: str, sig_id: str) -> None:
    m = MATCHER.match_line(line)
    assert m is not None and m.signature.id == sig_id
    v = decide_text({"rank.log": line + "\n"})
    assert v.category == "job"
    if sig_id == "host-memory-exhausted":
        assert "host" in v.action.lower() or "RAM" in v.action
        assert "batch size" not in v.action
