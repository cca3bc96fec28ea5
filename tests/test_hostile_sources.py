"""Issue 27: watch's structured and streamed sources under damaged or hostile input.

TensorBoard event files (written by torch's SummaryWriter, then damaged at the byte level),
MLflow metric files and stdin with lines of any length. No verdict from unread bytes; no
allocation sized by the input; no traceback.
"""

from __future__ import annotations

import io
import os
import random
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptctl.adapters import metric_sources
from ckptctl.adapters.follow import bounded_lines
from ckptctl.core.verify.crc import masked_crc32c
from ckptctl.ops import watch as ops

REPO = Path(__file__).resolve().parent.parent


def curve(step: int) -> float:
    return 2.0 + 8.0 * (step + 50) ** -0.4


def _record(data: bytes, *, length: int | None = None) -> bytes:
    head = struct.pack("<Q", len(data) if length is None else length)
    return head + struct.pack("<I", masked_crc32c(head)) + data + struct.pack("<I", masked_crc32c(data))


def _records(path: Path) -> list[tuple[int, int]]:
    """(offset, length) of every record of an event file."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, n))
        pos += 16 + n
    return out


def _tb_run_with_late_spike(logdir: Path) -> Path:
    """Pre-failure file; resumed file: 6 good points, then a spike (the file returned)."""
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    rng = random.Random(5)
    w = SummaryWriter(str(logdir))
    for s in range(10, 501, 10):
        w.add_scalar("train/loss", curve(s) * (1 + rng.gauss(0, 0.01)), s)
    w.close()
    w = SummaryWriter(str(logdir))
    for i, s in enumerate(range(410, 1100, 10)):
        jump = 0.6 if i >= 7 else 0.0
        w.add_scalar("train/loss", curve(s) * (1 + jump) * (1 + rng.gauss(0, 0.01)), s)
    w.close()
    return sorted(logdir.glob("events.out.tfevents.*"))[-1]


def test_tensorboard_record_failing_its_crc_before_a_spike_is_not_continuous(tmp_path: Path) -> None:
    """Finding: one corrupted record CRC followed by the spike gave `continuous`, exit 0: the
    loader stopped at the bad record and the bytes after it went unnoticed."""
    resumed = _tb_run_with_late_spike(tmp_path / "tb")
    clean = ops.watch_log(str(tmp_path / "tb"))
    assert clean.verdict == "spike"
    offset, length = _records(resumed)[7]  # a data byte of a record just before the spike
    data = bytearray(resumed.read_bytes())
    data[offset + 12 + length // 2] ^= 0x40
    resumed.write_bytes(bytes(data))
    r = ops.watch_log(str(tmp_path / "tb"))
    assert r.verdict != "continuous"
    assert r.verdict == "spike"  # the record is skipped; what follows it is read
    assert "unread-input" in r.report.note_codes and any("fails its CRC-32C" in n for n in r.report.notes)


def test_tensorboard_broken_header_makes_continuous_insufficient(tmp_path: Path) -> None:
    resumed = _tb_run_with_late_spike(tmp_path / "tb")
    offset, _ = _records(resumed)[7]
    data = bytearray(resumed.read_bytes())
    data[offset + 9] ^= 0x01  # the length's CRC: nothing after it can be framed
    resumed.write_bytes(bytes(data))
    r = ops.watch_log(str(tmp_path / "tb"))
    assert r.verdict == "insufficient-data", r.verdict
    assert "unread-input" in r.report.note_codes
    assert any("were not read" in n for n in r.report.notes)
    doc = r.to_json()
    assert doc["verdict"] == "insufficient-data" and "unread-input" in doc["note_codes"]


def test_tensorboard_cut_tail_is_only_a_note(tmp_path: Path) -> None:
    """A writer killed mid-record (common after a crash) leaves a cut last record: a note."""
    resumed = _tb_run_with_late_spike(tmp_path / "tb")
    data = resumed.read_bytes()
    resumed.write_bytes(data[:-7])
    r = ops.watch_log(str(tmp_path / "tb"))
    assert r.verdict == "spike" and "unread-input" not in r.report.note_codes
    assert any("cut short" in n for n in r.report.notes)


def _scalar_event(step: int, value: float) -> bytes:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Event(step=step, wall_time=1.0 + step, summary=Summary(value=[Summary.Value(tag="loss",
                 simple_value=value)])).SerializeToString()  # fmt: skip


def _event_file(path: Path, extra: list[bytes]) -> Path:
    pytest.importorskip("tensorboard")
    body = b"".join(_record(_scalar_event(s, curve(s))) for s in range(10, 310, 10))
    path.write_bytes(body + b"".join(extra) + _record(_scalar_event(320, curve(320))))
    return path


def _huge_tensor_event() -> bytes:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

    t = TensorProto(dtype=1, tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=2**31)]))
    return Event(step=315, summary=Summary(value=[Summary.Value(tag="loss", tensor=t)])).SerializeToString()


@pytest.mark.parametrize("case", ["giant-length", "not-protobuf", "shape-2**31", "nested-protobuf"])
def test_hostile_tensorboard_records_are_clean_and_bounded(tmp_path: Path, case: str) -> None:
    """Findings: a record of a giant length, a non-protobuf payload and a tensor summary declaring
    shape [2**31] ended in a traceback (or an 8 GB allocation)."""
    extra = {
        "giant-length": [_record(b"x" * 16, length=2**62)],
        "not-protobuf": [_record(b"\xff" * 64)],
        "shape-2**31": [_record(_huge_tensor_event())],
        "nested-protobuf": [_record(b"\x2a\x80\x80\x04" + b"\x0a\x80\x80\x04" * 2000)],
    }[case]
    f = _event_file(tmp_path / "events.out.tfevents.1.host", extra)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from ckptctl.cli.app import main; sys.argv = ['ckptctl', 'watch', sys.argv[1], '--json']; main()")
    env = dict(os.environ, PYTHONPATH=str(REPO), CKPTCTL_NO_PROGRESS="1")
    r = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, env=env, timeout=60)
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr[-2000:]
    assert r.returncode in (0, 3, 5), r.stderr
    damage: list[str] = []
    lines = list(metric_sources.read_lines(str(f), "tensorboard", damage=damage))
    assert len(lines) >= 30
    if case != "shape-2**31":  # a tensor that is no scalar is skipped: not damage
        assert damage, case


# -- line lengths: stdin, MLflow ---------------------------------------------------------------------


class _Endless(io.TextIOBase):
    """A text stream of one line of ``n`` characters without a newline, then normal lines;
    it never materialises the long line (reads are served a piece at a time)."""

    def __init__(self, n: int, tail: str) -> None:
        self.left, self.tail, self.max_request = n, tail, 0

    def readable(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        want = size if size is not None and size >= 0 else 1 << 62
        self.max_request = max(self.max_request, want)
        if self.left:
            n = min(self.left, want)
            self.left -= n
            return "a" * n
        out, self.tail = self.tail.partition("\n")[0] + "\n" if self.tail else "", self.tail.partition("\n")[2]
        return out


def test_bounded_lines_never_asks_for_a_whole_line() -> None:
    s = _Endless(3 << 30, "\nstep 1 loss 2.0\nstep 2 loss 1.9\n")  # the long line ends at the first \\n
    lines = list(bounded_lines(s, max_chars=1000))
    assert lines[1:] == ["step 1 loss 2.0", "step 2 loss 1.9"] and len(lines[0]) == 1000
    assert s.max_request <= 1 << 20


def test_watch_follow_stdin_long_line_stays_small(tmp_path: Path) -> None:
    """Finding: a 1.5 GiB line without a newline on `watch --follow -` stdin took 3.1 GB."""
    feeder = ("import sys; w = sys.stdout.write; [w('x' * (1 << 20)) for _ in range(1536)]; w('\\n'); "
              "[w(f'step {s} loss {2 + 8 * (s + 50) ** -0.4:.4f}\\n') for s in range(10, 600, 10)]")  # fmt: skip
    cmd = [sys.executable, "-m", "ckptctl", "watch", "--follow", "-", "--timeout", "60", "--resume-step", "300"]
    env = dict(os.environ, PYTHONPATH=str(REPO), CKPTCTL_NO_PROGRESS="1")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    t0 = time.perf_counter()
    with subprocess.Popen([sys.executable, "-c", feeder], stdout=subprocess.PIPE) as src:
        r = subprocess.run(cmd, stdin=src.stdout, capture_output=True, text=True, env=env, timeout=180,
                           preexec_fn=cap)  # fmt: skip
    assert "MemoryError" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert r.returncode in (0, 5), (r.returncode, r.stdout, r.stderr)
    assert time.perf_counter() - t0 < 150


def test_mlflow_metric_file_with_a_huge_line_stays_small(tmp_path: Path) -> None:
    """Finding: a 1.5 GiB line without a newline in an MLflow metric file took 3.1 GB."""
    metrics = tmp_path / "mlruns" / "0" / "run1" / "metrics"
    metrics.mkdir(parents=True)
    f = metrics / "loss"
    with open(f, "w") as fh:
        for s in range(10, 600, 10):
            fh.write(f"{1000 * s} {curve(s)} {s}\n")
        fh.truncate(fh.tell() + (1536 << 20))  # a sparse 1.5 GiB of NUL bytes, no newline
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from ckptctl.cli.app import main; sys.argv = ['ckptctl', 'watch', sys.argv[1], '--json']; main()")
    env = dict(os.environ, PYTHONPATH=str(REPO), CKPTCTL_NO_PROGRESS="1")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "mlruns" / "0" / "run1")], capture_output=True,
                       text=True, env=env, timeout=300)  # fmt: skip
    assert "MemoryError" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert r.returncode in (0, 3, 5), r.stderr
