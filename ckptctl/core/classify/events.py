"""Events: the matched lines of one file, with the context other lines give them (pure).

Torchrun failure records attribute their traceback; shell prompts and
``kubectl describe`` headers open sections; reverse-DNS lines resolve peers;
the head of a multi-line kernel message gives its GPU to its continuation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ckptctl.core.classify.attribution import normalize_host, normalize_pci
from ckptctl.core.classify.catalog import (
    _CONFIDENCE_RANK,
    _SEVERITY_RANK,
    Category,
    Role,
    Signature,
)
from ckptctl.core.classify.scan import BlockScan, Matcher


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """One log line that matched a signature, with where it came from and whom it names."""

    signature: Signature
    file: str
    line: int
    """1-based line number in ``file``."""
    text: str
    host: str | None = None
    host_source: str | None = None
    """How ``host`` was found: ``line`` (its prefix or text), ``torchrun table``,
    ``rank map`` (torchrun's rank->host table) or ``file name``."""
    gpu: str | None = None
    """PCI bus id, ``0000:3b:00``."""
    gpu_index: int | None = None
    """CUDA device index on the host, when the line gives one."""
    rank: int | None = None
    local_rank: int | None = None
    xid: int | None = None
    signal: str | None = None
    exitcode: int | None = None
    peer: str | None = None
    """The other end of a failed connection the line names (host or IP)."""
    peer_host: str | None = None
    """The host behind ``peer`` when some line resolves it (reverse DNS, /etc/hosts)."""
    pod: str | None = None
    """The Kubernetes pod the line names (or whose ``kubectl describe`` it sits in)."""
    time: str | None = None
    """The line's timestamp as written."""
    cause_xid: int | None = None
    """An earlier XID the line names as its cause (``... due to Xid 48``)."""
    code: str | None = None
    """The vocabulary member the line names (a Slurm reason, an LSF ``TERM_*``, a
    Kubernetes reason...), for signatures that stand for a finite set."""
    program: str | None = None
    """The program the line says failed (``python3`` of a kernel segfault line, an
    XID's ``name=``, the syslog tag of a non-kernel program)."""
    pg: str | None = None
    """The process group of a collective (torch's ``PG ID``), when the line names it."""
    seq: int | None = None
    """The collective's sequence number (NCCL watchdog: ``SeqNum``)."""
    op: str | None = None
    """The collective's operation (``OpType=ALLREDUCE``)."""
    numel: int | None = None
    """The collective's input size in elements (``NumelIn``)."""
    first_failure: bool = False
    """Inside torchrun's "Root Cause (first observed failure)" record."""
    order: int = 0
    """Position in the input (file index, then line): earlier is smaller."""

    @property
    def role(self) -> Role:
        return self.signature.role

    @property
    def category(self) -> Category:
        return self.signature.category

    @property
    def strength(self) -> tuple[int, int]:
        return (
            _CONFIDENCE_RANK[self.signature.confidence],
            _SEVERITY_RANK[self.signature.severity],
        )


_SIGNAL_NAMES = {
    1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
    9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM",
}  # fmt: skip


def _int_or_none(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def _signal_of(fields: Mapping[str, str]) -> str | None:
    sig = fields.get("signal")
    if sig:
        sig = sig.strip().upper()
        if sig.isdigit():
            return _SIGNAL_NAMES.get(int(sig), f"signal {sig}")
        return sig if sig.startswith("SIG") else f"SIG{sig}"
    code = _int_or_none(fields.get("exitcode"))
    if code is not None and code < 0:  # torchrun: negative exit code = killed by signal
        return _SIGNAL_NAMES.get(-code, f"signal {-code}")
    if code is not None and code > 128 and code - 128 in _SIGNAL_NAMES:  # shells: 128+N
        return _SIGNAL_NAMES[code - 128]
    return None


#: Names the training process itself goes by (Python, torch's worker threads, the
#: launcher): failures under any of them are one program.
_TRAINER_PROGRAMS = frozenset({"python", "torchrun", "pt_main_thread", "pt_autograd", "pt_elastic", "ray"})


def _program_of(fields: Mapping[str, str]) -> str | None:
    """The failing program a line names, normalised (``python3.11`` and ``pt_main_thread``
    are the trainer, ``python``); the syslog tag only for programs other than the kernel."""
    name = fields.get("program")
    if not name:
        return None
    name = name.strip().strip("'\"").lower()
    if not name or name in ("kernel", "<unknown>", "unknown"):
        return None
    base = name.rstrip("0123456789.")
    for trainer in _TRAINER_PROGRAMS:
        if base.startswith(trainer):
            return "python"
    return name[:64]


@dataclass(slots=True)
class _Record:
    """One torchrun failure-table record (``[N]:`` followed by time/host/rank/...)."""

    first_line: int
    last_line: int
    fields: dict[str, str] = field(default_factory=dict)
    is_root: bool = False


def context_kind(sig: Signature) -> str:
    """What a context signature's lines do, from the groups its pattern captures:
    ``table-field`` (field/value: a torchrun failure-table field), ``name-resolution``
    (peer_host: an IP and the host behind it; the IP comes from ``attribute_line``), ``message-head`` (gpu: the head of a
    multi-line kernel message), ``section`` (host or pod: a shell prompt, a
    ``kubectl describe`` header; host_command: ``$ hostname``, whose output line
    ``Matcher.scan_block`` reads as the host), ``mention`` (a line whose prefix names
    a host of its file, not of the lines below it: NCCL's once-per-process init
    lines), ``header`` (none: torchrun's "Root Cause")."""
    kind = _CONTEXT_KINDS.get(sig.pattern)
    if kind is None:
        groups = set(re.compile(sig.pattern).groupindex)
        if "field" in groups:
            kind = "table-field"
        elif "peer_host" in groups:
            kind = "name-resolution"
        elif "mention" in groups:
            kind = "mention"
        elif "gpu" in groups:
            kind = "message-head"
        elif groups & {"host", "pod", "host_command"}:
            kind = "section"
        else:
            kind = "header"
        if len(_CONTEXT_KINDS) < 10_000:
            _CONTEXT_KINDS[sig.pattern] = kind
    return kind


_CONTEXT_KINDS: dict[str, str] = {}

#: How many lines after its head a kernel message may continue.
_CONTINUATION_LINES = 3

#: How far below its last field a torchrun record still attributes lines
#: (its ``traceback :`` field can hold a Python traceback of a few dozen lines).
_RECORD_REACH_LINES = 100


class FileScanner:
    """Turns the byte blocks of one log file into events (pure; the caller reads).

    Keeps the per-file state: line numbers, and the torchrun failure-table record
    the current line belongs to, so that the traceback field of a record is
    attributed to that record's host and rank.
    """

    def __init__(
        self, matcher: Matcher, *, file: str, file_index: int = 0, file_host: str | None = None
    ) -> None:
        self.matcher = matcher
        self.file = file
        self.file_host = normalize_host(file_host)
        self._file_index = file_index
        self.next_line = 1
        self.num_lines = 0
        self.num_matched_lines = 0
        """Lines that matched a signature (context lines included)."""
        self.rank_hosts: dict[int, str] = {}
        self.peer_hosts: dict[str, str] = {}
        """IP -> host from reverse-DNS and /etc/hosts lines."""
        self._record: _Record | None = None
        self._pending_root = False
        #: A section context (a shell prompt, a kubectl describe header) names the
        #: host/pod of the lines below it until the next one.
        self._section: dict[str, str] = {}
        #: The head of a multi-line kernel message ("NVRM: The NVIDIA GPU 0000:ca:00.0
        #: ...") and its line: its continuation lines inherit its GPU and host.
        self._message_head: tuple[int, dict[str, str]] | None = None
        #: Hosts named by section contexts (a shell prompt, ``hostname: X``), whatever
        #: lines follow them: with the events' hosts, the hosts this incident names.
        self.section_hosts: set[str] = set()
        #: GPU bus id -> the hosts mention lines name with it (the driver's "GPU at PCI"
        #: line with a syslog prefix); two per GPU at most (one is all the rule needs).
        self.gpu_hosts: dict[str, dict[str, None]] = {}

    def feed(self, block: bytes, *, fixed_line: int | None = None) -> list[Event]:
        """Events from one block of whole lines (the last may lack its newline).

        ``fixed_line`` pins every line of the block to one line number (a JSON
        error file's message, which sits on one line of the file).
        """
        return self.feed_scan(self.matcher.scan_block(block), fixed_line=fixed_line)

    def feed_scan(self, scan: BlockScan, *, fixed_line: int | None = None) -> list[Event]:
        """``feed`` for a block already matched by ``Matcher.scan_block`` (maybe elsewhere)."""
        matches, newlines = scan
        events: list[Event] = []
        for offset, index, fields, text in matches:
            line_no = self.next_line + offset if fixed_line is None else fixed_line
            event = self._event_for(self.matcher.signatures[index], dict(fields), text, line_no)
            if event is not None:
                events.append(event)
        if fixed_line is None:
            self.next_line += newlines
            self.num_lines += newlines
        else:
            self.num_lines = max(self.num_lines, fixed_line)
        return events

    def _event_for(self, sig: Signature, fields: dict[str, str], text: str, line_no: int) -> Event | None:
        self.num_matched_lines += 1
        if sig.role == "context":
            self._observe_context(sig, fields, line_no)
            return None
        if sig.role == "benign":
            return None
        sig = self._earlier_xid(sig, fields)
        head = self._message_head
        if (
            head is not None
            and 0 < line_no - head[0] <= _CONTINUATION_LINES
            and fields.get("host", head[1].get("host")) == head[1].get("host")
        ):
            for key, value in head[1].items():
                fields.setdefault(key, value)
        for key, value in self._section.items():
            if key not in fields:
                fields[key] = value
                if key == "host":
                    fields["host_source"] = "section"
        record = self._record
        # A line belongs to the record above it if it is close and names no other
        # rank ("[rank9]:..." after the table is rank 9's, not the record's).
        in_record = (
            record is not None
            and line_no - record.last_line <= _RECORD_REACH_LINES
            and fields.get("rank", record.fields.get("rank")) == record.fields.get("rank")
        )
        if record is not None and in_record:
            for key in ("host", "rank", "local_rank", "exitcode"):
                if key not in fields and key in record.fields:
                    fields[key] = record.fields[key]
                    if key == "host":
                        fields["host_source"] = "torchrun table"
        host = normalize_host(fields.get("host"))
        host_source = fields.get("host_source") if host else None
        if host is None and fields.get("envelope_host"):
            host, host_source = normalize_host(fields["envelope_host"]), "log envelope"
        if host is None and self.file_host is not None:
            host, host_source = self.file_host, "file name"
        xid = _int_or_none(fields.get("xid"))
        return Event(
            signature=sig,
            file=self.file,
            line=line_no,
            text=text,
            host=host,
            host_source=host_source,
            gpu=normalize_pci(fields.get("gpu")),
            gpu_index=_int_or_none(fields.get("gpu_index")),
            rank=_int_or_none(fields.get("rank")),
            local_rank=_int_or_none(fields.get("local_rank")),
            xid=xid if xid is not None else sig.xid,
            signal=_signal_of(fields),
            exitcode=_int_or_none(fields.get("exitcode")),
            peer=normalize_host(fields.get("peer")),
            pod=fields.get("pod") or fields.get("envelope_pod"),
            time=fields.get("time"),
            cause_xid=_int_or_none(fields.get("cause_xid")),
            code=fields.get("code"),
            program=_program_of(fields),
            pg=fields.get("pg"),
            seq=_int_or_none(fields.get("seq")),
            op=fields.get("op"),
            numel=_int_or_none(fields.get("numel")),
            first_failure=bool(record is not None and in_record and record.is_root),
            order=self._file_index * 10_000_000_000 + line_no,
        )

    def _earlier_xid(self, sig: Signature, fields: dict[str, str]) -> Signature:
        """An XID line that names the earlier XID it follows from ("... caused by previous
        Xid 149") is evidence of that XID on the same GPU, when the earlier one is a
        stronger cause (an XID 45 cleanup after an NVLink XID 149 is the NVLink error)."""
        if sig.xid_report:
            # Another tool's report of an XID: the code's own catalog entry decides.
            code = _int_or_none(fields.get("xid"))
            index = None if code is None else self.matcher.xid_signatures.get(code)
            return sig if index is None else self.matcher.signatures[index]
        earlier = _int_or_none(fields.get("cause_xid"))
        if sig.xid is None or earlier is None or earlier == sig.xid:
            return sig
        index = self.matcher.xid_signatures.get(earlier)
        if index is None:
            return sig
        cause = self.matcher.signatures[index]
        if cause.role != "cause" or (
            sig.role == "cause"
            and (_CONFIDENCE_RANK[cause.confidence], _SEVERITY_RANK[cause.severity])
            <= (_CONFIDENCE_RANK[sig.confidence], _SEVERITY_RANK[sig.severity])
        ):
            return sig
        fields["xid"] = str(earlier)
        return cause

    def _observe_context(self, sig: Signature, fields: dict[str, str], line_no: int) -> None:
        """Context lines: torchrun table fields and headers, section headers (a
        shell prompt, ``kubectl describe``'s Name/Node), name resolutions, and the
        heads of multi-line kernel messages. Which kind a line is follows from the
        groups its signature captures."""
        kind = context_kind(sig)
        if kind == "name-resolution":
            if fields.get("peer") and fields.get("peer_host") and len(self.peer_hosts) < 100_000:
                self.peer_hosts[fields["peer"]] = normalize_host(fields["peer_host"]) or fields["peer_host"]
            return
        if kind == "message-head":
            self._message_head = (line_no, {k: fields[k] for k in ("gpu", "host") if k in fields})
            return
        if kind in ("section", "mention"):
            if kind == "section":
                # A later prompt or header replaces what it names (host, pod).
                self._section.update({k: fields[k] for k in ("host", "pod") if k in fields})
            named = normalize_host(fields.get("host"))
            if named is not None and len(self.section_hosts) < 1000:
                self.section_hosts.add(named)
            gpu = normalize_pci(fields.get("gpu")) if kind == "mention" else None
            if named is not None and gpu is not None and (gpu in self.gpu_hosts or len(self.gpu_hosts) < 1000):
                paired = self.gpu_hosts.setdefault(gpu, {})
                if len(paired) < 2:
                    paired[named] = None
            return
        name = fields.get("field")
        if name is None:
            # A header ("Root Cause (first observed failure):"): the next record is the root.
            self._pending_root = True
            return
        value = fields.get("value", "").strip()
        record = self._record
        starts_new = (
            record is None
            or name in record.fields
            or line_no - record.last_line > 8  # fields of one record are adjacent
        )
        if starts_new:
            record = _Record(first_line=line_no, last_line=line_no, is_root=self._pending_root)
            self._pending_root = False
            self._record = record
        assert record is not None
        record.last_line = line_no
        record.fields[name] = value
        for key in ("host", "rank", "local_rank", "exitcode", "pid"):
            if fields.get(key):
                record.fields[key] = fields[key]
        rank = _int_or_none(record.fields.get("rank"))
        host = normalize_host(record.fields.get("host"))
        if rank is not None and host is not None:
            self.rank_hosts[rank] = host
