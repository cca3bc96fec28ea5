"""Issue 27: JSON nested 100,000 deep (and mistyped JSON) in every JSON file ckptctl reads.

Finding: such a document in any of them (trainer_state.json, safetensors headers and indexes,
ckptctl.json, the commit marker, the lock, job.json, the audit log, a report, torchelastic's
error.json, a JSON-lines loss line) ended in a RecursionError traceback. One parser
(``core/jsonsafe``) with size and depth limits reads them all; each file is tested here through
the command that reads it (the lock and the audit log in test_hostile_links.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ckptctl.core.verify import jsonsafe
from ckptctl.core.watch.losslog import LossLogParser

REPO = Path(__file__).resolve().parent.parent
DEEP = "[" * 100_000 + "]" * 100_000
DEEP_IN_OBJECT = '{"step": 1, "loss": ' + DEEP + "}"
#: Under the caps that come before parsing (a 64 KiB line, a 64 KiB commit marker), still far
#: past the recursion limit.
DEEP_SHORT = "[" * 30_000 + "]" * 30_000


def ckptctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, PYTHONPATH=str(REPO), CKPTCTL_NO_PROGRESS="1")
    full.pop("CKPTCTL_DEBUG", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True,
                          timeout=120, env=full)  # fmt: skip


# -- the parser -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [DEEP, "{" + '"a":{' * 50_000 + "}" * 50_001, DEEP_IN_OBJECT, "[" * 65 + "]" * 65])
def test_deep_documents_are_one_clean_error(text: str) -> None:
    with pytest.raises(jsonsafe.JsonError, match="nested deeper than 64 levels"):
        jsonsafe.loads(text)


def test_limits_are_exact_and_errors_one_line() -> None:
    assert jsonsafe.loads("[" * 64 + "]" * 64) is not None
    for bad, why in [(b"\xff{}", "not UTF-8"), ('{"a": 1' + "0" * 5000 + "}", None), ("{\n\n", None), ("", None)]:
        with pytest.raises(jsonsafe.JsonError, match=why) as e:
            jsonsafe.loads(bad)
        assert "\n" not in str(e.value) and len(str(e.value)) <= 200
    with pytest.raises(jsonsafe.JsonError, match="over the 10-byte limit"):
        jsonsafe.loads(b"[1, 2, 3, 4, 5]", max_bytes=10)
    with pytest.raises(jsonsafe.JsonError):
        jsonsafe.loads('{"pid": Infinity}', allow_nan=False)


@pytest.mark.parametrize(("value", "expect"), [(12, 12), (30.0, 30), (10**30, None), (float("inf"), None),
                                               (float("nan"), None), (True, None), ("12", None), (-1, None),
                                               (2.5, None), (2**63 - 1, 2**63 - 1), (2**63, None)])  # fmt: skip
def test_numbers_are_range_checked(value: object, expect: int | None) -> None:
    assert jsonsafe.bounded_int(value) == expect


def test_a_deep_jsonl_loss_line_is_skipped_not_raised() -> None:
    """Watch's reader: a loss line nested 30,000 deep raised RecursionError."""
    parser = LossLogParser()
    assert parser.feed('{"step": 1, "loss": ' + "[" * 30_000 + "]" * 30_000 + "}") == []
    [point] = parser.feed('{"step": 2, "loss": 1.5}')
    assert (point.step, point.loss) == (2, 1.5)


# -- every file, through the command that reads it --------------------------------------------------


def _safetensors(path: Path, header: str) -> None:
    raw = header.encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 4)


def _hf(tmp: Path, bad: str) -> list[str]:
    d = tmp / "checkpoint-5"
    d.mkdir()
    _safetensors(d / "model.safetensors", '{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}')
    (d / "trainer_state.json").write_text('{"global_step": 5, "log_history": []}')
    if bad == "trainer_state.json":
        (d / "trainer_state.json").write_text(DEEP)
    elif bad == "safetensors header":
        _safetensors(d / "model.safetensors", '{"w": ' + DEEP + "}")
    else:  # the index of a sharded model
        (d / "model.safetensors").rename(d / "model-00001-of-00001.safetensors")
        (d / "model.safetensors.index.json").write_text('{"metadata": {}, "weight_map": ' + DEEP + "}")
    return ["verify", str(d), "--json"]


def _ckptctl_step(tmp: Path, bad: str) -> list[str]:
    torch = pytest.importorskip("torch")
    from ckptctl.training import Checkpointer

    ckpt = Checkpointer(str(tmp / "run"), preemption_signals=None)
    ckpt.save(10, {"model": torch.nn.Linear(2, 2)}).result()
    ckpt.close()
    step = tmp / "run" / "step_10"
    assert ckptctl("verify", str(step)).returncode == 0
    (step / ("ckptctl.json" if bad == "ckptctl.json" else ".ckptctl-committed")).write_text(DEEP_SHORT)
    return ["verify", str(step), "--json"]


def _state_file(tmp: Path, name: str, content: str, command: str) -> list[str]:
    from tests.fuzz.corpus import write_small_checkpoint

    root = tmp / "run"
    write_small_checkpoint(root / "step_10")
    (root / ".ckptctl").mkdir()
    (root / ".ckptctl" / name).write_text(content)
    if name.startswith("report"):
        record = {"action": "recover", "report": str(root / ".ckptctl" / name), "time": "2026-01-01T00:00:00Z"}
        (root / ".ckptctl" / "audit.jsonl").write_text(json.dumps(record) + "\n")
    return [command, str(root), "--json"]


def _error_json(tmp: Path, _bad: str) -> list[str]:
    d = tmp / "logs"
    d.mkdir()
    (d / "error.json").write_text('{"message": ' + DEEP + ', "extraInfo": {}}')
    (d / "rank0.log").write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory\n")
    return ["classify", str(d), "--json"]


def _loss_log(tmp: Path, _bad: str) -> list[str]:
    lines = [json.dumps({"step": s, "loss": 2 + 8 * (s + 50) ** -0.4}) for s in range(10, 600, 10)]
    lines.insert(20, '{"step": 1, "loss": ' + DEEP_SHORT + "}")
    (tmp / "train.jsonl").write_text("\n".join(lines) + "\n")
    return ["watch", str(tmp / "train.jsonl"), "--resume-step", "300", "--json"]


WRONG_TYPES_REPORT = json.dumps({
    "incident": {"failure_time": "2026-01-01T00:00:00", "detected": "2026-01-01T00:01:00Z",  # naive beside aware
                 "first_step": "2026-01-01T00:05:00Z", "time_lost_s": 1e400, "steps_recomputed": "12",
                 "verdicts": 5, "drained_hosts": "gpu-1", "category": ["infra"], "outcome": {}},
    "attempts": [5], "started": 5,
})  # fmt: skip
HUGE_PID_JOB = json.dumps({"backend": "local", "job_id": "1" * 30, "owner": "me"})
CASES: dict[str, tuple[Callable[[Path, str], list[str]], set[int]]] = {
    "trainer_state.json": (_hf, {3}),
    "safetensors header": (_hf, {3}),
    "safetensors index": (_hf, {3}),
    "ckptctl.json": (_ckptctl_step, {3}),
    "commit marker": (_ckptctl_step, {3}),
    "job.json": (lambda t, _b: _state_file(t, "job.json", DEEP, "status"), {0}),
    "job.json of a 30-digit pid": (lambda t, _b: _state_file(t, "job.json", HUGE_PID_JOB, "status"), {0}),
    "report": (lambda t, _b: _state_file(t, "report-1.json", DEEP, "incidents"), {0}),
    "report of wrong types, incidents": (lambda t, _b: _state_file(t, "report-1.json", WRONG_TYPES_REPORT, "incidents"),
                                         {0}),
    "report of wrong types, status": (lambda t, _b: _state_file(t, "report-1.json", WRONG_TYPES_REPORT, "status"), {0}),
    "torchelastic error.json": (_error_json, {10, 11, 12, 13}),
    "JSON-lines loss line": (_loss_log, {0, 3, 5}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_deep_json_in_every_file_is_no_traceback(tmp_path: Path, case: str) -> None:
    build, codes = CASES[case]
    r = ckptctl(*build(tmp_path, case))
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr[-2000:]
    assert r.returncode in codes, (r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    if r.returncode == 3 and r.stdout.startswith("{"):
        assert json.loads(r.stdout)["checkpoints"][0]["status"] == "corrupt"


def test_deep_storage_options_are_a_one_line_error() -> None:
    deep = "[" * 5_000 + "]" * 5_000  # an environment variable: past the recursion limit, under ARG_MAX
    r = ckptctl("list", "s3://bucket/run", env={"CKPTCTL_STORAGE_OPTIONS": deep})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("error:")] == [
        "error: CKPTCTL_STORAGE_OPTIONS is not valid JSON: nested deeper than 64 levels"
    ]


@pytest.mark.parametrize("job_id", ["0", "1", "1" * 30, "\u00b2", "-5", "12a", ""])
def test_a_local_job_id_that_is_no_pid_is_never_signalled(job_id: str) -> None:
    """A job.json can be edited: job id "0" would signal ckptctl's own process group, a
    30-digit one overflow os.kill, "\u00b2" pass str.isdigit and fail int()."""
    from ckptctl.adapters.launch_result import LaunchError
    from ckptctl.backends.local import LocalBackend, job_pid
    from ckptctl.core.launch.job import JobRef

    assert job_pid(job_id) is None
    ref = JobRef(backend="local", job_id=job_id)
    assert LocalBackend().state(ref).phase == "unknown"
    with pytest.raises(LaunchError, match="a local job id is a process id"):
        LocalBackend().cancel(ref)  # never os.killpg(0, SIGTERM)


def test_a_real_pid_is_still_a_job() -> None:
    from ckptctl.backends.local import LocalBackend, job_pid
    from ckptctl.core.launch.job import JobRef

    assert job_pid(str(os.getpid())) == os.getpid()
    assert LocalBackend().state(JobRef(backend="local", job_id=str(os.getpid()))).phase == "running"
