"""Check the files frameworks write beside (or instead of) DCP: torch.save zips, JSON, safetensors.

Quick checks read only a file's ends and headers (a few KiB through ``Storage``):
a ``torch.save`` archive's end-of-central-directory record and member table, every
member lying inside the file; JSON by parsing (size-capped); safetensors by its
header against the file size. The deep check reads every byte of an archive and
compares each member's CRC-32, and walks ``data.pkl`` without running it
(``ckptctl.core.verify.records``). Nothing is unpickled: top-level keys come from
``ckptctl.core.verify.pickle_walk``.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from ckptctl.adapters.fastcrc import crc32 as fast_crc32
from ckptctl.adapters.storage import Storage
from ckptctl.core.verify import contract as v
from ckptctl.core.verify import safetensors as st
from ckptctl.core.verify.crc import crc32_combine
from ckptctl.core.verify.pickle_walk import Opaque, PickleWalkError, walk
from ckptctl.core.verify.records import (
    TAIL_READ_BYTES,
    HostileGlobal,
    Member,
    RecordFindings,
    RecordFormatError,
    check_member_crc,
    data_offset,
    parse_directory,
    scan_pickle,
)
from ckptctl.errors import StorageError, StorageUnreachableError

#: The most of a file's end read to find a big archive's central directory.
MAX_DIRECTORY_BYTES = 64 << 20
#: A data.pkl bigger than this is not walked for its keys (a pickle of plain state is small).
MAX_PICKLE_BYTES = 64 << 20
#: JSON side files (trainer_state.json, indexes) bigger than this are refused.
MAX_JSON_BYTES = 64 << 20
_CHUNK = 1 << 20
_ZIP_MAGIC = b"PK\x03\x04"


@dataclass(slots=True)
class FileCheck:
    """What checking one file found."""

    problems: list[v.Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    top: Any = None
    """The walked top-level value of a torch.save archive (plain parts only), when asked for."""
    bytes_read: int = 0
    members_checked: int = 0

    def corrupt(self, shown: str, msg: str, code: v.ProblemCode = v.FILE_CORRUPT) -> None:
        self.problems.append(v.Problem(v.CORRUPT, f"{shown}: {msg}", code=code))


def _read(storage: Storage, path: str, start: int, end: int, res: FileCheck) -> bytes:
    data = storage.read_bytes(path, start, end)
    res.bytes_read += len(data)
    return data


def _directory(storage: Storage, path: str, size: int, res: FileCheck) -> list[Member]:
    tail_len = min(size, TAIL_READ_BYTES)
    tail = _read(storage, path, size - tail_len, size, res)
    try:
        return parse_directory(tail, size)
    except RecordFormatError:
        if tail_len == size or size <= TAIL_READ_BYTES:
            raise
    tail_len = min(size, MAX_DIRECTORY_BYTES)  # a member table bigger than the first read
    return parse_directory(_read(storage, path, size - tail_len, size, res), size)


def check_torch_zip(
    storage: Storage,
    path: str,
    size: int,
    *,
    shown: str,
    deep: bool = False,
    want_top: bool = False,
    allowed_globals: frozenset[str] = frozenset(),
    allowed_modules: tuple[str, ...] = (),
) -> FileCheck:
    """Check a ``torch.save`` archive: structure always, CRCs and the pickle scan with ``deep``."""
    res = FileCheck()
    try:
        if size < 22:
            res.corrupt(shown, f"{size} bytes: too short for a torch.save archive")
            return res
        head = _read(storage, path, 0, 4, res)
        if head != _ZIP_MAGIC:
            if head[:1] == b"\x80":
                res.problems.append(
                    v.Problem(
                        v.UNSUPPORTED,
                        f"{shown}: legacy (pre-1.6, non-zip) torch.save format: it carries no checksums",
                        code=v.UNSUPPORTED_FORMAT,
                    )
                )
            else:
                res.corrupt(shown, "not a torch.save archive (no zip signature at the start)")
            return res
        try:
            members = _directory(storage, path, size, res)
        except RecordFormatError as e:
            res.corrupt(shown, f"{e} (cut short or damaged: a torch.save archive ends with its member table)")
            return res
        bad = [m.name for m in members if m.local_header_offset + 30 + len(m.name.encode()) + m.compressed_size > size]
        if bad:
            res.corrupt(shown, f"{len(bad)} member(s) run past the end of the file (e.g. {bad[0]})")
            return res
        pkl = next((m for m in members if m.name.endswith("data.pkl")), None)
        if pkl is None:
            res.corrupt(shown, "no data.pkl member (not a torch.save archive)")
            return res
        if deep:
            _deep_members(storage, path, members, res, shown, allowed_globals, allowed_modules, want_top)
        elif want_top:
            data = _member_bytes(storage, path, pkl, res, shown)
            if data is not None:
                res.top = _walk(data, res, shown)
    except StorageUnreachableError:
        raise
    except StorageError as e:
        res.problems.append(v.Problem(v.INCOMPLETE, f"cannot read {shown}: {e.message}", code=v.READ_FAILED))
    return res


def _inflate(raw: bytes) -> bytes:
    """Raw deflate, capped: a crafted member cannot expand without bound."""
    cap = MAX_PICKLE_BYTES
    d = zlib.decompressobj(-15)
    out = d.decompress(raw, cap)
    if d.unconsumed_tail:
        raise zlib.error(f"inflates past {cap} bytes")
    return out


def _walk(data: bytes, res: FileCheck, shown: str) -> Any:
    try:
        return walk(data)
    except PickleWalkError as e:
        res.corrupt(shown, f"data.pkl: {e}")
        return None


def _member_bytes(storage: Storage, path: str, m: Member, res: FileCheck, shown: str) -> bytes | None:
    if m.compressed_size > MAX_PICKLE_BYTES:
        res.notes.append(f"{m.name}: {m.compressed_size} bytes, too large to read its keys")
        return None
    header = _read(storage, path, m.local_header_offset, m.local_header_offset + 30, res)
    try:
        start = data_offset(header, m)
    except RecordFormatError as e:
        res.corrupt(shown, str(e))
        return None
    raw = _read(storage, path, start, start + m.compressed_size, res)
    try:
        return _inflate(raw) if m.method == 8 else raw
    except zlib.error as e:
        res.corrupt(shown, f"member {m.name}: cannot inflate: {e}")
        return None


def _deep_members(
    storage: Storage,
    path: str,
    members: list[Member],
    res: FileCheck,
    shown: str,
    allowed_globals: frozenset[str],
    allowed_modules: tuple[str, ...],
    want_top: bool,
) -> None:
    findings = RecordFindings()
    with storage.open_read(path) as f:
        pos = 0
        for m in sorted(members, key=lambda m: m.local_header_offset):
            if m.local_header_offset < pos:
                findings.add(f"member {m.name} overlaps the previous one")
                continue
            f.seek(m.local_header_offset)
            header = f.read(30)
            try:
                start = data_offset(header, m)
            except RecordFormatError as e:
                findings.add_error(e)
                continue
            f.seek(start)
            want_pkl = m.name.endswith("data.pkl")
            if m.method not in (0, 8):
                findings.add(f"member {m.name}: unsupported compression method {m.method}")
                continue
            if m.method == 8 or want_pkl:
                if m.compressed_size > MAX_PICKLE_BYTES:
                    findings.add(f"member {m.name}: {m.compressed_size} bytes, over the pickle cap")
                    continue
                raw = f.read(m.compressed_size)
                res.bytes_read += len(raw)
                try:
                    data = _inflate(raw) if m.method == 8 else raw
                except zlib.error as e:
                    findings.add(f"member {m.name}: cannot inflate: {e}")
                    continue
                check_member_crc(m, fast_crc32(data, 0), findings)
                if want_pkl:
                    scan_pickle(data, findings, m.name, allowed_globals)
                    if want_top:
                        res.top = _walk(data, res, shown)
            else:
                crc, left = 0, m.compressed_size
                while left > 0:
                    chunk = f.read(min(_CHUNK, left))
                    if not chunk:
                        break
                    crc = crc32_combine(crc, fast_crc32(chunk, 0), len(chunk))
                    left -= len(chunk)
                    res.bytes_read += len(chunk)
                if left:
                    findings.add(f"member {m.name} runs past the end of the file", v.RECORD_TRUNCATED)
                    break
                check_member_crc(m, crc, findings)
            pos = start + m.compressed_size
    res.members_checked += findings.members_checked
    for found in findings.problems:
        res.corrupt(shown, found.message, code=found.code)
    hostile = [h for h in findings.hostile if not _trusted(h, allowed_modules)]
    for h in hostile[:5]:
        res.problems.append(v.Problem(v.CORRUPT, f"hostile pickle in {shown}: {h}", code=v.HOSTILE_PICKLE))
    if len(hostile) > 5:
        res.problems.append(
            v.Problem(v.CORRUPT, f"... and {len(hostile) - 5} more hostile globals in {shown}", code=v.HOSTILE_PICKLE)
        )
    trusted = len(findings.hostile) - len(hostile)
    if trusted:
        res.notes.append(f"{shown}: {trusted} pickle global(s) of the writer's own classes (loading runs them)")
    if findings.members_without_crc:
        res.notes.append(f"{shown}: {findings.members_without_crc} member(s) carry no CRC-32")


def _trusted(finding: HostileGlobal, modules: tuple[str, ...]) -> bool:
    return any(finding.name.startswith(m) for m in modules)


def check_json(storage: Storage, path: str, size: int, *, shown: str) -> tuple[FileCheck, Any]:
    res = FileCheck()
    if size > MAX_JSON_BYTES:
        res.corrupt(shown, f"{size} bytes: over the {MAX_JSON_BYTES >> 20} MiB cap for a JSON side file")
        return res, None
    try:
        data = _read(storage, path, 0, size, res) if size else b""
    except StorageUnreachableError:
        raise
    except StorageError as e:
        res.problems.append(v.Problem(v.INCOMPLETE, f"cannot read {shown}: {e.message}", code=v.READ_FAILED))
        return res, None
    try:
        return res, json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        what = "empty" if not data else f"does not parse as JSON ({e})"
        res.corrupt(shown, what)
        return res, None


def read_safetensors_header(
    storage: Storage, path: str, size: int, *, shown: str, at: int = 0
) -> tuple[FileCheck, st.Header | None]:
    """Parse and check a safetensors file's header against its size (or a blob's at offset ``at``)."""
    res = FileCheck()
    size -= at
    try:
        first = _read(storage, path, at, at + min(size, 8), res)
        n = st.header_length(first)
        if 8 + n > size:
            res.corrupt(shown, f"header of {n} bytes does not fit the file ({size} bytes): cut short",
                        code=v.SHARD_TRUNCATED)
            return res, None
        header = st.parse_header(_read(storage, path, at + 8, at + 8 + n, res), n)
    except st.SafetensorsError as e:
        res.corrupt(shown, str(e))
        return res, None
    except StorageUnreachableError:
        raise
    except StorageError as e:
        res.problems.append(v.Problem(v.INCOMPLETE, f"cannot read {shown}: {e.message}", code=v.READ_FAILED))
        return res, None
    for cut, msg in st.check_header(header, size, exact_end=at == 0):
        res.corrupt(shown, msg, code=v.SHARD_TRUNCATED if cut else v.FILE_CORRUPT)
    return res, header


def check_safetensors_index(
    storage: Storage,
    dir_path: str,
    index_name: str,
    files: dict[str, int],
    headers: dict[str, st.Header | None],
    *,
    prefix: str = "",
) -> FileCheck:
    """Every file the index names exists, and every tensor it lists is in the file it names.

    ``headers`` caches parsed headers by file name (filled here for files not yet read).
    """
    shown = prefix + index_name
    res, obj = check_json(storage, storage.join(dir_path, index_name), files[index_name], shown=shown)
    if obj is None:
        return res
    try:
        index = st.parse_index(json.dumps(obj).encode())
    except st.SafetensorsError as e:
        res.corrupt(shown, str(e))
        return res
    for fname in sorted(set(index.weight_map.values())):
        if "/" in fname or fname not in files:
            n = sum(1 for f in index.weight_map.values() if f == fname)
            res.problems.append(
                v.Problem(v.INCOMPLETE, f"shard missing: {prefix}{fname} (holds {n} tensor(s) per {index_name})",
                          code=v.SHARD_MISSING)
            )
            headers.setdefault(fname, None)
            continue
        if fname not in headers:
            sub, h = read_safetensors_header(storage, storage.join(dir_path, fname), files[fname], shown=prefix + fname)
            res.problems.extend(sub.problems)
            headers[fname] = h
    for _kind, msg in st.check_index(index, headers):
        res.problems.append(v.Problem(v.CORRUPT, f"{shown}: {msg}", code=v.TENSORS_LOST))
    return res


def plain(value: Any) -> Any:
    """A walked value with opaque parts shown by name (for notes and JSON)."""
    if isinstance(value, Opaque):
        return f"<{value.what}>"
    return value
