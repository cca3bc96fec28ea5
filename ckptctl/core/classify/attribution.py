"""Line attribution: whom a log line names, from the line's *shape* alone (pure).

``attribute_line(text)`` returns the host, rank, local rank, GPU (PCI bus id or
CUDA index), peer (host or IP), pod and timestamp that the line's prefix or
wording carries, whatever signature (if any) matches the rest of it. The
shapes are an ordered table (``SHAPES``): syslog/journald (short, precise,
ISO), ``dmesg``/``dmesg -T``, NCCL's ``host:pid:tid [dev] <any file>:<line>
NCCL WARN`` (and older NCCL without the file), torchrun's ``[default3]:`` tee
prefix and failure table, torch's ``[rank3]:``/``[Rank 3]``/``[PG ... Rank 3]``,
Lightning's ``[rank: 0]``, Open MPI's ``[1,5]<stderr>:`` tags and process names,
``srun -l``/``srun: error: node: task N``, ``slurmstepd``'s ``ON host``, pdsh's
``host: `` prefix (DeepSpeed's multi-node launcher), Kubernetes ``pod/``,
``node/`` and ``kubectl describe`` headers, shell prompts (``user@host:~$``),
reverse DNS and ``/etc/hosts`` lines (an IP and the host behind it), and
peers named in connection errors (NCCL, gloo). Each shape fills only the
fields that no earlier shape filled. A file name that carries a host is the
adapter's business (``ckptctl.adapters.logs.host_from_name``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ckptctl.core.classify.catalog import MAX_EVIDENCE_CHARS

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HOSTNAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_IP = r"\d{1,3}(?:\.\d{1,3}){3}"
_ISO_TIME = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_SYSLOG_TIME = _MONTH + r"\s+\d{1,2}\s+\d\d:\d\d:\d\d(?:\.\d+)?"
_PCI = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
#: A host name, or one redacted by whoever posted the log ("...-48": the tail kept).
_HOST_OR_REDACTED = r"(?:\.\.\.-?[A-Za-z0-9][A-Za-z0-9_-]*|" + _HOSTNAME + ")"

#: ``(name, regex)`` in order; a field is taken from the first shape that gives it.
#: Shapes anchored with ``^`` are line prefixes; the others are searched.
SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        # "Mar 02 04:11:09 gpu-a07 kernel: ..." / "2025-01-19T11:02:13.1+00:00 h100-node-4 kernel: ..."
        ("syslog", r"^\s*(?:<\d{1,3}>\d?\s*)?(?P<time>" + _SYSLOG_TIME + "|" + _ISO_TIME + r")\s+"
         r"(?P<host>" + _HOSTNAME + r")\s+(?P<program>[\w./@()-]+)(?:\[\d+\])?:\s"),
        # "[Sun Mar  2 04:47:19 2025] NVRM: ..." (dmesg -T) / "[88412.004118] NVRM: ..." (dmesg)
        ("dmesg-T", r"^\[(?P<time>" + _WEEKDAY + r"\s+" + _MONTH + r"\s+\d{1,2} \d\d:\d\d:\d\d \d{4})\]"),
        ("dmesg", r"^\[\s*(?P<time>\d+\.\d{3,9})\]"),
        # NCCL: "gpu-d01:31201:31377 [3] transport/net_ib.cc:1696 NCCL WARN ..." with any
        # source file (net plugins log .c files) or none (NCCL < 2.10)
        # (a source file auto-linked by a markdown renderer, "transport/[net_ib.cc:101](http://...)",
        # and a host redacted by the poster, "...-48", are the same shape)
        ("nccl", r"(?:^|[\s\]:])(?P<host>" + _HOST_OR_REDACTED + r"):(?P<pid>\d+):\d+\s+\[(?P<gpu_index>\d+)\]\s+"
         r"(?:[\w./+-]*\[?[\w./+-]+:\d+(?:\]\([^)\s]{0,200}\))?\s+)?NCCL\s+(?:WARN|INFO|TRACE|ABORT|ERROR)\b"),
        # UCX: "[1712345678.123456] [gpu-a12:12345:0]   ib_mlx5_log.c:179  UCX  ERROR ..."
        ("ucx", r"^\[\d+\.\d+\]\s+\[(?P<host>" + _HOSTNAME + r"):(?P<pid>\d+)(?::\w+)*\]\s"),
        # UCX's own prefix without the clock (older releases, error dumps):
        # "[gpu-a12:19546:0:19546] ib_mlx5_log.c:139  Transport retry count exceeded on ..."
        ("ucx-proc", r"^\[(?P<host>" + _HOSTNAME + r"):(?P<pid>\d+):\d+:\d+\]\s"),
        # pdsh (DeepSpeed's multi-node runner): "gpu-e4: [rank11]: ..."
        # (the digit is found by a lookahead, the label read possessively: "[a-z0-9-]*\d[a-z0-9-]*"
        # backtracked quadratically on a long "a0a0..." line)
        ("pdsh", r"^(?:pdsh@\S+:\s+)?(?P<host>[a-z](?=[a-z0-9-]*\d)[a-z0-9-]*+(?:\.[a-z0-9-]+)*+):\s"),
        # Open MPI --tag-output: "[1,5]<stderr>:..."; its process name: "[gpu-f2:22871] *** ..."
        ("mpirun-tag", r"^\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>:"),
        ("openmpi-proc", r"(?:^|>:)\[(?P<host>" + _HOSTNAME + r"):(?P<pid>\d+)\]\s"),
        ("mpirun-noticed", r"process rank (?P<rank>\d+) with PID \d+ on node (?P<host>" + _HOSTNAME + ")"),
        # torchrun --tee: "[default5]:..." (role + local rank)
        ("torchrun-tee", r"^(?:\S+:\s+)?\[(?!rank)[A-Za-z_]+?(?P<local_rank>\d+)\]:"),
        # torch / Lightning / DeepSpeed: "[rank3]:", "[rank: 0]", "[Rank 3]", "[PG ID 0 ... Rank 2]"
        ("torch-rank", r"\[(?:rank:?\s?|(?:PG\b[^\]]*?\s)?Rank\s)(?P<rank>\d+)\]"),
        # Slurm: "srun: error: gpu-v2: task 3: ...", "Node failure on gpu-c07", "*** JOB 1 ON host CANCELLED AT"
        ("srun-task", r"srun: error: (?P<host>" + _HOSTNAME + r"): tasks? (?P<rank>\d+)"),
        ("srun-node", r"\b(?:srun|salloc|sbatch): error: Node failure on (?P<host>" + _HOSTNAME + ")"),
        ("slurmstepd", r"\*\*\* (?:JOB|STEP) \S+ (?:ON (?P<host>" + _HOSTNAME + r") )?CANCELLED AT (?P<time>\S+)"),
        ("srun-label", r"^(?P<rank>\d{1,5}): "),
        # torchrun failure table: "  host      : gpu-a1", "  rank      : 3 (local_rank: 3)", "  exitcode  : -9 (pid: 1)"
        # a torchrun failure record flattened onto one line (a log shipper such as CloudWatch
        # joins its fields): "... host : algo-2 rank : 2 (local_rank: 2) exitcode : -6 (pid: 189) ..."
        ("torchrun-record-flat", r"(?:^|\s)host\s+:\s+(?P<host>" + _HOSTNAME + r")\s+rank\s+:\s+(?P<rank>\d+)"
         r"\s+\(local_rank:\s+(?P<local_rank>\d+)\)(?:\s+exitcode\s+:\s+(?P<exitcode>-?\d+))?"),
        ("torchrun-table-host", r"^\s+host\s+:\s+(?P<host>" + _HOSTNAME + r")\s*$"),
        ("torchrun-table-rank", r"^\s+rank\s+:\s+(?P<rank>\d+)(?:\s+\(local_rank:\s+(?P<local_rank>\d+)\))?"),
        ("torchrun-table-exitcode", r"^\s+exitcode\s+:\s+(?P<exitcode>-?\d+)(?:\s+\(pid:\s+(?P<pid>\d+)\))?"),
        ("torchrun-agent", r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+)"
         r"(?: \(pid: (?P<pid>\d+)\))?"),
        # Kubernetes: events name "pod/x" and "node/y"; kubectl describe has "Name:" / "Node:" headers
        ("k8s-node", r"(?:^|\s)node/(?P<host>" + _HOSTNAME + r")(?:\s|$)"),
        ("k8s-pod", r"(?:^|\s)pod/(?P<pod>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)(?:\s|$)"),
        ("k8s-describe-node", r"^Node:\s+(?P<host>" + _HOSTNAME + r")(?:/" + _IP + r")?\s*$"),
        ("k8s-describe-name", r"^Name:\s+(?P<pod>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)\s*$"),
        ("node-name-field", r"\b(?:node[-_]?name|NodeName|hostname)\"?\s*[=:]\s*\"?(?P<host>" + _HOSTNAME + ")"),
        # shell prompts pasted with their output: "ops@gpu-b07:~$ nvidia-smi", "[root@gpu-b07 ~]# dmesg",
        # zsh's "ops@gpu-b07 ~ % dmesg", fish's "ops@gpu-b07 ~> dmesg"
        ("shell-prompt", r"^\[?[\w.-]+@(?P<host>" + _HOSTNAME + r")(?:[: ][^\s$#%>]*)?\]?\s?[$#%>](?:\s|$)"),
        # EC2 instance ids: libfabric's EFA errors ("My host id: i-... Peer host id: i-..."),
        # termination handlers and HyperPod ("instance-id=i-...", "InstanceId": "i-...")
        ("efa-host-id", r"\bMy host id: (?P<host>i-[0-9a-f]{8,17})\b"),
        ("efa-peer-host-id", r"\bPeer host id: (?P<peer>i-[0-9a-f]{8,17})\b"),
        ("instance-id", r"\b[Ii]nstance[-_ ]?[Ii][Dd]\"?\s*[=:]\s*\"?(?P<host>i-[0-9a-f]{8,17})\b"),
        # Ray: "(raylet, ip=10.0.0.7)", "(RayWorkerWrapper pid=11305, ip=10.0.0.7)", "at node (ID: ..., IP: 10.0.0.7)",
        # "... and address: 10.0.0.7 and node name: gpu-r3 has been marked dead"
        ("ray-node-name", r"\band node name: (?P<host>" + _HOSTNAME + r") has been marked dead"),
        # older Ray: "The node with node id: 8f20... and ip: 10.0.0.7 has been marked dead";
        # a task's node: "Task failed because the node it was running on is dead ... Node IP: 10.0.0.7,"
        ("ray-node-ip", r"\bnode id: [0-9a-f]+ and (?:ip|address): (?P<host>" + _IP + r") has been marked dead"),
        ("ray-task-node-ip", r"\bis dead or unavailable\. Node IP: (?P<host>" + _IP + r"),"),
        # "The actor is dead because its owner has died. Owner Id: ... Owner Ip address: 10.0.0.7 ..."
        ("ray-owner-ip", r"\bOwner Ip address: (?P<host>" + _IP + r")\b"),
        ("ray-ip", r"(?:\((?:[\w.]+,? )?(?:pid=\d+, )?ip=|\bat node \(ID: [0-9a-f]+, IP: )(?P<host>" + _IP + r")\)"),
        # an IP and the host behind it: reverse DNS (host / dig -x / nslookup) and /etc/hosts
        ("reverse-dns", r"(?P<peer>" + _IP + r")\.in-addr\.arpa\.?\s+(?:domain name pointer|name =|\d*\s*IN\s+PTR)\s+"
         r"(?P<peer_host>" + _HOSTNAME + ")"),
        ("hosts-file", r"^(?P<peer>" + _IP + r")\s+(?P<peer_host>[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?)(?:\s|$)"),
        # wording that names a node: "..., node: gpu-g05", "on node gpu-f2"
        ("text-node", r"\b(?:on node|[Nn]ode:|on host)\s+(?P<host>" + _HOSTNAME + ")"),
        # the other end of a connection: NCCL, gloo, sockets
        ("peer", r"\b(?:from peer|to peer|by (?:remote )?peer|remote peer|[Cc]onnect to)\s+\[?(?P<peer>"
         + _IP + "|" + _HOSTNAME + r")\]?(?:<\d+>|:\d+)?"),
        # an XID that names the earlier XID it follows from: "... due to Xid 48"
        ("xid-cause", r"\b(?:due to|after|caused by|following|because of|triggered by)\s+(?:an?\s+)?"
         r"(?:earlier\s+|previous\s+|prior\s+)?(?:Xid|XID)\s*(?P<cause_xid>\d+)"),
        # GPUs: the kernel's PCI bus id; a CUDA index
        ("pci", r"(?:PCI:|\bGPU ?|\bnvidia |NVIDIA GPU |\bamdgpu )(?P<gpu>" + _PCI + r")\b"),
        ("gpu-index", r"\b(?:GPU |cuda:|Device: )(?P<gpu_index>\d{1,2})\b"),
        # timestamps of other shapes: glog ("E0302 04:21:13.118000", "[E302 04:21:11.33]") and ISO
        ("glog-time", r"^(?:\[\w+\]:)*\[?[IWEF](?P<time>\d{3,4} \d\d:\d\d:\d\d\.\d+)"),
        ("iso-time", r"(?P<time>" + _ISO_TIME + ")"),
    )
)  # fmt: skip

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_IPV4 = re.compile(r"^" + _IP + "$")
_NOT_HOSTS = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "kernel", "unknown", "none", "n/a"})
#: A "host" that is really a source file ("[socket.cpp:1017]") or a log word.
_NOT_A_HOST = re.compile(
    r"\.(?:c|cc|cpp|cu|h|hpp|py|rs|go|java|log|txt)$|^(?:rank|task|step|epoch|iter|iteration)\d*$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class LineAttribution:
    """Who a line names, from its shape; None where the shape says nothing."""

    host: str | None = None
    """The host that wrote the line (or that the line is about), short (``normalize_host``)."""
    host_shape: str | None = None
    """Name of the shape that gave ``host`` (``syslog``, ``nccl``, ``shell-prompt``...)."""
    shapes: tuple[str, ...] = ()
    """Every shape the line has, in table order."""
    rank: int | None = None
    local_rank: int | None = None
    gpu: str | None = None
    """PCI bus id, normalised (``0000:3b:00``)."""
    gpu_index: int | None = None
    """CUDA device index on the host."""
    peer: str | None = None
    """The other end of a connection (IP or host), or the IP a DNS line resolves."""
    peer_host: str | None = None
    """The host behind ``peer`` when the line says it (reverse DNS, /etc/hosts)."""
    pod: str | None = None
    time: str | None = None
    """The timestamp as written (its format depends on the shape)."""
    pid: int | None = None
    cause_xid: int | None = None
    """An earlier XID the line names as its cause (``... due to Xid 48``)."""
    program: str | None = None
    """The program that wrote the line (the syslog tag: ``kernel``, ``python3``). Not a field
    of events: the writer of a line (kubelet, slurmd) is not the program that failed."""

    def fields(self) -> dict[str, str]:
        """The non-empty attributes as strings (the same names as signature groups)."""
        out: dict[str, str] = {}
        for name in (
            "host", "rank", "local_rank", "gpu", "gpu_index", "peer", "peer_host", "pod", "time", "pid",
            "cause_xid",
        ):  # fmt: skip
            value = getattr(self, name)
            if value is not None:
                out[name] = str(value)
        return out


def attribute_line(text: str) -> LineAttribution:
    """Host, rank, local rank, GPU, peer, pod and time that ``text``'s shape carries."""
    found: dict[str, str] = {}
    host_shape: str | None = None
    shapes: list[str] = []
    for name, rx in SHAPES:
        m = rx.search(text)
        if m is None:
            continue
        shapes.append(name)
        for key, value in m.groupdict().items():
            if value is None or key in found:
                continue
            if key in ("host", "peer_host") and not is_plausible_host(value):
                continue
            found[key] = value
            if key == "host":
                host_shape = name
        if name == "reverse-dns" and "peer" in found and found.get("peer_host"):
            found["peer"] = ".".join(reversed(found["peer"].split(".")))
    return LineAttribution(
        host=normalize_host(found.get("host")),
        host_shape=host_shape,
        shapes=tuple(shapes),
        rank=_int(found.get("rank")),
        local_rank=_int(found.get("local_rank")),
        gpu=normalize_pci(found.get("gpu")),
        gpu_index=_int(found.get("gpu_index")),
        peer=normalize_host(found.get("peer")),
        peer_host=normalize_host(found.get("peer_host")),
        pod=found.get("pod"),
        time=found.get("time"),
        pid=_int(found.get("pid")),
        cause_xid=_int(found.get("cause_xid")),
        program=found.get("program"),
    )


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def is_plausible_host(name: str) -> bool:
    """False for words that fill a host slot but are not hosts (source files, "rank3")."""
    return normalize_host(name) is not None and _NOT_A_HOST.search(name) is None


def normalize_host(name: str | None) -> str | None:
    """Short host name (``gpu-node-17`` for ``gpu-node-17.cluster.local``), or None.

    torchrun reports the FQDN, NCCL and syslog the short name; draining needs one
    spelling. IPv4 addresses and reverse-DNS names are kept whole.
    """
    if not name:
        return None
    name = name.strip()
    if name.startswith("...") and len(name) > 3:
        return name.rstrip(",;:")  # redacted by the poster: the visible tail is the name
    name = name.strip(".").rstrip(",;:")
    if not name or name.lower() in _NOT_HOSTS or name.startswith("<"):
        return None
    if _IPV4.match(name) or name.endswith(".arpa"):
        return name
    return name.split(".", 1)[0]


def normalize_pci(bus_id: str | None) -> str | None:
    """``0000:3b:00`` for ``PCI:0000:3B:00``, ``00000000:3B:00.0`` or ``0000:3b:00.0``."""
    if not bus_id:
        return None
    text = bus_id.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) != 3:
        return text
    domain, bus, device = parts
    device = device.split(".", 1)[0]
    return f"{domain[-4:].rjust(4, '0')}:{bus.rjust(2, '0')}:{device.rjust(2, '0')}"


def strip_ansi(text: str) -> str:
    return _ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


def clip_text(text: str, at: int = 0, limit: int = MAX_EVIDENCE_CHARS) -> str:
    """At most ``limit`` characters of ``text``, keeping position ``at`` in view."""
    text = text.rstrip("\r\n")
    if len(text) <= limit:
        return text
    start = max(0, min(at - limit // 4, len(text) - limit))
    piece = text[start : start + limit]
    return ("..." if start else "") + piece + ("..." if start + limit < len(text) else "")
