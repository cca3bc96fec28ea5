"""``ckptctl classify``: the fixture corpus end to end, the JSON contract, inputs, bad input, exit codes."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest
from typer.testing import CliRunner

from ckptctl import exit_codes
from ckptctl.adapters import logs as log_sources
from ckptctl.cli import output as out
from ckptctl.cli.app import app, main
from ckptctl.errors import ConfigError, InputError, UsageError
from ckptctl.ops import classify as ops
from ckptctl.ops.classify_catalog import BUILTIN_CATALOGS
from ckptctl.ops.classify_scan import MAX_AUTO_JOBS, auto_jobs

REPO = Path(__file__).resolve().parent.parent
LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
CKPTCTL = REPO / ".venv" / "bin" / "ckptctl"

runner = CliRunner()

XID79_LINE = "Jan 14 03:59:40 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python, GPU has fallen off the bus.\n"


def classify(*args: str, stdin: bytes | str | None = None) -> Any:
    out.reset()
    result = runner.invoke(app, ["classify", *args], input=stdin, catch_exceptions=False)
    out.reset()
    return result


def classify_json(*args: str, stdin: bytes | str | None = None) -> tuple[int, dict[str, Any], str]:
    result = classify("--json", *args, stdin=stdin)
    return result.exit_code, json.loads(result.stdout), result.stderr


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Through ``main()``: the one error handler (domain errors -> one line + exit code)."""
    out.reset()
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    captured = capsys.readouterr()
    out.reset()
    code = info.value.code
    return (code if isinstance(code, int) else 1), captured.out, captured.err


# --------------------------------------------------------------------------------------
# The corpus: one directory per incident, as an on-call engineer would collect it
# --------------------------------------------------------------------------------------

# (scenario, category, exit code, hosts to drain, root-cause signature, GPUs (PCI))
SCENARIOS: list[tuple[str, str, int, list[str], str | None, list[str]]] = [
    ("xid79_multi_host", "infra", 10, ["gpu-node-17"], "xid-79", ["0000:3b:00"]),
    ("xid48_dbe", "infra", 10, ["gpu-node-22"], "xid-48", ["0000:b7:00"]),
    ("xid63_64", "infra", 10, ["gpu-node-05"], "xid-64", ["0000:18:00"]),
    ("xid74_nvlink", "infra", 10, ["gpu-node-09"], "xid-74", ["0000:c1:00", "0000:c3:00"]),
    ("xid94_95", "infra", 10, ["gpu-node-22", "gpu-node-23"], "xid-94", ["0000:b7:00", "0000:af:00"]),
    ("xid119_gsp", "infra", 10, ["gpu-node-31"], "xid-119", ["0000:65:00"]),
    ("slurm_node_fail", "infra", 10, ["gpu-node-07"], "slurm-node-failure", []),
    ("ib_completion", "infra", 10, [], "nccl-ib-wc-retry-exceeded", []),
    ("cuda_oom", "job", 11, [], "cuda-oom", []),
    ("error_file", "job", 11, [], "cuda-oom", []),
    ("illegal_memory_access", "job", 11, [], "cuda-illegal-address", []),
    ("app_xids", "job", 11, [], "xid-13", []),
    ("nan_loss", "job", 11, [], "nan-loss", []),
    ("sigkill_oom_killer", "job", 11, [], "kernel-oom-killer", []),
    ("sigterm_preempted", "preemption", 12, [], "slurm-preempted", []),
    ("slurm_time_limit", "preemption", 12, [], "slurm-time-limit", []),
    ("k8s_eviction", "preemption", 12, [], "k8s-evicted", []),
    ("k8s_spot", "preemption", 12, [], "cloud-spot-interruption", []),
    ("nccl_timeout_only", "unknown", 13, [], None, []),
    ("sigkill_bare", "unknown", 13, [], None, []),
]


def test_every_fixture_directory_has_a_case() -> None:
    assert sorted(p.name for p in LOGS.iterdir() if p.is_dir()) == sorted(s[0] for s in SCENARIOS)


def _line_of(evidence: dict[str, Any]) -> str:
    path = Path(evidence["file"])
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace").splitlines()[evidence["line"] - 1]


@pytest.mark.parametrize(("scenario", "category", "code", "hosts", "root", "gpus"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_corpus_verdicts(
    scenario: str, category: str, code: int, hosts: list[str], root: str | None, gpus: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(LOGS)
    exit_code, doc, _ = classify_json(scenario)
    assert exit_code == code == doc["exit_code"]
    assert doc["category"] == category
    assert doc["hosts"] == hosts
    assert [g["pci_bus_id"] for g in doc["gpus"] if g["pci_bus_id"]] == gpus
    assert (doc["root_cause"] or {}).get("signature") == root
    assert doc["confidence"] in ("high", "medium", "low")
    assert doc["action"]
    assert doc["inputs"]["skipped"] == []
    # Every evidence item points at a real line of a real file, and says what it is.
    assert doc["evidence"], "a verdict without evidence"
    for item in doc["evidence"]:
        assert {"file", "line", "text", "signature"} <= item.keys()
        if not item["file"].endswith(".json"):
            assert item["text"][:80] in _line_of(item)
    if root is not None:
        assert doc["evidence"][0]["role"] == "root_cause" == doc["root_cause"]["role"]
    if category == "unknown":
        assert doc["what_would_settle_it"] and doc["root_cause"] is None


def test_root_cause_wins_over_symptoms_on_many_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(LOGS)
    _, doc, _ = classify_json("xid79_multi_host")
    root = doc["root_cause"]
    assert (root["file"], root["host"], root["gpu"]) == ("xid79_multi_host/journal/gpu-node-17.kern.log", "gpu-node-17", "0000:3b:00")
    assert _line_of(root) == XID79_LINE.rstrip("\n")
    tallies = {t["id"]: t for t in doc["signatures"]}
    assert tallies["nccl-watchdog-timeout"]["count"] > 30 and tallies["nccl-watchdog-timeout"]["role"] == "symptom"
    assert {s["signature"] for s in doc["symptoms"]} >= {"nccl-watchdog-timeout", "rank-sigabrt"}
    assert "gpu-node-17" in doc["action"] and "0000:3b:00" in doc["action"]


def test_application_xids_do_not_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(LOGS)
    _, doc, _ = classify_json("app_xids")
    assert doc["hosts"] == [] and doc["suspect_hosts"] == []
    assert "Do not resume" in doc["action"] and "Drain" not in doc["action"]


def test_unknown_names_the_log_that_would_settle_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(LOGS)
    _, doc, _ = classify_json("sigkill_bare")
    assert doc["suspect_hosts"] == ["gpu-node-03"]
    assert doc["what_would_settle_it"][0].startswith("the kernel log of gpu-node-03")
    _, doc, _ = classify_json("nccl_timeout_only")
    assert any("every rank" in s for s in doc["what_would_settle_it"])


def test_human_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(LOGS)
    result = classify("xid79_multi_host")
    assert result.exit_code == exit_codes.CLASSIFY_INFRA
    text = result.stdout
    assert text.startswith("INFRA (high confidence)")
    assert "Drain: gpu-node-17" in text and "GPUs: gpu-node-17 0000:3b:00" in text
    assert "ROOT    xid79_multi_host/journal/gpu-node-17.kern.log:" in text
    assert "GPU has fallen off the bus" in text and "Why" in text
    assert text.isascii()
    unknown = classify("sigkill_bare")
    assert unknown.exit_code == exit_codes.CLASSIFY_UNKNOWN
    assert "UNKNOWN" in unknown.stdout and "What would settle it" in unknown.stdout


# --------------------------------------------------------------------------------------
# Inputs: files, globs, directories, stdin, .gz, fsspec URLs, error files
# --------------------------------------------------------------------------------------


def test_files_and_globs_combine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(LOGS)
    code, doc, _ = classify_json("xid79_multi_host/journal/*.log", "xid79_multi_host/train-stderr.log")
    assert code == 10 and doc["hosts"] == ["gpu-node-17"]
    assert len(doc["inputs"]["sources"]) == 5
    code, doc, _ = classify_json("**/gpu-node-1[5-8].kern.log")
    assert code == 10 and len(doc["inputs"]["sources"]) == 4


def test_stdin_and_gzip(tmp_path: Path) -> None:
    code, doc, _ = classify_json("-", stdin=XID79_LINE)
    assert code == 10 and doc["root_cause"]["file"] == "<stdin>" and doc["hosts"] == ["gpu-node-17"]
    packed = tmp_path / "kern.log.gz"
    packed.write_bytes(gzip.compress(("noise\n" * 1000 + XID79_LINE).encode()))
    code, doc, _ = classify_json(str(packed))
    assert code == 10 and doc["root_cause"]["line"] == 1001
    # gzip recognised by its magic, whatever the name; and through stdin
    renamed = tmp_path / "kern.log"
    renamed.write_bytes(packed.read_bytes())
    assert classify_json(str(renamed))[0] == 10
    assert classify_json("-", stdin=packed.read_bytes())[0] == 10


def test_torchelastic_error_file_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(LOGS)
    _, doc, _ = classify_json("error_file/attempt_0/2/error.json")
    root = doc["root_cause"]
    assert (root["signature"], root["file"], root["line"]) == ("cuda-oom", "error_file/attempt_0/2/error.json", 1)
    assert root["text"].startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_fsspec_urls_directories_and_globs() -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/incident-7/node-17/kern.log", XID79_LINE.encode())
    fs.pipe("/incident-7/ranks/rank-3.log", (LOGS / "nccl_timeout_only" / "ranks.log").read_bytes())
    fs.pipe("/incident-7/ranks/rank-4.log.gz", gzip.compress(b"[rank4]: KeyError: 'x'\n"))
    try:
        code, doc, _ = classify_json("memory://incident-7")
        assert code == 10 and doc["hosts"] == ["gpu-node-17"]
        assert doc["root_cause"]["file"] == "memory:///incident-7/node-17/kern.log"
        assert len(doc["inputs"]["sources"]) == 3
        code, doc, _ = classify_json("memory://incident-7/ranks/*.log*")
        assert code == 11 and len(doc["inputs"]["sources"]) == 2
    finally:
        fs.rm("/incident-7", recursive=True)


def test_host_from_file_names() -> None:
    assert log_sources.host_from_name("logs/dmesg-gpu-node-22.txt") == "gpu-node-22"
    assert log_sources.host_from_name("gpu-node-17.kern.log") == "gpu-node-17"
    assert log_sources.host_from_name("incident/gpu-node-05/kern.log") == "gpu-node-05"
    assert log_sources.host_from_name("node-9.journal") == "node-9"
    assert log_sources.host_from_name("journalctl-gpu-node-22.txt") == "gpu-node-22"
    assert log_sources.host_from_name("rank-3.log") is None
    assert log_sources.host_from_name("slurm-4412937.out") is None
    assert log_sources.host_from_name("logs/stderr.log") is None
    # an extension, a flag or a case folder is no machine name
    assert log_sources.host_from_name("dmesg.txt") is None
    assert log_sources.host_from_name("dmesg-T.txt") is None
    assert log_sources.host_from_name("xid74_nvlink_error/dmesg.txt") is None
    assert log_sources.host_from_name("incident/node17/dmesg.txt") == "node17"


def _xid79_without_a_host(tmp_path: Path, train_text: str) -> list[str]:
    (tmp_path / "dmesg.txt").write_text(
        "[2281934.004511] NVRM: Xid (PCI:0000:b8:00): 79, pid=77145, name=python, GPU has fallen off the bus.\n"
    )
    (tmp_path / "job.out").write_text(train_text)
    return [str(tmp_path / "dmesg.txt"), str(tmp_path / "job.out")]


def test_a_cause_without_a_host_goes_to_the_only_host_the_input_names(tmp_path: Path) -> None:
    """Plain dmesg carries no host; the job's NCCL lines name one host only: the drain names it."""
    files = _xid79_without_a_host(
        tmp_path,
        "[default5]:dgx07:77145:77388 [5] NCCL INFO [Service thread] Connection closed by localRank 5\n"
        "[default5]:dgx07:77145:77145 [5] enqueue.cc:1495 NCCL WARN Cuda failure 'unspecified launch failure'\n",
    )
    code, doc, _ = classify_json(*files)
    assert code == exit_codes.CLASSIFY_INFRA and doc["hosts"] == ["dgx07"], doc["hosts"]
    assert doc["root_cause"]["host_source"] == "the only host the input names"
    assert any(s["host"] == "dgx07" and s["role"] == "culprit" for s in doc["suspects"])


def test_a_hostname_line_names_the_machine(tmp_path: Path) -> None:
    files = _xid79_without_a_host(tmp_path, "")
    (tmp_path / "node.txt").write_text("hostname: trn-gpu-031\n")
    code, doc, _ = classify_json(*files, str(tmp_path / "node.txt"))
    assert code == exit_codes.CLASSIFY_INFRA and doc["hosts"] == ["trn-gpu-031"]


def test_two_hosts_named_is_no_guess(tmp_path: Path) -> None:
    """With two candidate hosts the drain list stays empty and says what would settle it."""
    files = _xid79_without_a_host(
        tmp_path,
        "[default0]:gpu-a1:100:100 [0] enqueue.cc:1495 NCCL WARN Cuda failure 'unspecified launch failure'\n"
        "[default0]:gpu-a2:200:200 [0] enqueue.cc:1495 NCCL WARN Cuda failure 'unspecified launch failure'\n",
    )
    code, doc, _ = classify_json(*files)
    assert code == exit_codes.CLASSIFY_INFRA and doc["hosts"] == [], doc["hosts"]
    assert doc["what_would_settle_it"]


# --------------------------------------------------------------------------------------
# Bad input: clear messages, never a traceback
# --------------------------------------------------------------------------------------


def test_binary_files_are_skipped_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elf = tmp_path / "trainer"
    elf.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 40)
    noise = tmp_path / "core.bin"
    noise.write_bytes(bytes(range(256)) * 400)
    journal = tmp_path / "system.journal"
    journal.write_bytes(b"LPKSHHRH" + b"\x00" * 4000)
    good = tmp_path / "kern.log"
    good.write_text(XID79_LINE)
    code, stdout, stderr = run_main(capsys, "classify", "--json", str(elf), str(noise), str(journal), str(good))
    assert code == 10
    doc = json.loads(stdout)
    reasons = {Path(s["source"]).name: s["reason"] for s in doc["inputs"]["skipped"]}
    assert "binary file (an executable (ELF))" in reasons["trainer"]
    assert "binary file (mostly non-text bytes)" in reasons["core.bin"]
    assert "journalctl --file" in reasons["system.journal"]
    assert stderr.count("warning: skipped") == 3 and "Traceback" not in stderr


def test_nothing_readable_is_exit_1_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, stderr = run_main(capsys, "classify", str(tmp_path / "missing.log"))
    assert code == exit_codes.TOOL_FAILED and stdout == ""
    assert "no readable log among the inputs" in stderr and "missing.log: no such file or directory" in stderr
    assert "Traceback" not in stderr
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    code, _, stderr = run_main(capsys, "classify", str(empty_dir), str(tmp_path / "nope-*.log"))
    assert code == 1 and "directory holds no files" in stderr and "no files match" in stderr


def test_missing_file_among_good_ones_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "kern.log"
    good.write_text(XID79_LINE)
    code, stdout, stderr = run_main(capsys, "classify", "--json", str(good), str(tmp_path / "gone.log"))
    assert code == 10
    assert json.loads(stdout)["inputs"]["skipped"] == [
        {"source": str(tmp_path / "gone.log"), "reason": f"{tmp_path / 'gone.log'}: no such file or directory"}
    ]
    assert f"warning: skipped {tmp_path / 'gone.log'}: no such file or directory" in stderr


def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "kern.log"
    secret.write_text(XID79_LINE)
    real_open = open

    def deny(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path) == str(secret):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    # Tests may run as root, where chmod 000 does not stop reading: refuse the open instead.
    monkeypatch.setattr("builtins.open", deny)
    code, _, stderr = run_main(capsys, "classify", str(secret))
    assert code == 1 and f"{secret}: permission denied" in stderr and "Traceback" not in stderr


def test_invalid_utf8_empty_files_and_huge_lines(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.log"
    latin1.write_bytes(b"Fehler \xe4\xf6\xfc \xff\xfe\n" + XID79_LINE.encode().replace(b"python", b"pyth\xf6n"))
    code, doc, _ = classify_json(str(latin1))
    assert code == 10 and "pyth\ufffdn" in doc["root_cause"]["text"]

    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    code, doc, _ = classify_json(str(empty))
    assert code == 13 and doc["inputs"]["lines"] == 0
    assert doc["reasons"] == ["no known failure signature in 0 lines of 1 file"]

    huge = tmp_path / "huge.log"
    with open(huge, "wb") as f:
        f.write(b"A" * (10 << 20) + b" RuntimeError: CUDA error: an illegal memory access was encountered\n")
        f.write(b"B" * (3 << 20) + b"\n")  # a 3 MB line without anything in it
        f.write(b"KeyError: 'x'")  # the last line, without a newline
    result = classify("--json", str(huge))
    doc = json.loads(result.stdout)
    assert result.exit_code == 11 and doc["root_cause"]["signature"] == "cuda-illegal-address"
    assert doc["root_cause"]["line"] == 1 and len(doc["root_cause"]["text"]) < 500
    assert doc["inputs"]["lines"] == 3 and doc["inputs"]["overlong_lines"] == 1  # the 10 MB one
    assert "longer than 1024 KiB were matched in pieces" in result.stderr
    assert any(e["signature"] == "python-exception" and e["line"] == 3 for e in doc["evidence"])


def test_nul_padded_syslog_after_a_crash_is_still_read(tmp_path: Path) -> None:
    # A node that lost power leaves NUL blocks in /var/log/syslog: a text log with holes.
    syslog = tmp_path / "syslog"
    syslog.write_bytes(b"Jan 14 03:00:00 gpu-node-17 systemd[1]: ok\n" * 2000 + b"\x00" * 4096 + XID79_LINE.encode())
    assert classify_json(str(syslog))[0] == 10


def test_truncated_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "rank.log.gz"
    broken.write_bytes(gzip.compress((XID79_LINE * 5000).encode())[:-200])
    code, stdout, stderr = run_main(capsys, "classify", "--json", str(broken))
    doc = json.loads(stdout)
    # What was read before the damage still counts, and the damage is reported.
    assert code == 10
    assert "corrupt or truncated gzip data" in doc["inputs"]["skipped"][0]["reason"]
    assert "read only its first" in stderr


# --------------------------------------------------------------------------------------
# Signature files
# --------------------------------------------------------------------------------------


def test_user_signatures_extend_the_catalog(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(
        "version: 1\nsignatures:\n"
        "  - id: lustre-ost-down\n"
        "    pattern: 'LustreError: .* OST(?P<gpu_index>\\d+) is unavailable'\n"
        "    keywords: [LustreError]\n"
        "    category: infra\n"
        "    drain: false\n"
        "    confidence: high\n"
        "    action: Page the storage team; resume once the OST is back.\n"
    )
    log = tmp_path / "client.log"
    log.write_text("Jan 14 03:00:00 gpu-node-02 kernel: LustreError: 11-0: fs-OST0007 is unavailable\n"
                   "Jan 14 03:00:00 gpu-node-02 kernel: LustreError: 11-0: OST7 is unavailable\n")  # fmt: skip
    # built in, a Lustre error line of no known wording is at most a low-confidence guess
    first = classify_json(str(log))
    assert first[0] == 13 or first[1]["confidence"] == "low"
    code, doc, _ = classify_json("--signatures", str(site), str(log))
    assert code == 10 and doc["root_cause"]["signature"] == "lustre-ost-down"
    assert "Page the storage team" in doc["action"] and doc["hosts"] == []
    assert doc["catalog"]["files"] == [*("builtin:" + n for n in BUILTIN_CATALOGS), str(site)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("signatures:\n  - {id: x, pattern: y, category: job, colour: red}\n", "unknown key 'colour'"),
        ("signatures: [", "not valid YAML"),
        ("signatures:\n  - {id: x, pattern: '(', category: job}\n", "not a valid regular expression"),
    ],
)
def test_bad_signature_files_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    code, stdout, stderr = run_main(capsys, "classify", "--signatures", str(bad), str(LOGS / "nan_loss"))
    assert code == exit_codes.USAGE and stdout == ""
    assert message in stderr and str(bad) in stderr and "Traceback" not in stderr
    code, _, stderr = run_main(capsys, "classify", "--signatures", str(tmp_path / "nope.yaml"), str(LOGS / "nan_loss"))
    assert code == exit_codes.USAGE and "signature file" in stderr and "no such file" in stderr


# --------------------------------------------------------------------------------------
# The ops API (what `ckptctl recover` calls) and the CLI surface
# --------------------------------------------------------------------------------------


def test_ops_api_for_recover() -> None:
    result = ops.classify_logs([str(LOGS / "xid79_multi_host")])
    assert (result.category, result.hosts, result.exit_code) == ("infra", ("gpu-node-17",), 10)
    assert result.root_cause is not None and result.root_cause.signature.id == "xid-79"
    assert result.gpus[0].pci_bus_id == "0000:3b:00"
    assert result.symptoms and result.evidence[0] is result.root_cause
    assert result.what_would_settle_it == ()
    doc = result.to_json()
    assert json.loads(json.dumps(doc)) == doc
    with pytest.raises(UsageError):
        ops.classify_logs([])
    with pytest.raises(UsageError):
        ops.classify_logs(["-", "-"])
    with pytest.raises(InputError):
        ops.classify_logs(["/definitely/not/here.log"])
    with pytest.raises(ConfigError):
        ops.classify_logs([str(LOGS / "nan_loss")], extra_signature_files=["/nope.yaml"])


def test_json_schema_keys_are_a_contract() -> None:
    doc = ops.classify_logs([str(LOGS / "cuda_oom")]).to_json()
    assert list(doc) == [
        "category", "confidence", "action", "hosts", "gpus", "root_cause", "evidence", "symptoms",
        "other_causes", "suspect_hosts", "reasons", "what_would_settle_it", "signatures", "inputs",
        "catalog", "warnings", "elapsed_s", "exit_code", "suspects",
    ]  # fmt: skip
    assert list(doc["root_cause"]) == [
        "file", "line", "text", "signature", "description", "category", "role", "severity",
        "confidence", "host", "host_source", "gpu", "gpu_index", "rank", "local_rank", "xid",
        "signal", "exitcode", "first_failure", "peer", "peer_host", "pod", "time", "cause_xid",
        "code", "program", "collective", "signature_source",
    ]  # fmt: skip
    assert [list(s) for s in doc["suspects"]][:1] == [
        ["host", "gpu", "rank", "local_rank", "peer", "pod", "role", "reason"]
    ]
    assert doc["suspects"][0]["role"] == "culprit" and doc["suspects"][0]["host"] == "gpu-node-03"
    assert doc["root_cause"]["host"] == "gpu-node-03" and doc["root_cause"]["host_source"] == "rank map"


def test_help_and_no_torch_import() -> None:
    result = classify("--help")
    assert result.exit_code == 0 and "--signatures" in result.stdout and "--json" in result.stdout
    code = (
        "import sys\n"
        "from ckptctl.cli.app import main\n"
        f"try:\n    main(['classify', '--json', {str(LOGS / 'xid48_dbe')!r}])\n"
        "except SystemExit as e:\n    print('exit', e.code, file=sys.stderr)\n"
        "print('torch' in sys.modules, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.stderr.strip().splitlines()[-2:] == ["exit 10", "False"]


@pytest.mark.skipif(not CKPTCTL.exists(), reason="console script not installed")
def test_real_binary_with_a_pipe() -> None:
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1")
    proc = subprocess.run(
        [str(CKPTCTL), "classify", "--json", "-", str(LOGS / "nccl_timeout_only")],
        input=XID79_LINE, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert proc.returncode == 10, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["hosts"] == ["gpu-node-17"] and doc["inputs"]["sources"][0] == "<stdin>"


def test_worker_processes_give_the_same_answer() -> None:
    sources = [str(LOGS / "xid79_multi_host"), str(LOGS / "cuda_oom"), str(LOGS / "error_file")]
    # Small blocks: many of them, so the torchrun records and line numbers cross block edges.
    whole = ops.classify_logs(sources).to_json()
    serial = ops.classify_logs(sources, block_bytes=2048).to_json()
    parallel = ops.classify_logs(sources, block_bytes=2048, jobs=2).to_json()
    for doc in (whole, serial, parallel):
        doc.pop("elapsed_s")
    assert parallel["inputs"].pop("jobs") == 2 and serial["inputs"].pop("jobs") == 1
    whole["inputs"].pop("jobs")
    assert parallel == serial == whole
    assert auto_jobs(10 << 20, 16) == 1 and auto_jobs(None, 16) == 1
    assert auto_jobs(10 << 30, 2) == 1 and auto_jobs(10 << 30, 4) == 3
    assert auto_jobs(10 << 30, 64) == MAX_AUTO_JOBS


def test_json_logs_that_are_not_error_files_are_read_as_logs(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.json"
    metrics.write_text('{"message": "step 10", "loss": 2.3}\n' + XID79_LINE)
    code, doc, _ = classify_json(str(metrics))
    assert code == 10 and doc["root_cause"]["line"] == 2
