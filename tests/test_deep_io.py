"""The deep check's I/O path: ranged reads (local and a real S3 server) and the pickle-scan memo."""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptctl.adapters import ranges
from ckptctl.adapters.storage import Storage
from ckptctl.core.verify.records import RecordFindings, scan_pickle
from ckptctl.errors import StorageError
from ckptctl.runroot.deep import _ScanMemo


def _read_all(storage: Storage, path: str, start: int, end: int, chunk: int = 1000) -> bytes:
    out = bytearray()
    with storage.open_range(path, start, end) as r:
        buf = bytearray(chunk)
        while True:
            n = r.readinto(memoryview(buf))
            if not n:
                break
            out += buf[:n]
    return bytes(out)


@pytest.mark.parametrize(("start", "end"), [(0, 10_000), (1234, 5678), (9_999, 10_000), (500, 500)])
def test_local_range_reads_from_start(tmp_path: Path, start: int, end: int) -> None:
    data = os.urandom(10_000)
    (tmp_path / "f").write_bytes(data)
    storage, path = Storage.for_url(str(tmp_path / "f"))
    got = _read_all(storage, path, start, end)
    # locally the range is where reading starts and what the kernel is told to fetch ahead;
    # the reader stops where its caller stops (here: at the end of the file)
    assert got == data[start:]


@pytest.mark.parametrize("nowait", [True, False])
def test_local_range_reads_files_out_of_the_page_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nowait: bool) -> None:
    """Evicted from the page cache (fadvise DONTNEED), the probing read misses: the range is
    advised ahead and read blocking; without RWF_NOWAIT every read is advised."""
    data = os.urandom(3 << 20)
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    if not nowait:
        monkeypatch.setattr(ranges.LocalRange, "nowait", None)
    storage, p = Storage.for_url(str(path))
    assert _read_all(storage, p, 4096, len(data), chunk=256 << 10) == data[4096:]


def test_local_range_refuses_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    storage, path = Storage.for_url(str(tmp_path / "fifo"))
    with pytest.raises(StorageError, match="FIFO"), storage.open_range(path, 0, 10):
        pass


@pytest.fixture
def ranged_gets() -> Iterator[list[str]]:
    seen: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if "GET /" in msg and '" 206 ' in msg:
                seen.append(msg)

    handler = Grab()
    log = logging.getLogger("werkzeug")
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield seen
    finally:
        log.removeHandler(handler)
        log.setLevel(old)


@pytest.mark.parametrize(
    ("start", "end", "gets"),
    [
        (0, 100_000, 7),  # 100,000 bytes in GETs of 16 KiB
        (5_000, 21_384, 1),
        (90_000, 200_000, 1),  # the object ends first: the short GET is the last one
        (100_000, 100_000, 0),
    ],
)
def test_s3_range_reads_are_ranged_gets(
    s3_env: dict[str, str], s3_bucket: str, s3_server: str, ranged_gets: list[str],
    monkeypatch: pytest.MonkeyPatch, start: int, end: int, gets: int,
) -> None:  # fmt: skip
    import s3fs

    data = os.urandom(100_000)
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    fs.pipe_file(f"{s3_bucket}/obj", data)
    monkeypatch.setattr(ranges, "RANGE_GET_BYTES", 16 << 10)
    storage, path = Storage.for_url(f"s3://{s3_bucket}/obj")
    ranged_gets.clear()
    assert _read_all(storage, path, start, end, chunk=7000) == data[start:end]
    assert len([g for g in ranged_gets if "/obj" in g]) == gets


def test_scan_memo_gives_every_record_its_own_findings() -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, ("true",))

    hostile = pickle.dumps({"w": Evil()}, protocol=2)
    plain = pickle.dumps({"w": [1, 2, 3]}, protocol=2)
    memo = _ScanMemo()
    for data, where in [(hostile, "a/data.pkl"), (hostile, "a/data.pkl"), (plain, "a/data.pkl"),
                        (hostile, "b/data.pkl"), (b"\x80\x02garbage", "a/data.pkl")]:  # fmt: skip
        direct, remembered = RecordFindings(), RecordFindings()
        scan_pickle(data, direct, where, frozenset())
        memo.scan(data, remembered, where, frozenset())
        memo.scan(data, remembered2 := RecordFindings(), where, frozenset())
        assert remembered == direct == remembered2
        assert bool(direct.hostile) == (data is hostile)
    assert len(memo._seen) == 4
    # an allowed global changes the answer: it is part of the key
    allowed, direct = RecordFindings(), RecordFindings()
    memo.scan(hostile, allowed, "a/data.pkl", frozenset({f"{os.system.__module__}.system"}))
    scan_pickle(hostile, direct, "a/data.pkl", frozenset({f"{os.system.__module__}.system"}))
    assert allowed == direct and not allowed.hostile
