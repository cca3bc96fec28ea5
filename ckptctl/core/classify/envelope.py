"""Log envelopes: the line a producer wrote, inside what a log platform or launcher wrapped it in (pure).

Crash logs reach ``classify`` pasted from log platforms and launchers, so the
same NCCL, kernel or Python line arrives wrapped:

* JSON per line: Docker's json-file and Fluentd/Fluent Bit (``log``), journald
  ``-o json`` (``MESSAGE``, ``_HOSTNAME``), GCP Cloud Logging (``textPayload``,
  ``jsonPayload.message``, ``resource.labels.pod_name/node_name``), CloudWatch
  (``message``, ``@message``), Vector, Filebeat/ECS (``host.name``,
  ``kubernetes.pod.name``), Loki's JSON lines (``line``), OpenTelemetry
  (``body``), Python JSON loggers and Ray's JSON logs (``message`` with the
  traceback in ``exc_info``/``exc_text``); a traceback sits inside one JSON
  string with escaped newlines;
* a launcher's or aggregator's prefix: ``kubectl logs --prefix``
  (``[pod/NAME/CONTAINER] ``), stern (``POD CONTAINER ``), docker compose
  (``svc-1  | ``), Ray (``(RayTrainWorker pid=1, ip=10.0.0.5) ``), Open MPI
  ``--tag-output`` (``[1,3]<stderr>:``) and Horovod (``[3]<stderr>:``), pdsh
  (``host: ``), ``srun -l`` (``3: ``), torchrun (``[default3]:``, ``[rank3]:``),
  Loki's ``logcli`` (``TIME {labels} ``), CRI container logs (``TIME stderr F ``),
  CI timestamps (``2024-05-01T10:00:00.1234567Z ``), syslog forwarding
  (``TIME host program[pid]: ``);
* paste mess: Markdown quotes (``> ``), HTML-escaped text (``&quot;``, ``&gt;``),
  carriage-return progress bars (the text after the last ``\\r`` is what the
  terminal showed).

``looks_enveloped`` is the cheap test the matcher runs on candidate lines only;
``unwrap`` peels the layers (at most ``MAX_LAYERS``) and returns the inner lines
(a JSON message may hold several) and what the envelope names (host, pod, rank,
local rank). Signatures are matched on the inner lines; the envelope's names
fill the fields the inner line's own shape did not give.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Peeled layers at most (a JSON record holding a prefixed line holding a JSON line...).
MAX_LAYERS = 6
#: A JSON envelope longer than this is not decoded (the raw line is matched as before).
MAX_JSON_CHARS = 256 * 1024
#: Inner lines taken from one envelope at most (a traceback in one JSON string).
MAX_INNER_LINES = 400
#: Bytes of a block looked at to tell a paste cut at a fixed width (``join_hard_wrapped``).
WRAP_SAMPLE_BYTES = 256 << 10
#: Lines at the width, at least, before a block is read as cut (and one in ``WRAP_SHARE`` lines).
MIN_WRAPPED_LINES, WRAP_SHARE = 2, 12
#: The widths terminals, ``fold``, mail and viewers cut at by default. Only these: lines of one
#: template (a torch ``what():`` line per rank) share an odd longest width without being cut.
COMMON_WRAP_WIDTHS = frozenset({72, 76, 78, 79, 80, 100, 120, 132, 140, 150, 160, 200, 240, 250})
#: Characters whose run ends a line drawn to a width (a rule: "=====", "-----"), not cut there.
_DRAWN_ENDS = frozenset(b"=-*#_~+")

_HOSTNAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_IP = r"\d{1,3}(?:\.\d{1,3}){3}"
_ISO_TIME = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
#: A Kubernetes object name that a controller made (a hyphen and a digit in its last part).
_K8S_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{0,252}-[a-z0-9]{0,63}\d[a-z0-9]{0,63}")

#: The first bytes of an enveloped line (checked on candidate lines only).
_LOOKS_ENVELOPED = re.compile(
    rb"\s*(?:\{\"|>|\[pod/|\(\w+ pid=|\(pid=|\[\d+(?:,\d+)?\]<std|[a-z0-9][a-z0-9.-]*+ [a-z0-9][a-z0-9-]*+ |"
    rb"[\w.-]++ +\| |\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) |"
    rb"\x1b|\d{1,5}: |\[[A-Za-z_]+\d+\]:|[a-z](?=[a-z0-9-]*\d)[a-z0-9-]*+(?:\.[a-z0-9-]+)*+: |"
    + _MONTH.encode() + rb"\s+\d{1,2} \d\d:\d\d:\d\d \S+ (?!kernel:)[\w./@()-]+(?:\[\d+\])?: |"
    rb"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S* \S+ (?!kernel:)[\w./@()-]+(?:\[\d+\])?: )"
)
#: A JSON key among ``MESSAGE_KEYS`` (their first parts).
_JSON_MESSAGE_KEY = re.compile(
    rb'"(?:log|MESSAGE|textPayload|jsonPayload|message|msg|@message|line|body|Body|event|log\.original)"\s*:'
)
_HTML_ENTITY = re.compile(rb"&(?:quot|gt|lt|amp|apos|#39|#x27|#34);")

#: ``(name, regex)``: a prefix at the start of the line; its named groups are what it names.
PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("markdown-quote", r"^(?:>[ \t]?)+"),
        # kubectl logs --prefix (1.17+): "[pod/trainer-0/pytorch] "
        ("kubectl-prefix", r"^\[pod/(?P<pod>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)/[a-z0-9-]+\] "),
        # CRI container log files (/var/log/pods/...): "2024-05-01T10:00:00.1Z stderr F "
        ("cri", r"^(?P<time>" + _ISO_TIME + r") (?:stdout|stderr) [FP] "),
        # Loki logcli default output: "2024-05-01T10:00:00Z {node="gpu-3", pod="trainer-0"} "
        ("logcli", r"^(?P<time>" + _ISO_TIME + r") (?P<labels>\{[^{}]{0,2000}\}) "),
        # syslog forwarded with its tag: "May  1 10:00:00 gpu-7 python3[4242]: "
        ("syslog", r"^(?P<time>" + _MONTH + r"\s+\d{1,2} \d\d:\d\d:\d\d|" + _ISO_TIME + r") (?P<host>"
         + _HOSTNAME + r") (?!kernel:)[\w./@()-]+(?:\[\d+\])?: "),
        # CI runners (GitHub Actions, Buildkite) and aws logs tail: one ISO timestamp, then the line
        # (not a syslog line's own clock: "TIME host program[pid]: " is read whole by the line's shape)
        ("timestamp", r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) "
         r"(?!\S+ [\w./@()-]+(?:\[\d+\])?: )"),
        # Ray's worker output: "(RayTrainWorker pid=4242, ip=10.0.0.5) ", "(pid=4242) "
        ("ray", r"^\((?:[\w.:-]+ )?pid=\d+(?:, ip=(?P<host>" + _IP + r"))?(?:, [\w]+=[^,)\s]+)*\) "),
        # Open MPI --tag-output "[1,3]<stderr>:", Horovod's "[3]<stderr>:"
        ("mpirun-tag", r"^\[(?:\d+,)?(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>:"),
        # stern: "trainer-worker-0 pytorch " (pod, container)
        # (the pod name is checked against _K8S_NAME once cut: read possessively, the line stays linear)
        ("stern", r"^(?P<pod>[a-z0-9][a-z0-9.-]{0,252}+) [a-z0-9][a-z0-9-]{0,62}+ "),
        # docker compose: "trainer-1  | "
        ("compose", r"^[\w.-]+ +\| "),
        # pdsh / DeepSpeed's multi-node runner: "gpu-node7: "
        ("pdsh", r"^(?P<host>[a-z](?=[a-z0-9-]*\d)[a-z0-9-]*+(?:\.[a-z0-9-]+)*+): "),
        # srun -l: "3: "
        ("srun-label", r"^(?P<rank>\d{1,5}): "),
        # torchrun --tee / --log-line-prefix-template default: "[default3]:"
        ("torchrun-tee", r"^\[(?!rank)[A-Za-z_]+?(?P<local_rank>\d+)\]:"),
    )
)  # fmt: skip

#: JSON keys holding the line, in order of preference (a dotted name is a nested key).
MESSAGE_KEYS = (
    "log", "MESSAGE", "textPayload", "jsonPayload.message", "jsonPayload.MESSAGE", "jsonPayload.msg",
    "jsonPayload.log",
    "message", "msg", "@message", "line", "body", "Body", "event.original", "log.original",
)  # fmt: skip
#: Keys holding a traceback next to the message (python-json-logger ``exc_info``, Ray ``exc_text``).
TRACEBACK_KEYS = ("exc_info", "exc_text", "stack_trace", "stacktrace", "traceback", "error.stack_trace")
#: Keys naming the machine.
HOST_KEYS = (
    "_HOSTNAME", "jsonPayload._HOSTNAME", "kubernetes.host", "kubernetes.node_name", "kubernetes.pod_node_name",
    "kubernetes.node.name", "resource.labels.node_name", "labels.compute.googleapis.com/resource_name",
    "host.name", "host.hostname", "hostname", "host", "node_name", "nodeName", "NodeName", "node",
    "resource.labels.instance_id",
)  # fmt: skip
#: Keys naming the Kubernetes pod.
POD_KEYS = (
    "kubernetes.pod_name", "kubernetes.pod.name", "resource.labels.pod_name", "pod_name", "pod",
    "k8s.pod.name", "labels.pod", "kubernetes.labels.pod",
)  # fmt: skip
#: Keys naming the rank.
RANK_KEYS = ("rank", "global_rank", "RANK")

#: logcli label names, as above.
_LABEL_HOST = ("node", "node_name", "nodename", "host", "hostname", "instance")
_LABEL_POD = ("pod", "pod_name")
_LABEL = re.compile(r'(?<!\w)(\w++)="((?:[^"\\]|\\.){0,253})"')
_PLAUSIBLE_NAME = re.compile(r"^" + _HOSTNAME + "$")


@dataclass(slots=True)
class Unwrapped:
    """The inner lines of an enveloped line and what its envelopes name."""

    lines: list[str]
    fields: dict[str, str] = field(default_factory=dict)
    layers: tuple[str, ...] = ()


def join_hard_wrapped(block: bytes) -> tuple[bytes, list[int]] | None:
    """``block`` with the lines a paste cut at a fixed width joined again, and for each
    joined line the index of its first piece; None when ``block`` is not cut so.

    A terminal, ``fold`` or a viewer cuts every longer line at one width W: no line is
    longer than W, several are exactly W, and they end mid-text (not in a table's
    border). Each line of exactly W is joined with the next. Only the head of the
    block (``WRAP_SAMPLE_BYTES``) is measured.
    """
    sample = block[:WRAP_SAMPLE_BYTES]
    lines = sample.split(b"\n")
    if len(lines) < 2 * MIN_WRAPPED_LINES:
        return None  # a line and its cut-off rest at least
    lengths = [len(line.rstrip(b"\r")) for line in lines[:-1]]
    width = max(lengths)
    if width not in COMMON_WRAP_WIDTHS:
        return None
    full = [line.rstrip(b"\r") for line, n in zip(lines, lengths, strict=False) if n == width and _is_cut(line)]
    cut = len(full)
    if 2 * sum(1 for line in full if line.endswith(b" ")) > cut:
        return None  # lines padded with blanks to the width: a table, not a cut
    if cut < MIN_WRAPPED_LINES or cut * WRAP_SHARE < len(lengths):
        return None
    out: list[bytes] = []
    first_piece: list[int] = []
    pending: list[bytes] = []
    start = 0
    for index, line in enumerate(block.split(b"\n")):
        if not pending:
            start = index
        body = line.rstrip(b"\r")
        if len(body) == width and _is_cut(body):
            pending.append(body)
            continue
        out.append(b"".join(pending) + line)
        first_piece.append(start)
        pending = []
    if pending:
        out.append(b"".join(pending))
        first_piece.append(start)
    return b"\n".join(out), first_piece


def _is_cut(line: bytes) -> bool:
    """A full-width line that was cut, not drawn to the width: a table row or box side
    (``| ... |``, ``+---+``) or a rule (``=====``) ends in its border."""
    body = line.rstrip(b"\r")
    if not body or body[-1] >= 0x80 or body[-1:] in (b"|", b"}"):
        return False  # a table's border, a whole JSON record
    tail = body[-3:]
    if tail[-1] in _DRAWN_ENDS and tail == bytes([tail[-1]]) * 3:
        return False
    return not (body.lstrip()[:1] == b"+" and body[-1:] == b"+")


def escaped_forms(keyword: str) -> tuple[str, ...]:
    """How ``keyword`` reads inside a JSON string (one or two levels deep: an application's
    JSON line inside a collector's record) and in HTML-escaped text, where that differs."""
    forms = {keyword, html.escape(keyword, quote=True)}
    if keyword.endswith(("\n", "\r")):
        # a keyword that ends the line: a JSON string ends with its quote, a coloured
        # line with the colour reset
        forms.update((keyword[:-1] + '"', keyword[:-1] + "\x1b"))
    for _ in range(2):
        forms.update([_json_escaped(form) for form in forms])
    forms.discard(keyword)
    return tuple(sorted(forms))


def _json_escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def looks_enveloped(line: bytes) -> bool:
    """Cheap test: may ``line`` (raw bytes) be wrapped in an envelope ``unwrap`` reads?"""
    m = _LOOKS_ENVELOPED.match(line)
    if m is not None:
        # a JSON line is a record wrapping a line only with a message key (not a metrics line)
        return not m.group().endswith(b'{"') or _JSON_MESSAGE_KEY.search(line) is not None
    if b"&" in line and _HTML_ENTITY.search(line) is not None:
        return True
    cr = line.find(b"\r")
    return cr != -1 and cr < len(line.rstrip(b"\r\n")) - 1


def unwrap(text: str) -> Unwrapped | None:
    """The lines inside ``text``'s envelopes, or None when ``text`` has none."""
    fields: dict[str, str] = {}
    layers: list[str] = []
    pending = [text.rstrip("\r\n")]
    done: list[str] = []
    for _ in range(MAX_LAYERS):
        following: list[str] = []
        peeled = False
        for line in pending:
            inner = _peel(line, fields, layers)
            if inner is None:
                done.append(line)
            else:
                peeled = True
                following.extend(inner)
            if len(done) + len(following) >= MAX_INNER_LINES:
                break
        pending = following[:MAX_INNER_LINES]
        if not peeled:
            break
    done.extend(pending)
    if not layers:
        return None
    return Unwrapped(lines=done[:MAX_INNER_LINES], fields=fields, layers=tuple(layers))


def _peel(line: str, fields: dict[str, str], layers: list[str]) -> list[str] | None:
    """One layer off ``line``: its inner lines (recording the layer's names), or None."""
    stripped = line.strip()
    if stripped.startswith("{") and stripped.endswith("}") and len(stripped) <= MAX_JSON_CHARS:
        record = _json_record(stripped)
        inner = None if record is None else _json_inner(record, fields)
        if inner is not None:
            layers.append("json")
            return inner
    if "\r" in line.rstrip("\r"):
        layers.append("carriage-return")
        return [piece for piece in line.split("\r") if piece.strip()][-1:] or [""]
    if "&" in line and _HTML_ENTITY.search(line.encode("utf-8", "replace")) is not None:
        layers.append("html")
        return [html.unescape(line)]
    for name, rx in PREFIXES:
        m = rx.match(line)
        if m is None or m.end() == 0 or (name == "stern" and _K8S_NAME.fullmatch(m["pod"]) is None):
            continue
        layers.append(name)
        for key, value in m.groupdict().items():
            if value is None:
                continue
            if key == "labels":
                _label_fields(value, fields)
            else:
                fields.setdefault(key, value)
        return [line[m.end() :]]
    return None


def _json_record(text: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _lookup(doc: Mapping[str, Any], dotted: str) -> Any:
    """``doc["a"]["b"]`` for ``"a.b"``; a key that itself holds dots is tried whole first."""
    if dotted in doc:
        return doc[dotted]
    head, _, rest = dotted.partition(".")
    while rest:
        value = doc.get(head)
        if isinstance(value, dict):
            found = _lookup(value, rest)
            if found is not None:
                return found
        nxt, _, rest = rest.partition(".")
        head = head + "." + nxt
    return None


def _json_inner(doc: dict[str, Any], fields: dict[str, str]) -> list[str] | None:
    """The lines of a log record's message (and traceback), or None when ``doc`` has no
    message (a JSON document such as a metadata service's answer, read as it is)."""
    message: Any = None
    for key in MESSAGE_KEYS:
        message = _lookup(doc, key)
        if isinstance(message, str):
            break
    if not isinstance(message, str):
        return None
    for keys, name in ((HOST_KEYS, "host"), (POD_KEYS, "pod"), (RANK_KEYS, "rank")):
        if name not in fields:
            value = _first_name(doc, keys, digits=name == "rank")
            if value is not None:
                fields[name] = value
    lines = message.rstrip("\r\n").split("\n")
    for key in TRACEBACK_KEYS:
        value = _lookup(doc, key)
        if isinstance(value, str) and value.strip():
            lines.extend(value.rstrip("\r\n").split("\n"))
            break
    return lines[:MAX_INNER_LINES]


def _first_name(doc: Mapping[str, Any], keys: tuple[str, ...], *, digits: bool) -> str | None:
    """The first of ``keys`` that holds a plausible name (a rank: a number)."""
    for key in keys:
        value = _lookup(doc, key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and digits:
            return str(value)
        if isinstance(value, str) and _PLAUSIBLE_NAME.match(value) and (not digits or value.isdigit()):
            return value
    return None


def _label_fields(labels: str, fields: dict[str, str]) -> None:
    """Host and pod from logcli's ``{key="value", ...}`` stream labels."""
    found = dict(_LABEL.findall(labels))
    for keys, name in ((_LABEL_HOST, "host"), (_LABEL_POD, "pod")):
        for key in keys:
            value = found.get(key)
            if value and _PLAUSIBLE_NAME.match(value) and name not in fields:
                fields[name] = value
                break
