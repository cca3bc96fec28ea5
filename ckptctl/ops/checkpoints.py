"""list / locate / verify: find the newest COMPLETE checkpoint and prove it.

I/O happens here (through ``Storage``); every decision is a pure function in
``ckptctl.core.verify``. Cost model, for object stores: the run root is listed
once; each probed checkpoint costs one listing plus one read of ``.metadata``
(and of the manifest and commit marker when present). ``locate`` probes
newest-first and stops at the first complete checkpoint. Nothing here writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any

from ckptctl.adapters.dcp_metadata import MetadataError, merge_indexes, read_index
from ckptctl.adapters.fastcrc import crc32 as fast_crc32
from ckptctl.adapters.storage import Entry, Storage
from ckptctl.core import verify as v
from ckptctl.core.crc import crc32_combine, crc32_of_pieces
from ckptctl.core.dcp import METADATA_NAME, RANK_METADATA_NAME, SHARD_SUFFIX, DcpIndex, StorageItem
from ckptctl.core.manifest import (
    COMMIT_MARKER_NAME,
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    check_commit_marker,
    format_crc32,
    parse_manifest,
)
from ckptctl.core.names import CheckpointName, newest_first_key, parse_checkpoint_name
from ckptctl.core.records import (
    TAIL_READ_BYTES,
    RecordFindings,
    RecordFormatError,
    check_member_crc,
    check_record,
    data_offset,
    parse_directory,
    scan_pickle,
)
from ckptctl.errors import ProblemFound, StorageError, StorageUnreachableError

#: Framework "latest" pointer files, read as hints only.
POINTER_FILES = ("latest", "latest_checkpointed_iteration.txt", "latest_checkpoint", "LATEST")

# Records up to this size are read whole; bigger ones are streamed member by member in
# chunks. Locally, 1 MiB chunks stay in the CPU cache between the copy and the CRC
# (measured: 6.0 GB/s per core vs 2.9 GB/s with 16 MiB buffers); on object stores a
# bigger limit avoids an extra ranged GET for the central directory of each record.
_WHOLE_RECORD_MAX_BYTES = 1 << 20
_WHOLE_RECORD_MAX_BYTES_REMOTE = 32 << 20
_STREAM_CHUNK_BYTES = 1 << 20

ProgressFn = Callable[[int], None]


def _noop(_: int) -> None:
    return None


@dataclass(kw_only=True, slots=True)
class CheckpointReport:
    """Everything ckptctl found out about one checkpoint directory."""

    path: str
    name: str
    step: int | None
    framework: str | None
    kind: str
    """dcp | dcp-rank-local | dcp-nested | deepspeed | hf | torch-save | empty | unknown"""
    status: v.Status
    problems: list[str] = field(default_factory=list)
    problem_details: list[v.Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    world_size: int | None = None
    world_size_source: str = "unknown"
    num_files: int = 0
    size_bytes: int = 0
    mtime_s: float | None = None
    has_manifest: bool = False
    committed: bool | None = None
    is_temp: bool = False
    is_quarantined: bool = False
    deep: bool = False
    bytes_read: int = 0
    records_checked: int = 0
    members_crc_checked: int = 0
    tokens_seen: int | None = None

    @property
    def is_complete(self) -> bool:
        return self.status == v.COMPLETE

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "step": self.step,
            "framework": self.framework,
            "kind": self.kind,
            "status": self.status,
            "problems": self.problems,
            "problem_details": [{"severity": p.severity, "message": p.message} for p in self.problem_details],
            "notes": self.notes,
            "world_size": self.world_size,
            "world_size_source": self.world_size_source,
            "num_files": self.num_files,
            "size_bytes": self.size_bytes,
            "mtime": _iso(self.mtime_s),
            "manifest": self.has_manifest,
            "committed": self.committed,
            "temporary": self.is_temp,
            "quarantined": self.is_quarantined,
            "deep": self.deep,
            "bytes_read": self.bytes_read,
            "records_checked": self.records_checked,
            "crc_members_checked": self.members_crc_checked,
            "tokens_seen": self.tokens_seen,
        }


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class PointerHint:
    """A framework's 'latest' file: what it names, and whether verification agrees."""

    file: str
    names: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "names": self.names}


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """How hard to look."""

    deep: bool = False
    world_size: int | None = None
    check_finite: bool = False
    allowed_globals: frozenset[str] = frozenset()


# ---------------------------------------------------------------------------------------
# Run root
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class RootScan:
    storage: Storage
    root: str
    candidates: list[tuple[CheckpointName, Entry]]
    """Every directory with a checkpoint name, newest first (temp/quarantined included)."""
    pointers: list[PointerHint]


def _looks_like_checkpoint(entries: list[Entry]) -> bool:
    for e in entries:
        n = e.name
        if e.is_dir:
            continue
        if (
            n in (METADATA_NAME, MANIFEST_NAME, COMMIT_MARKER_NAME, ".metadata.tmp")
            or n.endswith(SHARD_SUFFIX)
            or RANK_METADATA_NAME.match(n)
            or n.endswith("_states.pt")
            or n in ("trainer_state.json", "model.safetensors", "pytorch_model.bin", "common.pt")
        ):
            return True
    return False


def scan_root(storage: Storage, root: str, entries: list[Entry] | None = None) -> RootScan:
    """List the run root once and sort its checkpoint directories newest first."""
    if entries is None:
        entries = storage.list_dir(root)
    cands: list[tuple[CheckpointName, Entry]] = []
    pointers: list[PointerHint] = []
    for e in entries:
        if e.is_dir:
            cn = parse_checkpoint_name(e.name)
            if cn is not None:
                cands.append((cn, e))
        elif e.name in POINTER_FILES and e.size_bytes < 4096:
            try:
                text = storage.read_bytes(e.path).decode("utf-8", "replace").strip()
            except StorageUnreachableError:
                raise
            except StorageError:
                continue
            pointers.append(PointerHint(file=e.name, names=text.splitlines()[0] if text else ""))
    cands.sort(key=lambda ce: newest_first_key(ce[0]))
    return RootScan(storage=storage, root=root, candidates=cands, pointers=pointers)


def _open_root(url: str) -> tuple[Storage, str, list[Entry]]:
    storage, root = Storage.open_directory(url)
    return storage, root, storage.list_dir(root)


# ---------------------------------------------------------------------------------------
# One checkpoint
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Unit:
    """One DCP directory inside a checkpoint: the step dir itself or a nested one (HF)."""

    subdir: str
    files: dict[str, int]
    index: DcpIndex | None = None
    rank_local: int = 0


def _kind_without_dcp(files: dict[str, int], subdirs: list[str]) -> tuple[str, v.Problem]:
    names = set(files)
    if any(n.endswith(SHARD_SUFFIX) for n in names) or ".metadata.tmp" in names or any(
        n.endswith(".metadata.tmp") for n in names
    ):
        num = sum(1 for n in names if n.endswith(SHARD_SUFFIX))
        return "dcp", v.Problem(
            v.INCOMPLETE,
            f"no .metadata: the save never committed ({num} shard file(s) present)",
        )
    if any(n.endswith("_states.pt") for n in names) or any(n.startswith("zero_pp_rank_") for n in names):
        return "deepspeed", v.Problem(
            v.UNSUPPORTED, "DeepSpeed checkpoint (*_states.pt), not DCP: ckptctl cannot prove it complete"
        )
    if names & {"model.safetensors", "pytorch_model.bin", "trainer_state.json", "model.safetensors.index.json"}:
        return "hf", v.Problem(
            v.UNSUPPORTED,
            "HF Trainer checkpoint without DCP shards: ckptctl cannot prove it complete",
        )
    if any(n.endswith((".pt", ".pth", ".bin", ".safetensors")) for n in names):
        return "torch-save", v.Problem(
            v.UNSUPPORTED, "torch.save/safetensors files, not DCP: ckptctl cannot prove them complete"
        )
    if not names and not subdirs:
        return "empty", v.Problem(v.INCOMPLETE, "empty directory")
    return "unknown", v.Problem(v.UNSUPPORTED, "no DCP .metadata and no recognised checkpoint files")


def inspect_checkpoint(
    storage: Storage,
    path: str,
    *,
    options: CheckOptions = CheckOptions(),
    entries: list[Entry] | None = None,
    progress: ProgressFn = _noop,
) -> CheckpointReport:
    """Verify one checkpoint directory against the contract in DESIGN.md."""
    base = Storage.basename(path)
    cn = parse_checkpoint_name(base)
    if entries is None:
        entries = storage.list_dir(path)
    files = {e.name: e.size_bytes for e in entries if not e.is_dir}
    subdirs = [e for e in entries if e.is_dir and not e.name.startswith(".")]
    mtimes = [e.mtime_s for e in entries if e.mtime_s is not None]
    problems: list[v.Problem] = []
    notes: list[str] = []
    report = CheckpointReport(
        path=storage.url(path),
        name=base,
        step=cn.step if cn else None,
        framework=cn.framework if cn else None,
        kind="unknown",
        status=v.COMPLETE,
        is_temp=bool(cn and cn.is_temp),
        is_quarantined=bool(cn and cn.is_quarantined),
        deep=options.deep or options.check_finite,
    )
    if report.is_temp:
        problems.append(v.Problem(v.INCOMPLETE, "temporary directory name: still being written or abandoned mid-save"))
    if report.is_quarantined:
        problems.append(v.Problem(v.INCOMPLETE, "quarantined by `ckptctl rollback` (undo with `ckptctl rollback --undo`)"))

    # -- the DCP directories inside ------------------------------------------------------
    units: list[_Unit] = []
    uncommitted_subdirs = False
    all_files: dict[str, int] = dict(files)
    if METADATA_NAME in files or any(RANK_METADATA_NAME.match(n) for n in files):
        units.append(_Unit("", files))
    elif subdirs:
        for sd in subdirs:
            sub_entries = storage.list_dir(sd.path)
            sub_files = {e.name: e.size_bytes for e in sub_entries if not e.is_dir}
            mtimes.extend(e.mtime_s for e in sub_entries if e.mtime_s is not None)
            for n, s in sub_files.items():
                all_files[f"{sd.name}/{n}"] = s
            if METADATA_NAME in sub_files or any(RANK_METADATA_NAME.match(n) for n in sub_files):
                units.append(_Unit(sd.name, sub_files))
            elif any(n.endswith(SHARD_SUFFIX) for n in sub_files):
                uncommitted_subdirs = True
                problems.append(
                    v.Problem(v.INCOMPLETE, f"{sd.name}/: no .metadata: the save never committed")
                )
    report.num_files = len(all_files)
    report.size_bytes = sum(all_files.values())
    report.mtime_s = max(mtimes) if mtimes else None

    # -- manifest and commit marker -------------------------------------------------------
    manifest: Manifest | None = None
    manifest_bytes: bytes | None = None
    if MANIFEST_NAME in files:
        report.has_manifest = True
        try:
            manifest_bytes = storage.read_bytes(storage.join(path, MANIFEST_NAME))
            manifest = parse_manifest(manifest_bytes)
            report.tokens_seen = manifest.tokens_seen
        except ManifestError as e:
            problems.append(v.Problem(v.CORRUPT, f"{MANIFEST_NAME}: {e}"))
        except StorageUnreachableError:
            raise
        except StorageError as e:
            problems.append(v.Problem(v.INCOMPLETE, f"cannot read {MANIFEST_NAME}: {e.message}"))
        if COMMIT_MARKER_NAME in files and manifest_bytes is not None:
            try:
                marker = storage.read_bytes(storage.join(path, COMMIT_MARKER_NAME))
                reason = check_commit_marker(marker, manifest_bytes)
                report.committed = reason is None
                if reason:
                    problems.append(v.Problem(v.CORRUPT, reason))
            except StorageUnreachableError:
                raise
            except StorageError as e:
                problems.append(v.Problem(v.INCOMPLETE, f"cannot read {COMMIT_MARKER_NAME}: {e.message}"))
        elif COMMIT_MARKER_NAME not in files:
            report.committed = False
            problems.append(
                v.Problem(v.INCOMPLETE, f"uncommitted: {MANIFEST_NAME} present but no {COMMIT_MARKER_NAME}")
            )

    if not units and uncommitted_subdirs:
        report.kind = "dcp-nested"  # nested DCP dirs, none committed: already reported above
    elif not units:
        report.kind, problem = _kind_without_dcp(files, [s.name for s in subdirs])
        problems.append(problem)
    else:
        report.kind = "dcp-nested" if units[0].subdir else "dcp"

    # -- each DCP unit: parse metadata, check structure and byte ranges --------------------
    referenced_ranks: set[int] = set()
    shard_names: list[str] = []
    rank_local_total = 0
    for unit in units:
        upath = storage.join(path, unit.subdir) if unit.subdir else path
        where = f"{unit.subdir}/" if unit.subdir else ""
        shard_names.extend(n for n in unit.files if n.endswith(SHARD_SUFFIX))
        idx: DcpIndex | None = None
        if METADATA_NAME in unit.files:
            idx = _read_metadata(storage, upath, where + METADATA_NAME, unit.files[METADATA_NAME], problems)
        else:
            rl_names = [n for n in unit.files if RANK_METADATA_NAME.match(n)]
            w, rl_problems = v.check_rank_local_names(rl_names)
            problems.extend(rl_problems)
            rank_local_total = max(rank_local_total, w)
            unit.rank_local = w
            report.kind = "dcp-rank-local"
            parts = []
            for n in sorted(rl_names):
                part = _read_metadata(storage, upath, where + n, unit.files[n], problems)
                if part is not None:
                    parts.append(part)
            if parts and len(parts) == len(rl_names):
                idx = merge_indexes(parts)
            notes.append(
                f"rank-local metadata ({w} x __r.metadata): loadable only at world size {w}; "
                "DCP silently returns uninitialised memory at any other world size"
            )
        unit.index = idx
        if idx is None:
            continue
        chk = v.check_index(idx, unit.files, prefix=unit.subdir, rank_local=unit.rank_local > 0)
        problems.extend(chk.problems)
        notes.extend(chk.notes)
        referenced_ranks |= chk.ranks_referenced

    # -- world size ----------------------------------------------------------------------------
    ws = v.infer_world_size(
        manifest=manifest,
        shard_names=shard_names,
        ranks_referenced=referenced_ranks,
        num_rank_local_metadata=rank_local_total,
    )
    report.world_size, report.world_size_source = ws.value, ws.source
    if units:
        ws_problems, ws_notes = v.check_world_size(
            ws, shard_names=shard_names, ranks_referenced=referenced_ranks, expected=options.world_size
        )
        problems.extend(ws_problems)
        notes.extend(ws_notes)
    elif options.world_size is not None and report.kind not in ("deepspeed", "hf", "torch-save", "unknown"):
        problems.append(v.Problem(v.INCOMPLETE, f"world size unknown, expected {options.world_size}"))

    if manifest is not None:
        problems.extend(v.check_manifest_files(manifest, all_files, step_from_name=report.step))

    # -- deep: read every byte -------------------------------------------------------------------
    if report.deep and units and not any(p.severity == v.INCOMPLETE and "shard missing" in p.message for p in problems):
        _deep_check(storage, path, units, manifest, all_files, options, report, problems, progress)
    elif report.deep and units:
        notes.append("deep check skipped: shards are missing")

    report.problem_details = problems
    report.problems = [p.message for p in problems]
    report.notes = [*notes, *report.notes]  # the deep check adds its own notes to the report
    report.status = v.status_of(problems)
    return report


def _read_metadata(
    storage: Storage, upath: str, shown: str, size: int, problems: list[v.Problem]
) -> DcpIndex | None:
    name = shown.rsplit("/", 1)[-1]
    if size == 0:
        problems.append(v.Problem(v.CORRUPT, f"{shown} is empty (0 bytes)"))
        return None
    try:
        data = storage.read_bytes(storage.join(upath, name))
    except StorageUnreachableError:
        raise
    except StorageError as e:
        problems.append(v.Problem(v.INCOMPLETE, f"cannot read {shown}: {e.message}"))
        return None
    try:
        return read_index(data)
    except MetadataError as e:
        label = "hostile or foreign pickle refused" if e.hostile else "unreadable"
        problems.append(v.Problem(v.CORRUPT, f"{shown} {label}: {e}"))
        return None


# ---------------------------------------------------------------------------------------
# Deep check
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _FileResult:
    rel: str
    problems: list[v.Problem] = field(default_factory=list)
    crc: str | None = None
    bytes_read: int = 0
    records: int = 0
    members_checked: int = 0
    members_without_crc: int = 0
    decoded: dict[str, int] = field(default_factory=dict)
    """Records read through a writer extension and checked inside: descriptor -> count."""
    undecoded: dict[str, int] = field(default_factory=dict)
    """Records behind an extension that could not be looked into: reason -> count."""


class _Reader:
    """Sequential reader: position, a reusable record buffer and the running whole-file CRC."""

    def __init__(self, f: IO[bytes], want_crc: bool, progress: ProgressFn) -> None:
        self.f = f
        self.pos = 0
        self.crc = 0
        self.want_crc = want_crc
        self.progress = progress
        self._buf = bytearray()

    def _fill(self, view: memoryview) -> int:
        got = 0
        readinto = getattr(self.f, "readinto", None)
        while got < len(view):
            if readinto is not None:
                n = readinto(view[got:])
            else:
                b = self.f.read(len(view) - got)
                n = len(b)
                view[got : got + n] = b
            if not n:
                break
            got += n
        self.pos += got
        self.progress(got)
        return got

    def read_record(self, n: int) -> memoryview:
        """The next n bytes (fewer at EOF) in a reused buffer; the caller adds their CRC."""
        if len(self._buf) < n:
            self._buf = bytearray(n)
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


def _deep_file(
    storage: Storage,
    dir_path: str,
    rel: str,
    items: list[StorageItem],
    size: int,
    want_crc: bool,
    options: CheckOptions,
    progress: ProgressFn,
) -> _FileResult:
    res = _FileResult(rel=rel)
    fpath = storage.join(dir_path, rel)
    hostile: list[str] = []
    whole_max = _WHOLE_RECORD_MAX_BYTES if storage.is_local else max(
        _WHOLE_RECORD_MAX_BYTES, _WHOLE_RECORD_MAX_BYTES_REMOTE
    )
    try:
        with storage.open_read(fpath) as f:
            rd = _Reader(f, want_crc, progress)
            for item in sorted(items, key=lambda it: it.offset):
                if item.offset < rd.pos:
                    continue  # overlapping records: reported by the quick check
                rd.skip_to(item.offset)
                if rd.pos != item.offset:
                    break
                res.records += 1
                if item.length > whole_max:
                    findings = _stream_record(storage, fpath, rd, item, options)
                    if item.transformed:
                        why = f"record over {whole_max >> 20} MiB, too large to decode in memory"
                        res.undecoded[why] = res.undecoded.get(why, 0) + 1
                else:
                    record = rd.read_record(item.length)
                    if len(record) < item.length:
                        break  # truncated: reported by the quick check
                    pieces: list[tuple[int, int, int]] = []
                    plain: bytes | memoryview | None = record
                    if item.transformed:
                        findings, plain = _check_transformed(record, item, options, res)
                    else:
                        findings, pieces = check_record(
                            record, extra_allowed=options.allowed_globals, crc32=fast_crc32
                        )
                    if rd.want_crc:
                        rd.add_crc(crc32_of_pieces(record, pieces, fast_crc32), len(record))
                    if (
                        options.check_finite
                        and plain is not None
                        and item.chunk_offsets is not None
                        and not findings.problems
                    ):
                        _check_finite(bytes(plain), item, findings)
                res.members_checked += findings.members_checked
                res.members_without_crc += findings.members_without_crc
                for msg in findings.problems:
                    res.problems.append(v.Problem(v.CORRUPT, f"{rel} record {item.fqn!r} @{item.offset}: {msg}"))
                hostile.extend(f"{rel} record {item.fqn!r}: {h}" for h in findings.hostile)
            if want_crc:
                rd.skip_to(size)
                res.crc = format_crc32(rd.crc)
            res.bytes_read = rd.pos
    except StorageUnreachableError:
        raise
    except StorageError as e:
        res.problems.append(v.Problem(v.INCOMPLETE, f"unreadable shard {rel}: {e.message}"))
        res.crc = None
    for h in hostile[:20]:
        res.problems.append(v.Problem(v.CORRUPT, f"hostile record: {h}"))
    if len(hostile) > 20:
        res.problems.append(v.Problem(v.CORRUPT, f"... and {len(hostile) - 20} more hostile records in {rel}"))
    return res


def _check_transformed(
    record: bytes | memoryview, item: StorageItem, options: CheckOptions, res: _FileResult
) -> tuple[RecordFindings, bytes | None]:
    """Undo the record's writer extensions (zstd) and check the archive inside, like any record."""
    from ckptctl.adapters.transforms import TransformError, decoder_for

    label = "+".join(item.transforms) or "unknown extension"
    decode, why = decoder_for(item.transforms)
    if decode is None:
        res.undecoded[why] = res.undecoded.get(why, 0) + 1
        return RecordFindings(), None
    try:
        plain = decode(bytes(record))
    except TransformError as e:
        findings = RecordFindings()
        findings.problems.append(f"{label}: {e}")
        return findings, None
    findings, _pieces = check_record(plain, extra_allowed=options.allowed_globals, crc32=fast_crc32)
    res.decoded[label] = res.decoded.get(label, 0) + 1
    return findings, plain


def _stream_record(storage: Storage, fpath: str, rd: _Reader, item: StorageItem, options: CheckOptions) -> RecordFindings:
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
        findings.problems.append(str(e))
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
            findings.problems.append(str(e))
            continue
        rd.skip_to(start + data_start)
        if m.method != 0:
            findings.problems.append(f"member {m.name}: compressed member in a large record is not checked")
            continue
        crc = 0
        left = m.compressed_size
        pkl = bytearray() if m.name.endswith("data.pkl") else None
        while left > 0:
            chunk = rd.read_record(min(_STREAM_CHUNK_BYTES, left))
            if not len(chunk):
                break
            c = fast_crc32(chunk, 0)
            rd.add_crc(c, len(chunk))
            crc = crc32_combine(crc, c, len(chunk))
            if pkl is not None:
                pkl.extend(chunk)
            left -= len(chunk)
        if left:
            findings.problems.append(f"member {m.name} runs past the end of the file")
            return findings
        check_member_crc(m, crc, findings)
        if pkl is not None:
            scan_pickle(bytes(pkl), findings, m.name, options.allowed_globals)
    rd.skip_to(end)
    return findings


def _check_finite(record: bytes, item: StorageItem, findings: RecordFindings) -> None:
    import io

    import torch  # only --check-finite needs it

    try:
        t = torch.load(io.BytesIO(record), weights_only=True, map_location="cpu")
    except Exception as e:  # a record torch cannot decode is corrupt, whatever the reason
        findings.problems.append(f"tensor cannot be decoded: {type(e).__name__}: {e}")
        return
    if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel():
        finite = torch.isfinite(t)
        if not bool(finite.all()):
            bad = int((~finite).sum())
            nan = int(torch.isnan(t).sum())
            findings.problems.append(f"{bad} non-finite value(s) ({nan} NaN, {bad - nan} Inf)")


def _deep_check(
    storage: Storage,
    path: str,
    units: list[_Unit],
    manifest: Manifest | None,
    all_files: dict[str, int],
    options: CheckOptions,
    report: CheckpointReport,
    problems: list[v.Problem],
    progress: ProgressFn,
) -> None:
    want_checksums = {f.path for f in manifest.files if f.checksum} if manifest else set()
    jobs: list[tuple[str, str, list[StorageItem], int, bool]] = []
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
            jobs.append((upath, rel, items, unit.files[rel], shown in want_checksums))
    for shown in sorted(want_checksums - covered):
        if shown in all_files:
            jobs.append((path, shown, [], all_files[shown], True))
    computed: dict[str, str] = {}
    # CRC and reads release the GIL: one thread per core locally, more for network I/O
    cores = os.cpu_count() or 2
    workers = max(1, min(cores if storage.is_local else 8, len(jobs)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(
            pool.map(
                lambda j: _deep_file(storage, j[0], j[1], j[2], j[3], j[4], options, progress),
                jobs,
            )
        )
    for (upath, rel, _items, _size, _want), res in zip(jobs, results, strict=True):
        prefix = upath[len(path) :].strip("/")
        shown = f"{prefix}/{rel}" if prefix else rel
        problems.extend(res.problems)
        report.bytes_read += res.bytes_read
        report.records_checked += res.records
        report.members_crc_checked += res.members_checked
        if res.crc is not None:
            computed[shown] = res.crc
    no_crc = sum(r.members_without_crc for r in results)
    if no_crc:
        report.notes.append(f"{no_crc} record member(s) carry no CRC-32 (saved with compute_crc32=False)")
    decoded: dict[str, int] = {}
    undecoded: dict[str, int] = {}
    for r in results:
        for k, n in r.decoded.items():
            decoded[k] = decoded.get(k, 0) + n
        for k, n in r.undecoded.items():
            undecoded[k] = undecoded.get(k, 0) + n
    for k, n in sorted(decoded.items()):
        report.notes.append(f"{n} record(s) written through {k} were decoded and checked inside")
    for k, n in sorted(undecoded.items()):
        report.notes.append(
            f"{n} record(s) written through a writer extension were NOT checked inside: {k}"
        )
    if manifest is not None:
        problems.extend(v.check_manifest_checksums(manifest, computed))


# ---------------------------------------------------------------------------------------
# Use cases
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class ListResult:
    root: str
    checkpoints: list[CheckpointReport]
    pointers: list[PointerHint]

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "pointers": [p.to_json() for p in self.pointers],
        }


@dataclass(slots=True)
class LocateResult:
    root: str
    checkpoint: CheckpointReport | None
    skipped: list[CheckpointReport]
    """Newer candidates that failed verification, newest first."""
    pointers: list[PointerHint]
    before_step: int | None = None
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "path": self.checkpoint.path if self.checkpoint else None,
            "step": self.checkpoint.step if self.checkpoint else None,
            "before_step": self.before_step,
            "skipped": [c.to_json() for c in self.skipped],
            "pointers": [
                {**p.to_json(), "agrees": bool(self.checkpoint and _pointer_agrees(p, self.checkpoint))}
                for p in self.pointers
            ],
        }


def _pointer_agrees(p: PointerHint, c: CheckpointReport) -> bool:
    if p.names.strip().rstrip("/").split("/")[-1] == c.name:
        return True
    return p.names.strip().isdigit() and c.step is not None and int(p.names.strip()) == c.step


@dataclass(slots=True)
class VerifyResult:
    target: str
    checkpoints: list[CheckpointReport]
    is_run_root: bool

    @property
    def ok(self) -> bool:
        return bool(self.checkpoints) and all(c.is_complete for c in self.checkpoints)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "run_root": self.is_run_root,
            "ok": self.ok,
            "checkpoints": [c.to_json() for c in self.checkpoints],
        }


def list_checkpoints(
    url: str, *, options: CheckOptions = CheckOptions(), progress: ProgressFn = _noop
) -> ListResult:
    """Every checkpoint under a run root, newest first, each verified."""
    storage, root, entries = _open_root(url)
    scan = scan_root(storage, root, entries)
    reports = [
        inspect_checkpoint(storage, e.path, options=options, progress=progress) for _cn, e in scan.candidates
    ]
    return ListResult(root=storage.url(root), checkpoints=reports, pointers=scan.pointers)


def find_latest_complete(
    root: str,
    *,
    deep: bool = False,
    before_step: int | None = None,
    world_size: int | None = None,
    options: CheckOptions | None = None,
    progress: ProgressFn = _noop,
) -> LocateResult:
    """Newest complete checkpoint under ``root`` (older than ``before_step`` if given).

    Lists the root once, probes candidates newest first and stops at the first
    complete one. Temporary and quarantined directories are never probed.
    """
    t0 = time.perf_counter()
    opts = options or CheckOptions(deep=deep, world_size=world_size)
    storage, path, entries = _open_root(root)
    scan = scan_root(storage, path, entries)
    skipped: list[CheckpointReport] = []
    found: CheckpointReport | None = None
    for cn, e in scan.candidates:
        if not cn.is_candidate:
            continue
        if before_step is not None and cn.step >= before_step:
            continue
        report = inspect_checkpoint(storage, e.path, options=opts, progress=progress)
        if report.is_complete:
            found = report
            break
        skipped.append(report)
    return LocateResult(
        root=storage.url(path),
        checkpoint=found,
        skipped=skipped,
        pointers=scan.pointers,
        before_step=before_step,
        elapsed_s=time.perf_counter() - t0,
    )


def verify_checkpoint(
    url: str,
    *,
    deep: bool = False,
    world_size: int | None = None,
    check_finite: bool = False,
    progress: ProgressFn = _noop,
) -> CheckpointReport:
    """Verify one checkpoint directory (not a run root)."""
    storage, path, entries = _open_root(url)
    return inspect_checkpoint(
        storage,
        path,
        options=CheckOptions(deep=deep, world_size=world_size, check_finite=check_finite),
        entries=entries,
        progress=progress,
    )


def verify_target(
    url: str, *, options: CheckOptions = CheckOptions(), progress: ProgressFn = _noop
) -> VerifyResult:
    """Verify a checkpoint directory, or every checkpoint under a run root."""
    storage, path, entries = _open_root(url)
    base = Storage.basename(path)
    if _looks_like_checkpoint(entries) or (
        parse_checkpoint_name(base) is not None and not _has_checkpoint_subdirs(entries)
    ):
        report = inspect_checkpoint(storage, path, options=options, entries=entries, progress=progress)
        return VerifyResult(target=storage.url(path), checkpoints=[report], is_run_root=False)
    scan = scan_root(storage, path, entries)
    if not scan.candidates:
        # a directory of nested DCP dirs under a non-step name (e.g. "final/")
        if any(e.is_dir for e in entries):
            report = inspect_checkpoint(storage, path, options=options, entries=entries, progress=progress)
            if report.kind.startswith("dcp"):
                return VerifyResult(target=storage.url(path), checkpoints=[report], is_run_root=False)
        raise ProblemFound(
            f"{storage.url(path)}: no checkpoint here (no .metadata) and no checkpoint directories under it",
            hint="point at a DCP checkpoint directory or a run root holding step_N/ directories",
        )
    reports = [inspect_checkpoint(storage, e.path, options=options, progress=progress) for _cn, e in scan.candidates]
    return VerifyResult(target=storage.url(path), checkpoints=reports, is_run_root=True)


def _has_checkpoint_subdirs(entries: Iterable[Entry]) -> bool:
    return any(e.is_dir and parse_checkpoint_name(e.name) is not None for e in entries)
