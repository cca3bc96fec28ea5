"""core/verify/segments.py: the deep check's plan, its split into parts, the per-file merge."""

from __future__ import annotations

import itertools
import zlib

import pytest

from ckptctl.core.verify import contract as v
from ckptctl.core.verify.manifest import format_crc32
from ckptctl.core.verify.segments import (
    MAX_HOSTILE_SHOWN,
    FileJob,
    Segment,
    SegmentFormatError,
    SegmentResult,
    file_records,
    merge_file,
    part_of_segments,
    plan_digest,
    plan_segments,
)


@pytest.mark.parametrize(
    ("spans", "size", "kept"),
    [
        ([(0, 10), (10, 10), (20, 5)], 25, [0, 1, 2]),
        ([(20, 5), (0, 10), (10, 10)], 25, [1, 2, 0]),  # index order is not file order
        ([(0, 10), (5, 10), (10, 10)], 30, [0, 2]),  # overlap: the quick check's to report
        ([(0, 10), (10, 10), (20, 10)], 15, [0, 1]),  # truncated: the cut record is read, later ones not
        ([(0, 10), (10, 10)], 10, [0, 1]),  # a record starting exactly at the end is read (and found short)
        ([], 0, []),
    ],
)
def test_file_records(spans: list[tuple[int, int]], size: int, kept: list[int]) -> None:
    assert file_records(spans, size) == kept


def _job(spans: list[tuple[int, int]], size: int, want_crc: bool = False, name: str = "f") -> FileJob:
    return FileJob(name, name, size, want_crc, tuple(spans))


@pytest.mark.parametrize(
    ("spans", "size", "want_crc", "target", "expect"),
    [
        # records of 10 bytes, segments of >= 25 bytes: cut at the first record start past 25
        ([(0, 10), (10, 10), (20, 10), (30, 10), (40, 10)], 50, False, 25, [(0, 30, 0, 3), (30, 50, 3, 2)]),
        # the CRC wants the tail after the last record too
        ([(0, 10), (10, 10)], 64, True, 1000, [(0, 64, 0, 2)]),
        ([(0, 10), (10, 10)], 64, False, 1000, [(0, 20, 0, 2)]),
        # one record bigger than the target is one segment (never split)
        ([(0, 100), (100, 10)], 110, False, 25, [(0, 100, 0, 1), (100, 110, 1, 1)]),
        # a gap before the first record belongs to the first segment
        ([(8, 10)], 18, True, 4, [(0, 18, 0, 1)]),
        # no records, CRC only: cut anywhere
        ([], 10, True, 4, [(0, 4, 0, 0), (4, 8, 0, 0), (8, 10, 0, 0)]),
        ([], 0, True, 4, [(0, 0, 0, 0)]),
        ([], 10, False, 4, []),
    ],
)
def test_plan_segments(
    spans: list[tuple[int, int]], size: int, want_crc: bool, target: int, expect: list[tuple[int, int, int, int]]
) -> None:
    segs = plan_segments([_job(spans, size, want_crc)], target)
    assert [(s.start, s.end, s.first, s.count) for s in segs] == expect
    assert all(s.job == 0 for s in segs)


def test_segments_tile_every_file() -> None:
    jobs = [_job([(i * 7, 7) for i in range(50)], 350 + 3, True, "a"), _job([(0, 1000)], 1000, False, "b")]
    segs = plan_segments(jobs, 64)
    for j, job in enumerate(jobs):
        mine = [s for s in segs if s.job == j]
        assert mine[0].start == 0
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
        assert sum(s.count for s in mine) == len(job.spans)
    assert segs[-1].end == 1000


@pytest.mark.parametrize("count", [1, 2, 3, 7, 40])
def test_parts_are_contiguous_balanced_and_cover_everything(count: int) -> None:
    sizes = [100, 5, 5, 300, 50, 50, 50, 1, 1, 200, 100, 100]
    segs = [Segment(0, sum(sizes[:i]), sum(sizes[: i + 1]), i, 1) for i in range(len(sizes))]
    owner = part_of_segments(segs, count)
    assert owner == sorted(owner)  # contiguous runs
    assert set(owner) <= set(range(count))
    total = sum(sizes)
    for k in range(count):
        got = sum(s for s, o in zip(sizes, owner, strict=True) if o == k)
        assert got <= total / count + max(sizes)  # within one segment of an even share


def test_part_of_empty_segments() -> None:
    segs = [Segment(0, 0, 0, 0, 0)] * 4
    assert part_of_segments(segs, 2) == [0, 0, 1, 1]


def test_plan_digest_changes_with_the_plan_and_the_options() -> None:
    jobs = [_job([(0, 10), (10, 10)], 20)]
    segs = plan_segments(jobs, 10)
    base = plan_digest(jobs, segs, ["check-finite=False"])
    assert base == plan_digest(jobs, segs, ["check-finite=False"])
    assert base != plan_digest(jobs, segs, ["check-finite=True"])
    assert base != plan_digest(jobs, plan_segments(jobs, 1000), ["check-finite=False"])
    longer = [_job([(0, 10), (10, 10)], 21)]
    assert base != plan_digest(longer, plan_segments(longer, 10), ["check-finite=False"])


def test_merge_file_combines_crcs_in_order_and_caps_hostile_records() -> None:
    data = bytes(range(256)) * 40
    cuts = [0, 1000, 1001, 7000, len(data)]
    results = []
    for a, b in itertools.pairwise(cuts):
        r = SegmentResult(crc=zlib.crc32(data[a:b]), crc_bytes=b - a, bytes_read=b - a, records=1)
        for n in range(15):
            r.add_hostile(f"{a}:{n}")
        results.append(r)
    results[2].problems.append(v.Problem(v.CORRUPT, "bad member", code=v.CRC_MISMATCH))
    out = merge_file("f", True, results)
    assert out.crc == format_crc32(zlib.crc32(data))
    assert out.bytes_read == len(data) and out.records == 4
    hostile = [p for p in out.problems if p.code == v.HOSTILE_PICKLE]
    assert len(hostile) == MAX_HOSTILE_SHOWN + 1
    assert hostile[0].message == "hostile record: 0:0" and hostile[15].message == "hostile record: 1000:0"
    assert hostile[-1].message == f"... and {60 - MAX_HOSTILE_SHOWN} more hostile records in f"
    assert out.problems[0].message == "bad member"


def test_merge_file_failure_drops_the_crc_and_is_reported_once() -> None:
    fail = v.Problem(v.INCOMPLETE, "unreadable shard f: denied", code=v.READ_FAILED)
    out = merge_file("f", True, [SegmentResult(failure=fail), SegmentResult(failure=fail), SegmentResult()])
    assert out.crc is None
    assert out.problems == [fail]
    assert merge_file("f", False, [SegmentResult(crc=5, crc_bytes=1)]).crc is None


def test_segment_result_json_round_trip() -> None:
    r = SegmentResult(
        problems=[v.Problem(v.CORRUPT, "x", code=v.RECORD_TRUNCATED)],
        failure=v.Problem(v.INCOMPLETE, "y", code=v.READ_FAILED),
        crc=0xDEADBEEF, crc_bytes=9, bytes_read=9, records=2, members_checked=7, members_without_crc=1,
        decoded={"zstd": 1}, undecoded={"why": 2},
    )  # fmt: skip
    for n in range(MAX_HOSTILE_SHOWN + 3):
        r.add_hostile(f"h{n}")
    back = SegmentResult.from_json(r.to_json())
    assert back.to_json() == r.to_json()
    assert back.num_hostile == MAX_HOSTILE_SHOWN + 3 and len(back.hostile) == MAX_HOSTILE_SHOWN


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ([], "not an object"),
        ({}, "crc32"),
        ({"crc32": "xyzxyzxy"}, "crc32"),
        ({"crc32": "00000000", "records": -1}, "records is not a count"),
        ({"crc32": "00000000", "records": True}, "records is not a count"),
        ({"crc32": "00000000", "bytes_read": 2**64}, "bytes_read is not a count"),
        ({"crc32": "00000000", "problems": [{"code": "nope", "severity": "corrupt", "message": "m"}]}, "unknown problem code"),
        ({"crc32": "00000000", "problems": [{"code": "crc-mismatch", "severity": "fine", "message": "m"}]}, "severity"),
        ({"crc32": "00000000", "problems": "x"}, "problems is not a list"),
        ({"crc32": "00000000", "hostile": ["a"] * (MAX_HOSTILE_SHOWN + 1)}, "hostile"),
        ({"crc32": "00000000", "hostile": ["a", "b"], "num_hostile": 1}, "num_hostile"),
        ({"crc32": "00000000", "decoded": {"a": "1"}}, "a is not a count"),
    ],
)
def test_segment_result_refuses_malformed_json(doc: object, says: str) -> None:
    with pytest.raises(SegmentFormatError, match=says):
        SegmentResult.from_json(doc)
