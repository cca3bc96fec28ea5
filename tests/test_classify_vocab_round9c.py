"""Round-9c reader rules (issue 22): the lines classify knows, inside the envelopes log platforms
and launchers wrap them in (ckptctl.core.classify.envelope).

Every base line below is read bare and then inside each envelope of the family (JSON records of
Docker/Fluent Bit, journald, Cloud Logging, CloudWatch, Loki, OpenTelemetry, Python JSON loggers;
the prefixes of kubectl --prefix, stern, docker compose, Ray, Open MPI/Horovod, pdsh, srun -l,
torchrun, logcli, CRI, CI runners, syslog forwarding; Markdown quotes, HTML escapes, carriage-return
progress bars, ANSI colours, pastes cut at a fixed width): the verdict must not change. Lines written
for this test in each producer's format; the envelope formats are the producers' documented ones.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable

import pytest

from ckptctl.core.classify.envelope import join_hard_wrapped, looks_enveloped, unwrap
from tests.classify_helpers import MATCHER, verdict_of

#: (bare line, signature it matches bare, category, confidence): one line per family of producer.
BASE_LINES = [
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python3, GPU has fallen off the bus.",
     "xid-79", "infra", "high"),
    ("gpu-a07:31201:31377 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
     "10.0.0.12<57720> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.11",
     None, "infra", None),
    ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
     "capacity of 79.15 GiB of which 1.50 GiB is free.", None, "job", None),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", None, "infra", None),
    ("AssertionError", None, "job", None),
]  # fmt: skip


def _json(message: str, **extra: object) -> str:
    return json.dumps({"message": message, **extra})


#: name -> wraps one line (documented line formats of each producer).
ENVELOPES: dict[str, Callable[[str], str]] = {
    "docker-json-file": lambda line: json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-01-14T03:12:44Z"}),
    "fluent-bit": lambda line: json.dumps({"log": line, "kubernetes": {"pod_name": "trainer-0", "host": "node-a1"}}),
    "journald-json": lambda line: json.dumps({"_HOSTNAME": "gpu-node-9", "SYSLOG_IDENTIFIER": "python3", "MESSAGE": line}),
    "gcp-textpayload": lambda line: json.dumps(
        {"textPayload": line, "resource": {"type": "k8s_container", "labels": {"pod_name": "trainer-0"}}}),
    "gcp-jsonpayload": lambda line: json.dumps({"jsonPayload": {"message": line}, "severity": "ERROR"}),
    "cloudwatch-insights": lambda line: json.dumps({"@timestamp": "2026-01-14 03:12:44.118", "@message": line}),
    "loki-jsonl": lambda line: json.dumps({"labels": {"pod": "trainer-0"}, "line": line}),
    "otel": lambda line: json.dumps({"body": line, "severityText": "ERROR"}),
    "python-json-logger": lambda line: _json(line, levelname="ERROR", name="train"),
    "klog-structured": lambda line: json.dumps({"ts": 1768360364.118, "caller": "main.go:42", "msg": line}),
    "json-in-json": lambda line: json.dumps({"log": json.dumps({"msg": line}) + "\n"}),
    "kubectl-prefix": lambda line: "[pod/trainer-worker-0/pytorch] " + line,
    "stern": lambda line: "trainer-worker-0 pytorch " + line,
    "docker-compose": lambda line: "trainer-1  | " + line,
    "ray": lambda line: "(RayTrainWorker pid=4242, ip=10.0.0.5) " + line,
    "ray-short": lambda line: "(pid=4242) " + line,
    "openmpi-tag": lambda line: "[1,3]<stderr>:" + line,
    "horovod-tag": lambda line: "[3]<stderr>:" + line,
    "pdsh": lambda line: "gpu-node7: " + line,
    "srun-label": lambda line: "3: " + line,
    "torchrun-tee": lambda line: "[default3]:" + line,
    "logcli": lambda line: '2026-01-14T03:12:44Z {node="gpu-node-4", pod="trainer-0"} ' + line,
    "cri": lambda line: "2026-01-14T03:12:44.118211000Z stderr F " + line,
    "ci-timestamp": lambda line: "2026-01-14T03:12:44.1182110Z " + line,
    "syslog-forward": lambda line: "Jan 14 03:12:44 gpu-node7 python3[4242]: " + line,
    "markdown-quote": lambda line: "> " + line,
    "html-escaped": lambda line: html.escape(line),
    "ansi": lambda line: "\x1b[31m" + line + "\x1b[0m",
    "carriage-return": lambda line: "Epoch 3:  41%|████      | 410/1000 [01:02<01:30]\r" + line,
    "layered": lambda line: "> [pod/trainer-0/pytorch] 2026-01-14T03:12:44.1Z stderr F [default3]:" + line,
}  # fmt: skip


@pytest.mark.parametrize("envelope", sorted(ENVELOPES))
@pytest.mark.parametrize("base", range(len(BASE_LINES)))
def test_a_line_reads_the_same_inside_its_envelope(envelope: str, base: int) -> None:
    line, sig_id, category, confidence = BASE_LINES[base]
    bare = verdict_of(line + "\n")
    assert bare.category == category, (line, bare.category)
    if sig_id is not None:
        assert bare.root_cause is not None and bare.root_cause.signature.id == sig_id
    if confidence is not None:
        assert bare.confidence == confidence
    wrapped = verdict_of(ENVELOPES[envelope](line) + "\n")
    assert (wrapped.category, wrapped.confidence) == (bare.category, bare.confidence), (envelope, line)
    assert (wrapped.root_cause and wrapped.root_cause.signature.id) == (bare.root_cause and bare.root_cause.signature.id)


def test_a_traceback_inside_one_json_string_reads_as_its_lines() -> None:
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 88, in <module>\n'
        "    assert cfg.seq_len % cfg.block == 0\n"
        "AssertionError\n"
    )
    for record in (
        {"message": "step failed", "exc_info": traceback, "levelname": "ERROR"},  # python-json-logger
        {"message": "Task failed", "exc_text": traceback},  # Ray's JSON logs
        {"log": traceback},  # one Docker record holding the whole traceback
    ):
        verdict = verdict_of(json.dumps(record) + "\n")
        assert verdict.category == "job", record
        assert verdict.root_cause is not None and "AssertionError" in verdict.root_cause.text


def test_the_host_in_a_journald_record_is_the_host_to_drain() -> None:
    record = {"_HOSTNAME": "gpu-node-31", "SYSLOG_IDENTIFIER": "kernel",
              "MESSAGE": "NVRM: Xid (PCI:0000:b3:00): 79, pid=1, name=python3, GPU has fallen off the bus."}  # fmt: skip
    verdict = verdict_of(json.dumps(record) + "\n")
    assert (verdict.category, verdict.hosts) == ("infra", ("gpu-node-31",))
    assert verdict.root_cause is not None and verdict.root_cause.host_source == "log envelope"


@pytest.mark.parametrize(
    "line, host",
    [
        (json.dumps({"jsonPayload": {"MESSAGE": "NVRM: Xid (PCI:0000:97:00): 48, pid=1, name=python, An uncorrectable "
                     "double bit error (DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 0.",
                     "_HOSTNAME": "gke-a3-node-3"}, "resource": {"labels": {"node_name": "gke-a3-node-3"}}}),
         "gke-a3-node-3"),
        (json.dumps({"message": "NVRM: Xid (PCI:0000:97:00): 79, pid=1, name=python, GPU has fallen off the bus.",
                     "host": {"name": "ecs-gpu-12"}}), "ecs-gpu-12"),
        ('2026-01-14T03:12:44Z {job="node", node="gpu-node-4"} NVRM: Xid (PCI:0000:97:00): 79, pid=1, name=python, '
         "GPU has fallen off the bus.", "gpu-node-4"),
        ("Jan 14 03:12:44 gpu-node-7 nvidia-bug-report[88]: NVRM: Xid (PCI:0000:97:00): 79, pid=1, name=python, "
         "GPU has fallen off the bus.", "gpu-node-7"),
    ],
)  # fmt: skip
def test_the_envelope_names_the_host_the_line_does_not(line: str, host: str) -> None:
    verdict = verdict_of(line + "\n")
    assert verdict.category == "infra"
    assert host in verdict.hosts


def test_the_line_own_host_comes_before_the_envelope_host() -> None:
    # NCCL's own prefix names the host; the collector's field only where nothing else does
    nccl = ("gpu-a07:31201:31377 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
            "10.0.0.12<57720> with status=12 opcode=0 len=0 vendor err 129 (Send)")  # fmt: skip
    match = MATCHER.match_enveloped(json.dumps({"log": nccl, "kubernetes": {"host": "collector-node"}}).encode(), None)
    assert match is not None and match[0].fields["host"] == "gpu-a07"
    assert match[0].fields["envelope_host"] == "collector-node"


def test_the_envelope_names_the_pod_and_rank() -> None:
    line = "[pod/llm-worker-3/pytorch] [1,5]<stderr>:RuntimeError: CUDA error: uncorrectable ECC error encountered"
    unwrapped = unwrap(line)
    assert unwrapped is not None
    assert unwrapped.lines == ["RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    assert (unwrapped.fields["pod"], unwrapped.fields["rank"]) == ("llm-worker-3", "5")
    assert unwrapped.layers == ("kubectl-prefix", "mpirun-tag")


@pytest.mark.parametrize(
    "line",
    [
        '{"step": 1200, "loss": 2.31, "lr": 0.0003}',  # a metrics line: JSON without a message key
        '{"DocumentIncarnation": 4, "Events": []}',  # a JSON document read as it is
        "plain text with no envelope at all",
        "Traceback (most recent call last):",
    ],
)
def test_lines_without_an_envelope_are_left_alone(line: str) -> None:
    assert not looks_enveloped(line.encode() + b"\n") or unwrap(line) is None


def test_a_json_document_that_is_not_a_log_record_is_matched_as_it_is() -> None:
    # Azure's scheduled-events answer inside a log record: the inner JSON has no message key
    doc = json.dumps({"DocumentIncarnation": 4, "Events": [{"EventType": "Preempt", "EventStatus": "Scheduled",
                      "ResourceType": "VirtualMachine", "Resources": ["vmss_3"]}]})  # fmt: skip
    bare = verdict_of(doc + "\n")
    wrapped = verdict_of(json.dumps({"msg": doc}) + "\n")
    assert bare.category == "preemption"
    assert (wrapped.category, wrapped.confidence) == (bare.category, bare.confidence)


def _cut(text: str, width: int) -> str:
    out = []
    for line in text.split("\n"):
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("width", [80, 120])
def test_a_paste_cut_at_a_fixed_width_is_joined_again(width: int) -> None:
    text = (
        "Jan 14 03:12:44 dgx-b07 kernel: NVRM: Xid (PCI:0000:1b:00): 74, pid=20411, name=python3, NVLink: fatal "
        "error detected on link 6(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)\n"
        "Jan 14 03:12:44 dgx-b07 kernel: NVRM: Xid (PCI:0000:1b:00): 45, pid=20411, name=python3, Ch 00000008 "
        "after a fatal error on this channel group\n"
        "Jan 14 03:12:45 dgx-b07 python3[20411]: [rank2]: RuntimeError: CUDA error: unspecified launch failure\n"
    )
    cut = _cut(text, width)
    joined = join_hard_wrapped(cut.encode())
    assert joined is not None
    assert joined[0].decode() == text
    verdict = verdict_of(cut)
    assert (verdict.category, verdict.hosts) == ("infra", ("dgx-b07",))
    assert verdict.root_cause is not None and verdict.root_cause.line == 1


def test_lines_drawn_to_one_width_are_not_joined() -> None:
    table = "\n".join(
        ["+" + "-" * 78 + "+", "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4" + " " * 5 + "|"]
        + ["|" + " " * 78 + "|"] * 6
        + ["+" + "=" * 78 + "+"]
    )  # fmt: skip
    assert join_hard_wrapped(table.encode() + b"\n") is None
    # and a log whose longest line is one template repeated per rank (torch's what() line) is not cut
    what = "  what():  [PG 0 (default_pg) Rank {:02d}] Process group watchdog thread terminated with exception: x"
    repeated = "\n".join(line for r in range(16) for line in (what.format(r), f"[rank{r}]: Exception raised from"))
    assert len(what.format(0)) not in (80, 120)
    assert join_hard_wrapped(repeated.encode() + b"\n") is None


def test_the_envelope_pod_reaches_the_verdict_unless_the_input_names_another() -> None:
    oom = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    verdict = verdict_of("[pod/llm-worker-3/pytorch] " + oom + "\n")
    assert verdict.root_cause is not None and verdict.root_cause.pod == "llm-worker-3"
    # a kubectl describe header above the line names the pod it is about: it comes first
    described = verdict_of("Name:         llm-worker-5\n" + json.dumps({"log": oom, "kubernetes": {"pod_name": "shipper-0"}}) + "\n")
    assert described.root_cause is not None and described.root_cause.pod == "llm-worker-5"
