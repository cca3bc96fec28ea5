"""Deep verify's unit of work: a byte range of one shard file, cut at record boundaries.

The deep check (``runroot.deep``) plans every file it reads into segments, checks each
segment on its own (a thread here, a part on another node), then merges the segments'
results file by file, in file order. A segment's result depends only on its bytes, so a
one-node run, a run of N parts (``verify --deep --part K/N``) and their merge give the
same report by construction: the one-node run *is* the merge of all its segments.

Here: the plan (pure function of the index and the listing), its split into N
contiguous parts balanced by bytes, the plan's digest (parts and merge must have seen
the same checkpoint with the same options), a segment's result with its JSON form (a
part file is input: ``SegmentResult.from_json`` refuses anything malformed), and the
per-file merge. No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptctl.core.verify import contract as v
from ckptctl.core.verify.crc import crc32_combine
from ckptctl.core.verify.manifest import format_crc32

#: A new segment starts at the first record past this many bytes from the segment's start.
#: Small enough that a few large files spread over threads and nodes, large enough that a
#: 10 TB checkpoint is ~80,000 segments (a few MB of part JSON). A record is never split:
#: one huge record is one segment.
SEGMENT_BYTES = 128 << 20
#: Bumped when the plan or a segment's result changes meaning: parts and merge must agree.
PLAN_VERSION = 1
#: Hostile records named per file; the rest are counted.
MAX_HOSTILE_SHOWN = 20
_MAX_INT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class FileJob:
    """One file the deep check reads: the records it holds, its listed size."""

    shown: str
    """Its path inside the checkpoint (``sub/__0_0.distcp`` for nested DCP directories)."""
    rel: str
    """Its name inside its DCP directory (what problem messages name)."""
    size: int
    want_crc: bool
    """The manifest records its CRC-32: every byte is read and combined into a whole-file CRC."""
    spans: tuple[tuple[int, int], ...]
    """``(offset, length)`` of the records to check, in file order, overlaps dropped (``file_records``)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """``[start, end)`` of one file and the records starting in it."""

    job: int
    """Index of its file in the plan's ``jobs``."""
    start: int
    end: int
    first: int
    """Index of its first record in the file's ``spans``."""
    count: int

    @property
    def num_bytes(self) -> int:
        return max(0, self.end - self.start)


def file_records(spans: Sequence[tuple[int, int]], size: int) -> list[int]:
    """Which records of a file the deep check reads, as indices into ``spans``, in file order.

    A record overlapping the one before it is not read (the quick check reports the
    overlap); nor is one starting past the listed size (a truncated file: reported by the
    quick check; the record the end cuts is read, and found short).
    """
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], i))
    kept: list[int] = []
    end = 0
    for i in order:
        offset, length = spans[i]
        if offset > size:
            break
        if offset < end:
            continue
        kept.append(i)
        end = offset + length
    return kept


def plan_segments(jobs: Sequence[FileJob], segment_bytes: int = SEGMENT_BYTES) -> list[Segment]:
    """Cut every file into segments at record starts, in plan order (file by file)."""
    segments: list[Segment] = []
    for j, job in enumerate(jobs):
        last_end = job.size if job.want_crc else (job.spans[-1][0] + job.spans[-1][1] if job.spans else 0)
        if not job.spans:
            if not job.want_crc:
                continue
            # a file with no records (CRC only): cut anywhere
            start = 0
            while True:
                end = min(job.size, start + segment_bytes)
                segments.append(Segment(j, start, end, 0, 0))
                if end >= job.size:
                    break
                start = end
            continue
        start, first = 0, 0
        for n, (offset, _length) in enumerate(job.spans):
            if n > first and offset - start >= segment_bytes:
                segments.append(Segment(j, start, offset, first, n - first))
                start, first = offset, n
        segments.append(Segment(j, start, max(last_end, start), first, len(job.spans) - first))
    return segments


def part_of_segments(segments: Sequence[Segment], count: int) -> list[int]:
    """For each segment, the part (0-based, of ``count``) that checks it.

    Parts are contiguous runs of the plan (each node reads long stretches of few files)
    balanced by bytes: a segment goes to the part its middle byte falls in.
    """
    total = sum(s.num_bytes for s in segments)
    out: list[int] = []
    cum = 0
    for i, s in enumerate(segments):
        if total == 0:
            out.append(i * count // max(1, len(segments)))
        else:
            out.append(min(count - 1, (2 * cum + s.num_bytes) * count // (2 * total)))
        cum += s.num_bytes
    return out


def plan_digest(jobs: Sequence[FileJob], segments: Sequence[Segment], options: Iterable[str]) -> str:
    """A fingerprint of the plan and of the options that change a segment's result."""
    doc = [
        PLAN_VERSION,
        sorted(options),
        [[j.shown, j.rel, j.size, j.want_crc, [list(s) for s in j.spans]] for j in jobs],
        [[s.job, s.start, s.end, s.first, s.count] for s in segments],
    ]
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode()
    import hashlib  # here, not at import: loading OpenSSL costs ~7 ms of every start, and only --part/--merge ask

    return hashlib.sha256(raw).hexdigest()[:32]


# ---------------------------------------------------------------------------------------
# One segment's result, and its JSON form (part files)
# ---------------------------------------------------------------------------------------


class SegmentFormatError(ValueError):
    """A segment result in a part file is malformed (the message says which field)."""


@dataclass(slots=True)
class SegmentResult:
    """What checking one segment found. Everything a merge needs; nothing else."""

    problems: list[v.Problem] = field(default_factory=list)
    """Damaged records, in file order."""
    hostile: list[str] = field(default_factory=list)
    """The first ``MAX_HOSTILE_SHOWN`` hostile-record messages (``num_hostile`` counts all)."""
    num_hostile: int = 0
    failure: v.Problem | None = None
    """The file could not be read (refused, unreadable): the segment stopped there."""
    crc: int = 0
    crc_bytes: int = 0
    """How many bytes ``crc`` covers (from ``start``); equals ``bytes_read`` when the CRC is wanted."""
    bytes_read: int = 0
    records: int = 0
    members_checked: int = 0
    members_without_crc: int = 0
    decoded: dict[str, int] = field(default_factory=dict)
    undecoded: dict[str, int] = field(default_factory=dict)

    def add_hostile(self, message: str) -> None:
        self.num_hostile += 1
        if len(self.hostile) < MAX_HOSTILE_SHOWN:
            self.hostile.append(message)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "crc32": format_crc32(self.crc),
            "crc_bytes": self.crc_bytes,
            "bytes_read": self.bytes_read,
            "records": self.records,
            "members_checked": self.members_checked,
        }
        if self.members_without_crc:
            doc["members_without_crc"] = self.members_without_crc
        if self.problems:
            doc["problems"] = [p.to_json() for p in self.problems]
        if self.num_hostile:
            doc["hostile"] = self.hostile
            doc["num_hostile"] = self.num_hostile
        if self.failure is not None:
            doc["failure"] = self.failure.to_json()
        if self.decoded:
            doc["decoded"] = self.decoded
        if self.undecoded:
            doc["undecoded"] = self.undecoded
        return doc

    @classmethod
    def from_json(cls, doc: object) -> SegmentResult:
        if not isinstance(doc, dict):
            raise SegmentFormatError("a segment result is not an object")
        crc_text = doc.get("crc32")
        if not isinstance(crc_text, str) or len(crc_text) != 8:
            raise SegmentFormatError("crc32 is not 8 hex digits")
        try:
            crc = int(crc_text, 16)
        except ValueError:
            raise SegmentFormatError("crc32 is not 8 hex digits") from None
        hostile = doc.get("hostile", [])
        if not isinstance(hostile, list) or len(hostile) > MAX_HOSTILE_SHOWN or not all(
            isinstance(h, str) for h in hostile
        ):
            raise SegmentFormatError(f"hostile is not a list of at most {MAX_HOSTILE_SHOWN} strings")
        failure = doc.get("failure")
        res = cls(
            problems=[_problem(p) for p in _list(doc, "problems")],
            hostile=list(hostile),
            num_hostile=_count(doc, "num_hostile"),
            failure=_problem(failure) if failure is not None else None,
            crc=crc,
            crc_bytes=_count(doc, "crc_bytes"),
            bytes_read=_count(doc, "bytes_read"),
            records=_count(doc, "records"),
            members_checked=_count(doc, "members_checked"),
            members_without_crc=_count(doc, "members_without_crc"),
            decoded=_counts(doc, "decoded"),
            undecoded=_counts(doc, "undecoded"),
        )
        if res.num_hostile < len(res.hostile):
            raise SegmentFormatError("num_hostile is less than the hostile messages given")
        return res


def _count(doc: Mapping[str, Any], key: str) -> int:
    n = doc.get(key, 0)
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= _MAX_INT:
        raise SegmentFormatError(f"{key} is not a count")
    return n


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    got = doc.get(key, [])
    if not isinstance(got, list):
        raise SegmentFormatError(f"{key} is not a list")
    return got


def _counts(doc: Mapping[str, Any], key: str) -> dict[str, int]:
    got = doc.get(key, {})
    if not isinstance(got, dict) or not all(isinstance(k, str) for k in got):
        raise SegmentFormatError(f"{key} is not an object of counts")
    return {k: _count(got, k) for k in got}


def _problem(doc: object) -> v.Problem:
    if not isinstance(doc, dict):
        raise SegmentFormatError("a problem is not an object")
    code, severity, message = doc.get("code"), doc.get("severity"), doc.get("message")
    if code not in v.PROBLEM_CODES:
        raise SegmentFormatError(f"unknown problem code {str(code)[:40]!r}")
    if severity not in (v.CORRUPT, v.INCOMPLETE, v.UNSUPPORTED):
        raise SegmentFormatError(f"unknown severity {str(severity)[:40]!r}")
    if not isinstance(message, str):
        raise SegmentFormatError("a problem's message is not a string")
    return v.Problem(severity, message, code=code)


# ---------------------------------------------------------------------------------------
# Merge: the segments of one file, in order
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class FileSummary:
    """One file's deep result, merged from its segments."""

    problems: list[v.Problem] = field(default_factory=list)
    crc: str | None = None
    """Whole-file CRC-32 (``format_crc32``) when wanted and every segment was read."""
    bytes_read: int = 0
    records: int = 0
    members_checked: int = 0
    members_without_crc: int = 0
    decoded: dict[str, int] = field(default_factory=dict)
    undecoded: dict[str, int] = field(default_factory=dict)


def merge_file(rel: str, want_crc: bool, results: Sequence[SegmentResult]) -> FileSummary:
    """A file's result from its segments' (in file order): problems, then the first
    failure, then at most ``MAX_HOSTILE_SHOWN`` hostile records and a count of the rest."""
    out = FileSummary()
    hostile: list[str] = []
    num_hostile = 0
    failure: v.Problem | None = None
    crc = 0
    for r in results:
        out.problems.extend(r.problems)
        if failure is None and r.failure is not None:
            failure = r.failure
        crc = crc32_combine(crc, r.crc, r.crc_bytes)
        out.bytes_read += r.bytes_read
        out.records += r.records
        out.members_checked += r.members_checked
        out.members_without_crc += r.members_without_crc
        for k, n in r.decoded.items():
            out.decoded[k] = out.decoded.get(k, 0) + n
        for k, n in r.undecoded.items():
            out.undecoded[k] = out.undecoded.get(k, 0) + n
        hostile.extend(r.hostile[: max(0, MAX_HOSTILE_SHOWN - len(hostile))])
        num_hostile += r.num_hostile
    if failure is not None:
        out.problems.append(failure)
    elif want_crc:
        out.crc = format_crc32(crc)
    for h in hostile:
        out.problems.append(v.Problem(v.CORRUPT, f"hostile record: {h}", code=v.HOSTILE_PICKLE))
    if num_hostile > len(hostile):
        out.problems.append(
            v.Problem(
                v.CORRUPT,
                f"... and {num_hostile - len(hostile)} more hostile records in {rel}",
                code=v.HOSTILE_PICKLE,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class CheckpointParts:
    """One checkpoint's segment results gathered from every part file (what a merge reads)."""

    plan: str
    """The plan digest every part reported (``plan_digest``)."""
    num_segments: int
    segments: Mapping[int, SegmentResult]
