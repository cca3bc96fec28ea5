"""Collecting events over all files with bounded memory, and the frozen evidence (pure).

A multi-GB log can hold millions of NCCL timeout lines; the verdict needs their
count, hosts and ranks, and a few of them as evidence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ckptctl.core.classify.catalog import Signature
from ckptctl.core.classify.events import Event, FileScanner


@dataclass(frozen=True, kw_only=True, slots=True)
class SignatureTally:
    """How often one signature matched, and where."""

    signature: Signature
    count: int
    hosts: tuple[str, ...]
    num_hosts: int
    """Distinct hosts (``hosts`` may be truncated)."""
    samples: tuple[Event, ...]
    """The first events, in input order (bounded)."""
    num_ranks: int = 0
    """Distinct ranks named (counted up to the collector's bound)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """Everything the verdict needs, already bounded in size."""

    tallies: tuple[SignatureTally, ...]
    rank_hosts: Mapping[int, str]
    peer_hosts: Mapping[str, str] = field(default_factory=dict)
    """IP -> host, from reverse-DNS and /etc/hosts lines in the input."""
    num_files: int = 0
    num_lines: int = 0
    named_hosts: tuple[str, ...] = ()
    """Every host the input names, by any line shape (events, torchrun tables, section
    contexts such as a shell prompt or ``hostname: X``; not the far ends of links), at
    most ``NAMED_HOSTS_KEPT``: the verdict needs to know only whether there is exactly one."""
    file_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per file, the hosts its lines name (at most ``NAMED_HOSTS_KEPT``)."""
    time_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per second of the input (``time_key``), the hosts lines of that second name (at most
    ``NAMED_HOSTS_KEPT``)."""
    gpu_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per GPU PCI bus id, the hosts that lines naming it with a host name (a syslog-prefixed
    kernel line, the driver's ``GPU at PCI:`` line) pair it with (at most ``NAMED_HOSTS_KEPT``):
    bus ids repeat across machines, so only a unique pairing means anything."""
    collectives: Mapping[tuple[str, str, int], Event] = field(default_factory=dict)
    """Per (signature, process group, rank), the first watchdog line that names the
    collective the rank waits in or how far it got (seq, op, numel)."""
    programs: Mapping[str, Mapping[str, Event]] = field(default_factory=dict)
    """Per host, the first failure event of each program that the lines name as failing."""


#: How many distinct named hosts are kept (one is all the "only host" rule needs).
NAMED_HOSTS_KEPT = 2
#: Bounds of the cross-line indexes (collectives per rank, programs per host, seconds).
MAX_COLLECTIVES = 100_000
MAX_PROGRAM_HOSTS = 1000
MAX_PROGRAMS_PER_HOST = 16
MAX_TIMES = 100_000


class EvidenceCollector:
    """Accumulates events with bounded memory: counts, host sets and the first samples.

    A multi-GB log can hold millions of NCCL timeout lines; the verdict needs their
    count and hosts, and a few of them as evidence.
    """

    def __init__(self, *, max_samples: int = 20, max_hosts: int = 10_000) -> None:
        self.max_samples = max_samples
        self.max_hosts = max_hosts
        self._count: dict[str, int] = {}
        self._samples: dict[str, list[Event]] = {}
        self._hosts: dict[str, dict[str, None]] = {}
        self._unattributed_ranks: dict[str, set[int]] = {}
        self._ranks: dict[str, set[int]] = {}
        self._signatures: dict[str, Signature] = {}
        self.rank_hosts: dict[int, str] = {}
        self.peer_hosts: dict[str, str] = {}
        self.num_files = 0
        self.num_lines = 0
        self.section_hosts: dict[str, None] = {}
        self._file_hosts: dict[str, dict[str, None]] = {}
        self._time_hosts: dict[str, dict[str, None]] = {}
        self._gpu_hosts: dict[str, dict[str, None]] = {}
        self._collectives: dict[tuple[str, str, int], Event] = {}
        self._programs: dict[str, dict[str, Event]] = {}

    def add(self, event: Event) -> None:
        self._index(event)
        sid = event.signature.id
        self._signatures[sid] = event.signature
        self._count[sid] = self._count.get(sid, 0) + 1
        samples = self._samples.setdefault(sid, [])
        if len(samples) < self.max_samples:
            samples.append(event)
        if event.rank is not None:
            ranks = self._ranks.setdefault(sid, set())
            if len(ranks) < self.max_hosts:
                ranks.add(event.rank)
        if event.host is not None:
            hosts = self._hosts.setdefault(sid, {})
            if len(hosts) < self.max_hosts:
                hosts[event.host] = None
        elif event.rank is not None:
            ranks = self._unattributed_ranks.setdefault(sid, set())
            if len(ranks) < self.max_hosts:
                ranks.add(event.rank)

    def _index(self, event: Event) -> None:
        """The cross-line indexes: hosts per file and per second, collectives per rank,
        failing programs per host (bounded)."""
        host = event.host
        if host is not None and event.host_source in ("line", "section", "log envelope"):
            _add_bounded(self._file_hosts, event.file, host, len(self._file_hosts) < MAX_TIMES)
            key = time_key(event.time)
            if key is not None:
                _add_bounded(self._time_hosts, key, host, len(self._time_hosts) < MAX_TIMES)
            if event.gpu is not None:
                _add_bounded(self._gpu_hosts, event.gpu, host, len(self._gpu_hosts) < MAX_TIMES)
        if event.rank is not None and (event.seq is not None or event.op is not None):
            ckey = (event.signature.id, event.pg or "", event.rank)
            if ckey not in self._collectives and len(self._collectives) < MAX_COLLECTIVES:
                self._collectives[ckey] = event
        if (
            host is not None
            and event.program is not None
            and event.role in ("cause", "symptom")
            and event.category != "preemption"
        ):
            progs = self._programs.get(host)
            if progs is None and len(self._programs) < MAX_PROGRAM_HOSTS:
                progs = self._programs[host] = {}
            if progs is not None and len(progs) < MAX_PROGRAMS_PER_HOST:
                progs.setdefault(event.program, event)

    def add_file(self, scanner: FileScanner) -> None:
        """Record a finished file: its line count and its torchrun rank->host table."""
        self.num_files += 1
        self.num_lines += scanner.num_lines
        for rank, host in scanner.rank_hosts.items():
            if len(self.rank_hosts) < 1_000_000:
                self.rank_hosts.setdefault(rank, host)
        for ip, host in scanner.peer_hosts.items():
            if len(self.peer_hosts) < 100_000:
                self.peer_hosts.setdefault(ip, host)
        for gpu, paired in sorted(scanner.gpu_hosts.items()):
            for host in paired:
                _add_bounded(self._gpu_hosts, gpu, host, len(self._gpu_hosts) < MAX_TIMES)
        for host in sorted(scanner.section_hosts):
            if len(self.section_hosts) < 1000:
                self.section_hosts[host] = None
            _add_bounded(self._file_hosts, scanner.file, host, len(self._file_hosts) < MAX_TIMES)

    def evidence(self) -> Evidence:
        """Freeze what was collected; lines that named only a rank get its host now."""
        tallies = []
        for sid, count in self._count.items():
            hosts = dict(self._hosts.get(sid, {}))
            for rank in sorted(self._unattributed_ranks.get(sid, ())):
                host = self.rank_hosts.get(rank)
                if host is not None and len(hosts) < self.max_hosts:
                    hosts[host] = None
            samples = tuple(
                _attribute_peer(_attribute_rank(e, self.rank_hosts), self.peer_hosts)
                for e in self._samples[sid]
            )
            tallies.append(
                SignatureTally(
                    signature=self._signatures[sid],
                    count=count,
                    hosts=tuple(sorted(hosts)),
                    num_hosts=len(hosts),
                    samples=samples,
                    num_ranks=len(self._ranks.get(sid, ())),
                )
            )
        tallies.sort(key=lambda t: t.samples[0].order if t.samples else 0)
        named: dict[str, None] = {}
        for group in ([h for t in tallies for h in t.hosts], self.rank_hosts.values(), self.section_hosts):
            for h in group:
                if len(named) >= NAMED_HOSTS_KEPT:
                    break
                named[h] = None
        return Evidence(
            tallies=tuple(tallies),
            rank_hosts=dict(self.rank_hosts),
            peer_hosts=dict(self.peer_hosts),
            num_files=self.num_files,
            num_lines=self.num_lines,
            named_hosts=tuple(named),
            file_hosts={k: tuple(v) for k, v in self._file_hosts.items()},
            time_hosts={k: tuple(v) for k, v in self._time_hosts.items()},
            gpu_hosts={k: tuple(v) for k, v in self._gpu_hosts.items()},
            collectives=dict(self._collectives),
            programs={h: dict(p) for h, p in self._programs.items()},
        )


def _add_bounded(index: dict[str, dict[str, None]], key: str, host: str, may_grow: bool) -> None:
    hosts = index.get(key)
    if hosts is None:
        if not may_grow:
            return
        hosts = index[key] = {}
    if len(hosts) < NAMED_HOSTS_KEPT:
        hosts[host] = None


_MONTHS = {m: i for i, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
)}  # fmt: skip
_TIME_SHAPES = (
    # syslog "Jan 14 03:59:40", dmesg -T "Sun Jan 14 03:59:40 2026"
    re.compile(r"(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<hms>\d\d:\d\d:\d\d)"),
    # ISO "2026-01-14T03:59:40", "2026-01-14 03:59:40"
    re.compile(r"\d{4}-(?P<mnum>\d\d)-(?P<day>\d\d)[T _](?P<hms>\d\d:\d\d:\d\d)"),
    # glog "0114 03:59:40.118"
    re.compile(r"^(?P<mnum>\d\d)(?P<day>\d\d) (?P<hms>\d\d:\d\d:\d\d)"),
)


def time_key(time: str | None) -> str | None:
    """``MM-DD HH:MM:SS`` of a timestamp as the line wrote it, or None (relative dmesg
    seconds, unknown shapes): lines of one second from different tools compare equal."""
    if not time:
        return None
    for rx in _TIME_SHAPES:
        m = rx.search(time)
        if m is None:
            continue
        groups = m.groupdict()
        month = _MONTHS.get((groups.get("mon") or "").lower()) if groups.get("mon") else int(groups["mnum"])
        if not month:
            continue
        return f"{month:02d}-{int(groups['day']):02d} {groups['hms']}"
    return None


def _attribute_rank(event: Event, rank_hosts: Mapping[int, str]) -> Event:
    if event.host is None and event.rank is not None and event.rank in rank_hosts:
        return replace(event, host=rank_hosts[event.rank], host_source="rank map")
    return event


def _attribute_peer(event: Event, peer_hosts: Mapping[str, str]) -> Event:
    if event.peer is not None and event.peer in peer_hosts:
        return replace(event, peer_host=peer_hosts[event.peer])
    return event
