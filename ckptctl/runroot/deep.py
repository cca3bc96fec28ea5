"""The deep check (``verify --deep``): read every byte of every shard a checkpoint needs.

Per record: the zip CRC-32 of every member, a pickle opcode scan (no hostile
global), writer extensions undone where possible (zstd), ``--check-finite``
(imports torch); per file: the whole-file CRC-32 against ckptctl's manifest.
Files are cut into segments at record boundaries (``core.verify.segments``); each
byte is read once, each segment sequentially, segments on a thread pool (or shared
out to parts on other nodes: ``verify --deep --part K/N``, then ``--merge``); big
records are streamed member by member. Called by ``ckptctl.runroot.inspect``;
nothing here writes.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

from ckptctl.adapters.fastcrc import crc32 as fast_crc32
from ckptctl.adapters.localfile import SpecialFileError
from ckptctl.adapters.ranges import RangeReader
from ckptctl.adapters.storage import Storage
from ckptctl.core.verify import contract as v
from ckptctl.core.verify.crc import crc32_combine, crc32_of_pieces
from ckptctl.core.verify.dcp import DTYPE_ITEMSIZE, DcpIndex, DcpUnit, StorageItem
from ckptctl.core.verify.manifest import Manifest
from ckptctl.core.verify.records import (
    MAX_LISTED_PROBLEMS,
    MAX_PICKLE_SCAN_BYTES,
    TAIL_READ_BYTES,
    RecordFindings,
    RecordFormatError,
    check_member_crc,
    check_record,
    data_offset,
    parse_directory,
    scan_pickle,
)
from ckptctl.core.verify.segments import (
    SEGMENT_BYTES,
    CheckpointParts,
    FileJob,
    Segment,
    SegmentResult,
    file_records,
    merge_file,
    part_of_segments,
    plan_digest,
    plan_segments,
)
from ckptctl.errors import InputError, StorageError, StorageUnreachableError, UsageError
from ckptctl.runroot.reports import CheckOptions, CheckpointReport, ProgressFn

# Records up to this size are read whole into one buffer (one read, then the member CRCs and
# the pickle scan on the buffer); bigger ones are streamed member by member in 1 MiB chunks.
# Locally, read + CRC runs at the same speed per core for buffers of 256 KiB to 8 MiB (6.0
# GB/s; the L3 cache holds them) and falls past that (4.8 GB/s at 16 MiB, 2.3 at 64 MiB);
# streaming a record costs ~28 small reads and Python per member, so records of 1-8 MiB
# (a large model sharded over many ranks) are read whole. On object stores a bigger limit
# avoids an extra ranged GET for the central directory of each record.
_WHOLE_RECORD_MAX_BYTES = 8 << 20
_WHOLE_RECORD_MAX_BYTES_REMOTE = 32 << 20
#: Records written through a writer extension (zstd) are decoded whole, up to this size.
_TRANSFORMED_MAX_BYTES = 256 << 20
_STREAM_CHUNK_BYTES = 1 << 20
#: Overrides ``SEGMENT_BYTES`` (bytes): the unit of work shared out to threads and parts.
SEGMENT_BYTES_ENV = "CKPTCTL_SEGMENT_BYTES"

# ---------------------------------------------------------------------------------------
# One segment: a byte range of one file, at record boundaries (core/verify/segments.py)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Job:
    """A file to read: its plan entry, where it lives, its records in file order."""

    file: FileJob
    upath: str
    items: tuple[StorageItem, ...]
    index: DcpIndex | None


_BUFFERS = threading.local()
#: The largest read buffer a thread keeps for its next segment (bigger ones serve one record).
_KEPT_BUFFER_BYTES = 32 << 20


class _Reader:
    """Sequential reader over one segment: position, a reusable record buffer, the running CRC."""

    def __init__(self, f: RangeReader, start: int, want_crc: bool, progress: ProgressFn) -> None:
        self.f = f
        self.pos = start
        self.crc = 0
        self.want_crc = want_crc
        self.progress = progress
        # one buffer per thread, kept from segment to segment: a fresh one would cost a page
        # fault per 4 KiB on its first fill (measured: a third of the time on 2 MiB files)
        self._buf: mmap.mmap | None = getattr(_BUFFERS, "buf", None)

    def _fill(self, view: memoryview) -> int:
        got = 0
        while got < len(view):
            n = self.f.readinto(view[got:])
            if not n:
                break
            got += n
        self.pos += got
        self.progress(got)
        return got

    def read_record(self, n: int) -> memoryview:
        """The next n bytes (fewer at EOF) in a reused buffer; the caller adds their CRC."""
        if self._buf is None or len(self._buf) < n:
            # page-aligned (an anonymous mapping: no file behind it, nothing to truncate). The
            # kernel copies into an aligned buffer 4x faster than into a bytearray from malloc,
            # whose data starts 16 bytes into its pages (measured here: 10 vs 2.4 GiB/s per core)
            self._buf = mmap.mmap(-1, max(n, mmap.PAGESIZE))
            if n <= _KEPT_BUFFER_BYTES:
                _BUFFERS.buf = self._buf
        view = memoryview(self._buf)[:n]
        return view[: self._fill(view)]

    def add_crc(self, crc: int, length: int) -> None:
        if self.want_crc:
            self.crc = crc32_combine(self.crc, crc, length)

    def skip_to(self, offset: int) -> None:
        """Read (and CRC) everything up to ``offset``."""
        while self.pos < offset:
            chunk = self.read_record(min(_STREAM_CHUNK_BYTES, offset - self.pos))
            if not len(chunk):
                break
            if self.want_crc:
                self.crc = fast_crc32(chunk, self.crc)


class _ScanMemo:
    """Pickle scans already made, by the pickle's bytes: a model's tensors of one shape and dtype
    pickle to the same ``data.pkl``, so most records repeat a scan made before.

    ``scan_pickle`` is a function of the bytes, the member name and the allowed globals: a
    remembered result is the result. Bounded: pickles up to ``MAX_KEY_BYTES``, at most
    ``MAX_ENTRIES`` of them (then later ones are scanned every time).
    """

    MAX_KEY_BYTES = 4096
    MAX_ENTRIES = 4096
    _FIELDS = tuple(f.name for f in fields(RecordFindings))

    def __init__(self) -> None:
        self._seen: dict[tuple[bytes, str, frozenset[str]], RecordFindings] = {}

    def scan(self, data: bytes, findings: RecordFindings, where: str, extra: frozenset[str]) -> None:
        if len(data) > self.MAX_KEY_BYTES:
            scan_pickle(data, findings, where, extra)
            return
        key = (data, where, extra)
        got = self._seen.get(key)
        if got is None:
            got = RecordFindings()
            scan_pickle(data, got, where, extra)
            if len(self._seen) < self.MAX_ENTRIES:
                self._seen[key] = got
        for name in self._FIELDS:  # every list, set and count the scan filled, whatever they are
            value = getattr(got, name)
            if isinstance(value, list):
                getattr(findings, name).extend(value)
            elif isinstance(value, set):
                getattr(findings, name).update(value)
            elif isinstance(value, int) and value:
                setattr(findings, name, getattr(findings, name) + value)


def _check_segment(
    storage: Storage, job: _Job, seg: Segment, options: CheckOptions, progress: ProgressFn, memo: _ScanMemo
) -> SegmentResult:
    res = SegmentResult()
    rel = job.file.rel
    fpath = storage.join(job.upath, rel)
    whole_max = _WHOLE_RECORD_MAX_BYTES if storage.is_local else max(
        _WHOLE_RECORD_MAX_BYTES, _WHOLE_RECORD_MAX_BYTES_REMOTE
    )
    try:
        with storage.open_range(fpath, seg.start, seg.end) as f:
            rd = _Reader(f, seg.start, job.file.want_crc, progress)
            for item in job.items[seg.first : seg.first + seg.count]:
                rd.skip_to(item.offset)
                if rd.pos != item.offset:
                    break
                res.records += 1
                finite: tuple[v.ProblemCode, str] | None = None
                if item.length > (_TRANSFORMED_MAX_BYTES if item.transformed else whole_max):
                    findings = _stream_record(storage, fpath, rd, item, options, memo)
                    if item.transformed:
                        why = f"record over {_TRANSFORMED_MAX_BYTES >> 20} MiB, too large to decode in memory"
                        res.undecoded[why] = res.undecoded.get(why, 0) + 1
                else:
                    record = rd.read_record(item.length)
                    if len(record) < item.length:
                        break  # truncated: reported by the quick check
                    pieces: list[tuple[int, int, int]] = []
                    plain: bytes | memoryview | None = record
                    if item.transformed:
                        findings, plain = _check_transformed(record, item, options, res, job.index, memo)
                    else:
                        findings, pieces = check_record(
                            record, extra_allowed=options.allowed_globals, crc32=fast_crc32, scan=memo.scan
                        )
                    if rd.want_crc:
                        rd.add_crc(crc32_of_pieces(record, pieces, fast_crc32), len(record))
                    if (
                        options.check_finite
                        and plain is not None
                        and item.chunk_offsets is not None
                        and not findings.problems
                    ):
                        finite = _check_finite(bytes(plain), item)
                res.members_checked += findings.members_checked
                res.members_without_crc += findings.members_without_crc
                for found in findings.listed():
                    res.problems.append(
                        v.Problem(
                            v.CORRUPT, f"{rel} record {item.fqn!r} @{item.offset}: {found.message}", code=found.code
                        )
                    )
                if finite is not None:
                    code, msg = finite
                    res.problems.append(
                        v.Problem(v.CORRUPT, f"{rel} record {item.fqn!r} @{item.offset}: {msg}", code=code)
                    )
                for h in findings.hostile:
                    res.add_hostile(f"{rel} record {item.fqn!r}: {h.message}")
            rd.skip_to(seg.end)  # the gap up to the next segment (CRC'd when the manifest wants it)
            if rd.want_crc:
                res.crc, res.crc_bytes = rd.crc, rd.pos - seg.start
            res.bytes_read = rd.pos - seg.start
    except StorageUnreachableError:
        raise
    except SpecialFileError as e:
        res.failure = v.Problem(v.CORRUPT, f"shard {rel} refused: {e.message}", code=v.RECORD_CORRUPT)
    except StorageError as e:
        res.failure = v.Problem(v.INCOMPLETE, f"unreadable shard {rel}: {e.message}", code=v.READ_FAILED)
    if len(res.problems) > MAX_LISTED_PROBLEMS:  # a shard of a million damaged records: one summary line
        more = len(res.problems) - MAX_LISTED_PROBLEMS
        res.problems[MAX_LISTED_PROBLEMS:] = [
            v.Problem(v.CORRUPT, f"... and {more:,} more problem(s) in {rel} (not listed)", code=res.problems[-1].code)
        ]
    return res


def declared_record_bytes(index: DcpIndex | None, item: StorageItem) -> int | None:
    """The raw bytes the index says a tensor record holds (chunk elements x dtype size), else None.

    A genuine compressed record decodes to about this much (plus the archive's small overhead),
    however well it compressed: a chunk of zeros is legitimate, a stream decoding past what the
    index declares is not.
    """
    if index is None or item.chunk_offsets is None:
        return None
    entry = index.tensors.get(item.fqn)
    itemsize = DTYPE_ITEMSIZE.get(entry.dtype) if entry is not None else None
    if entry is None or not itemsize:
        return None
    for chunk in entry.chunks:
        if chunk.offsets == item.chunk_offsets:
            return chunk.numel * itemsize
    return None


def _check_transformed(
    record: bytes | memoryview, item: StorageItem, options: CheckOptions, res: SegmentResult,
    index: DcpIndex | None, memo: _ScanMemo,
) -> tuple[RecordFindings, bytes | None]:
    """Undo the record's writer extensions (zstd) and check the archive inside, like any record."""
    from ckptctl.adapters.transforms import TransformError, TransformLimitError, decoder_for

    label = "+".join(item.transforms) or "unknown extension"
    decode, why = decoder_for(item.transforms)
    if decode is None:
        res.undecoded[why] = res.undecoded.get(why, 0) + 1
        return RecordFindings(), None
    try:
        plain = decode(bytes(record), declared_record_bytes(index, item))
    except TransformLimitError as e:
        # past the decompression caps: not proof of damage, just not looked into here
        why = f"decodes past the caps ({e})"
        res.undecoded[why] = res.undecoded.get(why, 0) + 1
        return RecordFindings(), None
    except TransformError as e:
        findings = RecordFindings()
        findings.add(f"{label}: {e}")
        return findings, None
    findings, _pieces = check_record(plain, extra_allowed=options.allowed_globals, crc32=fast_crc32, scan=memo.scan)
    res.decoded[label] = res.decoded.get(label, 0) + 1
    return findings, plain


def _stream_record(
    storage: Storage, fpath: str, rd: _Reader, item: StorageItem, options: CheckOptions, memo: _ScanMemo
) -> RecordFindings:
    """Check a big record member by member without holding it in memory."""
    findings = RecordFindings()
    start = item.offset
    end = item.offset + item.length
    if item.transformed:
        rd.skip_to(end)
        return findings
    tail_len = min(item.length, TAIL_READ_BYTES)
    # the tail (central directory) is read out of band; it is CRC'd again in order below
    tail = storage.read_bytes(fpath, end - tail_len, end)
    try:
        members = sorted(parse_directory(tail, item.length), key=lambda m: m.local_header_offset)
    except RecordFormatError as e:
        findings.add_error(e)
        rd.skip_to(end)
        return findings
    for m in members:
        rd.skip_to(start + m.local_header_offset)
        header = bytes(rd.read_record(30))
        if rd.want_crc:
            rd.crc = fast_crc32(header, rd.crc)
        try:
            data_start = data_offset(header, m)
        except RecordFormatError as e:
            findings.add_error(e)
            continue
        rd.skip_to(start + data_start)
        if m.method != 0:
            findings.add(f"member {m.name}: compressed member in a large record is not checked")
            continue
        crc = 0
        left = m.compressed_size
        pkl = bytearray() if m.name.endswith("data.pkl") else None
        while left > 0:
            chunk = rd.read_record(min(_STREAM_CHUNK_BYTES, left))
            if not len(chunk):
                break
            crc = fast_crc32(chunk, crc)  # running CRC: one combine per member below, none per chunk
            if pkl is not None:
                pkl.extend(chunk)
                if len(pkl) > MAX_PICKLE_SCAN_BYTES:
                    findings.add(
                        f"member {m.name} is over {MAX_PICKLE_SCAN_BYTES >> 20} MiB: too large to scan for "
                        "hostile globals (DCP would unpickle it whole)"
                    )
                    pkl = None
            left -= len(chunk)
        rd.add_crc(crc, m.compressed_size - left)
        if left:
            findings.add(f"member {m.name} runs past the end of the file", v.RECORD_TRUNCATED)
            return findings
        check_member_crc(m, crc, findings)
        if pkl is not None:
            memo.scan(bytes(pkl), findings, m.name, options.allowed_globals)
    rd.skip_to(end)
    return findings


def _check_finite(record: bytes, item: StorageItem) -> tuple[v.ProblemCode, str] | None:
    """Decode one tensor record (imports torch); what is wrong with its values, if anything."""
    import io

    import torch  # only --check-finite needs it

    try:
        t = torch.load(io.BytesIO(record), weights_only=True, map_location="cpu")
    except Exception as e:  # a record torch cannot decode is corrupt, whatever the reason
        return v.RECORD_CORRUPT, f"tensor cannot be decoded: {type(e).__name__}: {e}"
    if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel():
        finite = torch.isfinite(t)
        if not bool(finite.all()):
            bad = int((~finite).sum())
            nan = int(torch.isnan(t).sum())
            return v.NON_FINITE, f"{bad} non-finite value(s) ({nan} NaN, {bad - nan} Inf)"
    return None


def deep_check(
    storage: Storage,
    path: str,
    units: list[DcpUnit],
    manifest: Manifest | None,
    all_files: dict[str, int],
    options: CheckOptions,
    report: CheckpointReport,
    problems: list[v.Problem],
    progress: ProgressFn,
) -> None:
    """Read every byte the checkpoint's DCP directories need; add what was found to ``report``.

    The files are planned into segments (``core.verify.segments``). Each segment is checked
    here on a thread pool, or by the part that owns it (``options.split``: ``--part K/N``),
    or its result comes from the part files (a merge). The report is built from the
    segments' results in plan order however they were obtained, so all three agree.
    """
    jobs = _plan_jobs(storage, path, units, manifest, all_files)
    files = [j.file for j in jobs]
    segments = plan_segments(files, _segment_bytes())
    split = options.split
    digest = plan_digest(files, segments, _result_options(options)) if split is not None else ""
    results: dict[int, SegmentResult]
    if split is not None and split.merged is not None:
        results = _merged_results(report.name, split.merged, digest, len(segments))
    else:
        if split is None:
            mine = list(range(len(segments)))
        else:
            owner = part_of_segments(segments, split.count)
            mine = [i for i, k in enumerate(owner) if k == split.part - 1]
        results = _run_segments(storage, jobs, segments, mine, options, progress)
        if split is not None:
            report.deep_part = {
                "plan": digest,
                "num_segments": len(segments),
                "segments": [{"i": i, **results[i].to_json()} for i in mine],
            }
            report.notes.append(
                f"deep part {split.part} of {split.count}: {len(mine)} of {len(segments)} segment(s), "
                f"{sum(segments[i].num_bytes for i in mine)} of {sum(s.num_bytes for s in segments)} bytes "
                "read here; `verify --deep --merge` gives the whole checkpoint's verdict"
            )
    by_job: dict[int, list[SegmentResult]] = {}
    complete_jobs = set(range(len(jobs)))
    for i, seg in enumerate(segments):
        if i in results:
            by_job.setdefault(seg.job, []).append(results[i])
        else:
            complete_jobs.discard(seg.job)
    computed: dict[str, str] = {}
    summaries = []
    for j, job in enumerate(jobs):
        if j not in by_job:
            continue
        summary = merge_file(job.file.rel, job.file.want_crc and j in complete_jobs, by_job[j])
        summaries.append(summary)
        problems.extend(summary.problems)
        report.bytes_read += summary.bytes_read
        report.records_checked += summary.records
        report.members_crc_checked += summary.members_checked
        if summary.crc is not None:
            computed[job.file.shown] = summary.crc
    no_crc = sum(r.members_without_crc for r in summaries)
    if no_crc:
        report.notes.append(f"{no_crc} record member(s) carry no CRC-32 (saved with compute_crc32=False)")
    decoded: dict[str, int] = {}
    undecoded: dict[str, int] = {}
    for r in summaries:
        for k, n in r.decoded.items():
            decoded[k] = decoded.get(k, 0) + n
        for k, n in r.undecoded.items():
            undecoded[k] = undecoded.get(k, 0) + n
    for k, n in sorted(decoded.items()):
        report.notes.append(f"{n} record(s) written through {k} were decoded and checked inside")
    for k, n in sorted(undecoded.items()):
        # --deep never passes bytes it did not check: the verdict cannot be complete
        problems.append(
            v.Problem(
                v.UNSUPPORTED,
                f"{n} record(s) written through a writer extension could not be checked inside: {k}",
                code=v.NOT_CHECKED,
            )
        )
    if manifest is not None:
        problems.extend(v.check_manifest_checksums(manifest, computed))


def _plan_jobs(
    storage: Storage, path: str, units: list[DcpUnit], manifest: Manifest | None, all_files: dict[str, int]
) -> list[_Job]:
    """Every file to read, in a fixed order: each DCP directory's shards, then manifest-only files."""
    want_checksums = {f.path for f in manifest.files if f.checksum} if manifest else set()
    jobs: list[_Job] = []
    covered: set[str] = set()
    for unit in units:
        if unit.index is None:
            continue
        upath = storage.join(path, unit.subdir) if unit.subdir else path
        by_file: dict[str, list[StorageItem]] = {}
        for it in unit.index.items:
            if v.is_plain_file_name(it.relative_path) and it.relative_path in unit.files:
                by_file.setdefault(it.relative_path, []).append(it)
        for rel, items in by_file.items():
            shown = f"{unit.subdir}/{rel}" if unit.subdir else rel
            covered.add(shown)
            size = unit.files[rel]
            kept = [items[i] for i in file_records([(it.offset, it.length) for it in items], size)]
            spans = tuple((it.offset, it.length) for it in kept)
            jobs.append(_Job(FileJob(shown, rel, size, shown in want_checksums, spans), upath, tuple(kept), unit.index))
    for shown in sorted(want_checksums - covered):
        if shown in all_files:
            jobs.append(_Job(FileJob(shown, shown, all_files[shown], True, ()), path, (), None))
    return jobs


def _segment_bytes() -> int:
    """``SEGMENT_BYTES``, or ``CKPTCTL_SEGMENT_BYTES`` (finer splits; the plan digest includes it)."""
    raw = os.environ.get(SEGMENT_BYTES_ENV, "")
    try:
        return max(4096, int(raw)) if raw else SEGMENT_BYTES
    except ValueError:
        raise UsageError(f"{SEGMENT_BYTES_ENV}={raw[:40]!r} is not a number of bytes") from None


def _result_options(options: CheckOptions) -> list[str]:
    """The options that change a segment's result (parts and merge must agree on them)."""
    return [f"check-finite={options.check_finite}", *(f"allow-global={g}" for g in sorted(options.allowed_globals))]


def _run_segments(
    storage: Storage,
    jobs: list[_Job],
    segments: list[Segment],
    which: list[int],
    options: CheckOptions,
    progress: ProgressFn,
) -> dict[int, SegmentResult]:
    # CRC and reads release the GIL: one thread per core locally, more for network I/O
    cores = os.cpu_count() or 2
    workers = max(1, min(cores if storage.is_local else 8, len(which)))
    memo = _ScanMemo()

    def check(i: int) -> SegmentResult:
        return _check_segment(storage, jobs[segments[i].job], segments[i], options, progress, memo)

    if workers == 1:
        return {i: check(i) for i in which}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(which, pool.map(check, which), strict=True))


def _merged_results(
    name: str, merged: Mapping[str, CheckpointParts], digest: str, num_segments: int
) -> dict[int, SegmentResult]:
    got = merged.get(name)
    if got is None:
        raise InputError(
            f"the part files hold no deep results for {name}",
            hint="merge the part files of one `verify --deep --part K/N` run of this target",
        )
    if got.plan != digest or got.num_segments != num_segments:
        raise InputError(
            f"the part files do not match {name}: it changed since the parts ran, "
            "or they ran with other --check-finite/--allow-global options",
            hint="run the parts again",
        )
    missing = sorted(set(range(num_segments)) - set(got.segments))
    if missing:
        raise InputError(
            f"the part files cover {num_segments - len(missing)} of the {num_segments} segments of {name} "
            f"(segment {missing[0]} missing): a part file is missing",
            hint="give every part-K-of-N.json of the run",
        )
    return dict(got.segments)
