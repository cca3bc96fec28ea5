"""DCP records as zip archives: parse their directory, check member CRC-32s, scan pickles.

With DCP's default ``SerializationFormat.TORCH_SAVE`` every storage item (one
``storage_data`` byte range) is a complete ``torch.save`` zip archive whose
members are stored uncompressed and carry CRC-32s that ``torch.load`` never
checks. Local headers use data descriptors (flag bit 3: CRC and sizes are 0
there), so the central directory at the end of each record is the source of
truth. Everything here works on bytes handed in by the caller; no I/O.

The pickle scan walks ``data.pkl`` opcodes with ``pickletools.genops`` and never
executes them: DCP loads non-tensor records with ``torch.load(weights_only=False)``
so a global outside the allow-list below would run code at resume.
"""

from __future__ import annotations

import contextlib
import pickletools
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ckptctl.core.verify.contract import CRC_MISMATCH, RECORD_CORRUPT, RECORD_TRUNCATED, ProblemCode
from ckptctl.core.verify.dcp import is_dtype_name
from ckptctl.core.verify.pickle_shape import PickleShapeError, check_shape

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CDH = b"PK\x01\x02"
_LFH = b"PK\x03\x04"
#: How far from a record's end its central directory can start, for a record with
#: few members (torch writes 6-8). Callers read this much of the tail first.
TAIL_READ_BYTES = 64 * 1024
#: Most members a zip directory may list: torch.save writes one per storage (a big optimizer
#: state has thousands); a directory of a million entries is refused before it is walked.
MAX_ZIP_MEMBERS = 1 << 18
#: Problems listed per file; past this they are counted (``RecordFindings.unlisted``).
MAX_LISTED_PROBLEMS = 20

# Globals a legitimate DCP record pickle (tensor rebuild, numpy RNG state, plain
# containers) references. Anything else is reported as hostile.
_ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_tensor_v3"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch._utils", "_rebuild_parameter_with_state"),
        ("torch._utils", "_rebuild_qtensor"),
        ("torch._tensor", "_rebuild_from_type_v2"),
        ("torch", "Size"),
        ("torch", "Tensor"),
        ("torch", "device"),
        ("torch", "UntypedStorage"),
        ("torch.storage", "UntypedStorage"),
        ("torch.nn.parameter", "Parameter"),
        ("torch.serialization", "_get_layout"),
        # numpy RNG state and arrays (numpy 2 moved core -> _core)
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("builtins", "bytearray"),
        ("builtins", "slice"),
        ("builtins", "range"),
    }
)
_TORCH_STORAGE = re.compile(r"[A-Z][A-Za-z0-9]*Storage")
_NUMPY_DTYPE_CLASS = re.compile(r"[A-Z][A-Za-z0-9]*DType")


def is_allowed_global(
    module: str,
    name: str,
    extra: frozenset[str] = frozenset(),
    writer: frozenset[tuple[str, str]] = frozenset(),
) -> bool:
    """May a record's pickle reference ``module.name``? Exact globals only, never a prefix.

    ``(module, name)`` as the pickle spells them: a dotted ``name`` (protocol 4 resolves
    ``a.b.c`` attribute by attribute, so ``('transformers.trainer_utils', 'os.system')``
    reaches ``os.system``) is refused unless that exact pair is listed. ``writer``: the
    framework's own classes (``core.layouts.Layout.pickle_globals``); ``extra``: ``--allow-global``.
    """
    if (module, name) in _ALLOWED_GLOBALS or (module, name) in writer or f"{module}.{name}" in extra:
        return True
    if not name.isidentifier():
        return False  # a dotted, spaced or empty name: an attribute chain, never a listed class
    # dtypes and storages by name (the known ones, or shaped like one: never a function such as
    # float_power); numpy 2's dtype classes
    if module == "torch" and (_TORCH_STORAGE.fullmatch(name) or is_dtype_name(name)):
        return True
    return module == "numpy.dtypes" and _NUMPY_DTYPE_CLASS.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class Member:
    """A zip member as the central directory describes it."""

    name: str
    crc32: int
    compressed_size: int
    size: int
    method: int
    local_header_offset: int


class RecordFormatError(ValueError):
    """The bytes are not a well-formed zip archive; the message says where, ``code`` what.

    ``code`` is ``record-truncated`` where the archive's end is missing (its bytes were cut
    short or never reached the disk), else ``record-corrupt``.
    """

    def __init__(self, message: str, *, code: ProblemCode = RECORD_CORRUPT) -> None:
        super().__init__(message)
        self.code: ProblemCode = code


class ZipDirectoryRefusedError(RecordFormatError):
    """The member table was read whole and is refused for what it lists (too many members,
    members on top of each other): not an archive cut short."""


#: The most a compressed (deflate) member may inflate to, and by what ratio. torch.save
#: stores members uncompressed; a deflated one is checked only within these bounds.
MAX_INFLATED_BYTES = 256 << 20
MAX_INFLATE_RATIO = 100
#: The largest ``data.pkl`` the deep check reads into memory to scan for globals.
MAX_PICKLE_SCAN_BYTES = 256 << 20
_CDH_SIZE = 46


def parse_directory(tail: bytes, record_length: int) -> list[Member]:
    """Members of a zip archive of ``record_length`` bytes whose last bytes are ``tail``.

    ``tail`` must hold the end-of-central-directory record and the whole central
    directory; raise ``RecordFormatError`` otherwise (never ``struct.error``: every
    field is read inside the bytes at hand, and the entry count is bounded by them).
    """
    try:
        return _parse_directory(tail, record_length)
    except (struct.error, IndexError) as e:
        raise RecordFormatError(f"truncated zip directory ({e})", code=RECORD_TRUNCATED) from None


def _parse_directory(tail: bytes, record_length: int) -> list[Member]:
    tail_start = record_length - len(tail)
    pos = tail.rfind(_EOCD, max(0, len(tail) - 22 - 65535))
    if pos < 0 or len(tail) - pos < 22:
        zeros = len(tail) - len(tail.rstrip(b"\0"))
        if zeros >= 22 or len(tail) < 22:
            # zeros where the archive's end belongs (a size committed before its data), or
            # fewer bytes than the smallest archive: the record was cut short
            raise RecordFormatError(
                f"no zip end-of-central-directory record: the record is cut short (ends in {zeros} zero bytes)"
                if zeros >= 22
                else f"record of {len(tail)} bytes is shorter than any zip archive",
                code=RECORD_TRUNCATED,
            )
        raise RecordFormatError("no zip end-of-central-directory record (not a torch.save archive)")
    (_, _disk, _cd_disk, _n_disk, n_total, cd_size, cd_offset, _clen) = struct.unpack_from(
        "<IHHHHIIH", tail, pos
    )
    if n_total == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        loc = pos - 20
        if loc < 0 or tail[loc : loc + 4] != _EOCD64_LOCATOR:
            raise RecordFormatError("zip64 end-of-central-directory locator missing")
        (_, _d, eocd64_off, _nd) = struct.unpack_from("<IIQI", tail, loc)
        rel = eocd64_off - tail_start
        if rel < 0 or tail[rel : rel + 4] != _EOCD64:
            raise RecordFormatError("zip64 end-of-central-directory record missing")
        (_, _sz, _vm, _vn, _d1, _d2, _n1, n_total, cd_size, cd_offset) = struct.unpack_from(
            "<IQHHIIQQQQ", tail, rel
        )
    rel_cd = cd_offset - tail_start
    if cd_offset + cd_size > record_length or rel_cd < 0:
        raise RecordFormatError(
            f"central directory [{cd_offset}, {cd_offset + cd_size}) does not fit the record "
            f"({record_length} bytes) or the tail read"
        )
    if n_total * _CDH_SIZE > cd_size:
        raise RecordFormatError(f"zip directory claims {n_total} entries in {cd_size} bytes")
    if n_total > MAX_ZIP_MEMBERS:
        raise ZipDirectoryRefusedError(f"zip directory lists {n_total:,} members (more than {MAX_ZIP_MEMBERS:,}: refused unread)")
    members: list[Member] = []
    p = rel_cd
    for _ in range(n_total):
        if tail[p : p + 4] != _CDH or p + _CDH_SIZE > len(tail):
            raise RecordFormatError(f"bad central directory entry at record offset {tail_start + p}")
        (_, _vm, _vn, _flags, method, _t, _d, crc, csize, usize, nlen, xlen, clen, _disk, _ia, _ea,
         lho) = struct.unpack_from("<IHHHHHHIIIHHHHHII", tail, p)  # fmt: skip
        name = tail[p + 46 : p + 46 + nlen].decode("utf-8", "replace")
        extra = tail[p + 46 + nlen : p + 46 + nlen + xlen]
        if 0xFFFFFFFF in (csize, usize, lho):
            usize, csize, lho = _apply_zip64_extra(extra, usize, csize, lho)
        members.append(Member(name, crc, csize, usize, method, lho))
        p += 46 + nlen + xlen + clen
    _check_no_overlap(members)
    return members


def _check_no_overlap(members: list[Member]) -> None:
    """Members sit one after another: each spans at least its 30-byte local header, its name
    and its data, and the next starts after that (a directory of entries that all point at
    the same bytes is one problem, found without reading them)."""
    ordered = sorted(members, key=lambda m: m.local_header_offset)
    end = -1
    overlapping = []
    for m in ordered:
        if m.local_header_offset < end:
            overlapping.append(m)
        end = max(end, m.local_header_offset + 30 + len(m.name.encode()) + m.compressed_size)
    if overlapping:
        raise ZipDirectoryRefusedError(f"{len(overlapping):,} zip member(s) overlap the one before them "
                                f"(e.g. {overlapping[0].name[:100]!r})")  # fmt: skip


def _apply_zip64_extra(extra: bytes, usize: int, csize: int, lho: int) -> tuple[int, int, int]:
    i = 0
    while i + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, i)
        if tag == 0x0001:
            vals = list(struct.unpack_from(f"<{size // 8}Q", extra, i + 4))
            if usize == 0xFFFFFFFF and vals:
                usize = vals.pop(0)
            if csize == 0xFFFFFFFF and vals:
                csize = vals.pop(0)
            if lho == 0xFFFFFFFF and vals:
                lho = vals.pop(0)
            break
        i += 4 + size
    return usize, csize, lho


def data_offset(local_header: bytes, member: Member) -> int:
    """Offset of the member's data from the record start, given its 30+ byte local header."""
    if len(local_header) < 30 or local_header[:4] != _LFH:
        raise RecordFormatError(f"member {member.name}: bad local header signature")
    nlen, xlen = struct.unpack_from("<HH", local_header, 26)
    return member.local_header_offset + 30 + nlen + xlen


@dataclass(frozen=True, slots=True)
class RecordProblem:
    """One thing wrong with a record: a stable code (``core.verify.contract.PROBLEM_CODES``) and a message."""

    code: ProblemCode
    """``crc-mismatch``, ``record-truncated`` or ``record-corrupt``."""
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class HostileGlobal:
    """A global a record's pickle references outside the allow-list (``hostile-pickle``)."""

    where: str
    """The zip member holding the pickle."""
    name: str
    """``module.name`` (``module:dotted.name`` for an attribute chain), or ``<...>`` when it
    cannot be resolved without running the pickle."""

    @property
    def message(self) -> str:
        return f"{self.where}: pickle references {self.name} (not allowed: DCP would run it at load)"

    def __str__(self) -> str:
        return self.message


@dataclass(slots=True)
class RecordFindings:
    """What a deep check of one record found."""

    problems: list[RecordProblem] = field(default_factory=list)
    """Damage: a member CRC-32 mismatch, a record cut short, a malformed zip or pickle."""
    hostile: list[HostileGlobal] = field(default_factory=list)
    """Pickle globals outside the allow-list."""
    writer_globals: set[str] = field(default_factory=set)
    """Globals admitted as the framework's own classes (loading the file runs them)."""
    members_checked: int = 0
    members_without_crc: int = 0

    unlisted: int = 0
    """Problems past ``MAX_LISTED_PROBLEMS``: counted, not listed (``summary``)."""

    def add(self, message: str, code: ProblemCode = RECORD_CORRUPT) -> None:
        self._add(RecordProblem(code, message))

    def add_error(self, error: RecordFormatError, prefix: str = "") -> None:
        self._add(RecordProblem(error.code, f"{prefix}{error}"))

    def _add(self, problem: RecordProblem) -> None:
        if len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems.append(problem)
        else:
            self.unlisted += 1

    def listed(self) -> list[RecordProblem]:
        """The problems to show: the first ``MAX_LISTED_PROBLEMS``, then one line for the rest."""
        if not self.unlisted:
            return list(self.problems)
        more = RecordProblem(self.problems[-1].code, f"... and {self.unlisted:,} more problem(s) (not listed)")
        return [*self.problems, more]


def check_member_crc(member: Member, computed_crc: int, findings: RecordFindings) -> None:
    """Compare a member's recorded CRC with the one computed over its bytes."""
    if member.crc32 == 0 and member.size > 0:
        # torch with compute_crc32=False writes CRC 0: nothing was recorded.
        findings.members_without_crc += 1
        return
    findings.members_checked += 1
    if computed_crc != member.crc32:
        findings.add(
            f"CRC-32 mismatch in record member {member.name}: "
            f"recorded {member.crc32:08x}, computed {computed_crc:08x}",
            CRC_MISMATCH,
        )


#: The most opcodes a pickle scan walks (a torch.save data.pkl of a big model has a few million).
MAX_SCAN_OPCODES = 20_000_000
_UNRESOLVED = ("<unresolvable STACK_GLOBAL>", "")


def pickle_globals(data: bytes, *, max_opcodes: int = MAX_SCAN_OPCODES) -> list[tuple[str, str]]:
    """Every global a pickle references, as ``(module, name)`` exactly as the pickle spells them
    (``name`` may be dotted), found without executing it. An unresolvable ``STACK_GLOBAL``
    (its operands not two strings just pushed) is ``_UNRESOLVED``: never allowed.

    Raises ``RecordFormatError`` if the bytes are not a valid pickle stream or run past
    ``max_opcodes`` (the scan builds nothing, so memory stays bounded by the memo of names).
    """
    found: list[tuple[str, str]] = []
    recent: list[object] = []  # values pushed lately: enough to resolve STACK_GLOBAL
    memo: dict[int, str] = {}  # only strings: what a STACK_GLOBAL may name (bounded by the data)
    memo_next = 0
    memo_ops: set[str] = set()  # MEMOIZE's index counts PUT's keys too: both in one pickle -> unknown
    count = 0
    try:
        for op, arg, _pos in pickletools.genops(data):
            count += 1
            if count > max_opcodes:
                raise RecordFormatError(f"data.pkl has more than {max_opcodes:,} opcodes (refused unscanned)")
            name = op.name
            if name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                found.append((module, attr))
                recent.append(None)
            elif name == "STACK_GLOBAL":
                if len(recent) >= 2 and isinstance(recent[-2], str) and isinstance(recent[-1], str):
                    found.append((str(recent[-2]), str(recent[-1])))
                else:
                    found.append(_UNRESOLVED)
                recent.append(None)
            elif name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE",
                          "SHORT_BINSTRING", "BINSTRING", "STRING"):  # fmt: skip
                recent.append(arg)
            elif name == "MEMOIZE":
                memo_ops.add("MEMOIZE")
                if recent and isinstance(recent[-1], str):
                    memo[memo_next] = recent[-1]
                memo_next += 1
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo_ops.add("PUT")
                if recent and isinstance(recent[-1], str):
                    memo[int(arg)] = recent[-1]  # type: ignore[arg-type]
                else:
                    memo.pop(int(arg), None)  # type: ignore[arg-type]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                recent.append(memo.get(int(arg)) if len(memo_ops) < 2 else None)  # type: ignore[arg-type]
            elif name in ("EXT1", "EXT2", "EXT4"):
                found.append((f"<extension registry code {arg}>", ""))
            else:
                recent.append(None)
            if len(recent) > 8:
                del recent[:-4]
    except (ValueError, IndexError, KeyError) as e:
        raise RecordFormatError(f"data.pkl is not a valid pickle: {e}") from e
    return found


def shown_global(module: str, name: str) -> str:
    """``module.name``; ``module:a.b`` when the name is an attribute chain (so the split shows)."""
    if module.startswith("<"):
        return module
    return f"{module}:{name}" if not name.isidentifier() else f"{module}.{name}"


def scan_pickle(
    data: bytes,
    findings: RecordFindings,
    where: str,
    extra_allowed: frozenset[str],
    writer: frozenset[tuple[str, str]] = frozenset(),
) -> None:
    """Record in ``findings`` any global of ``data`` outside the allow-list (exact globals).

    The opcode shape is checked first (``core.pickle_shape``: lengths inside the data, stack
    height, empty containers, nesting), in a fast pass: a pickle that would cost more to load
    than its size allows is corrupt before the slower global scan reads it.
    """
    try:
        check_shape(data)
    except PickleShapeError as e:
        findings.add(f"{where}: pickle refused before its scan: {e}")
        return
    try:
        names = pickle_globals(data)
    except RecordFormatError as e:
        findings.add_error(e, f"{where}: ")
        return
    for module, name in names:
        if module.startswith("<") or not is_allowed_global(module, name, extra_allowed, writer):
            findings.hostile.append(HostileGlobal(where, shown_global(module, name)))
        elif (module, name) in writer:
            findings.writer_globals.add(f"{module}.{name}")


def inflate_capped(raw: bytes, declared_size: int) -> bytes:
    """Inflate a deflate member, streamed: never past its declared size, the byte cap or the ratio cap."""
    cap = min(declared_size, MAX_INFLATED_BYTES, max(len(raw), 1) * MAX_INFLATE_RATIO)
    d = zlib.decompressobj(-15)
    out = d.decompress(raw, cap + 1)
    if len(out) > cap:
        raise RecordFormatError(
            f"inflates past {cap} bytes (declared {declared_size}; caps {MAX_INFLATED_BYTES >> 20} MiB, "
            f"{MAX_INFLATE_RATIO}x)"
        )
    return out


def _record_directory(record: Any) -> list[Member]:
    """``parse_directory`` of a whole record: from its last 4 KiB when they hold the directory
    (torch.save's is a few hundred bytes), else from its last ``TAIL_READ_BYTES``. A directory
    read whole from a suffix is the one the longer tail gives (same bytes, same end); anything
    short of that is read again from the longer tail, whose result (or error) stands."""
    if len(record) > 4096:
        with contextlib.suppress(RecordFormatError):
            return parse_directory(bytes(record[-4096:]), len(record))
    return parse_directory(bytes(record[-TAIL_READ_BYTES:]), len(record))


def check_record(
    record: Any,
    *,
    extra_allowed: frozenset[str] = frozenset(),
    crc32: Callable[[Any, int], int] = zlib.crc32,
    scan: Callable[[bytes, RecordFindings, str, frozenset[str]], None] | None = None,
) -> tuple[RecordFindings, list[tuple[int, int, int]]]:
    """Deep-check one whole record held in memory (``bytes`` or a ``memoryview``).

    Returns the findings and the member data pieces as ``(start, length, crc32)``
    relative to the record start, for callers assembling a whole-file CRC.
    ``crc32`` may be any implementation of the zip polynomial (ISA-L, zlib-ng);
    ``scan`` any that gives ``scan_pickle``'s findings (the deep check remembers them).
    """
    scan = scan or scan_pickle
    findings = RecordFindings()
    pieces: list[tuple[int, int, int]] = []
    try:
        members = _record_directory(record)
    except RecordFormatError as e:
        findings.add_error(e)
        return findings, pieces
    if not any(m.name.endswith("data.pkl") for m in members):
        findings.add("record has no data.pkl member (not a torch.save archive)")
    for m in members:
        try:
            start = data_offset(bytes(record[m.local_header_offset : m.local_header_offset + 30]), m)
        except RecordFormatError as e:
            findings.add_error(e)
            continue
        end = start + m.compressed_size
        if end > len(record):
            findings.add(f"member {m.name} runs past the end of its record", RECORD_TRUNCATED)
            continue
        raw = record[start:end]
        if m.method == 0:
            data = raw
        elif m.method == 8:
            try:
                data = inflate_capped(bytes(raw), m.size)
            except (zlib.error, RecordFormatError) as e:
                findings.add(f"member {m.name}: cannot inflate: {e}")
                continue
        else:
            findings.add(f"member {m.name}: unsupported compression method {m.method}")
            continue
        crc = crc32(data, 0)
        check_member_crc(m, crc, findings)
        if m.method == 0:
            pieces.append((start, len(raw), crc))
        if m.name.endswith("data.pkl"):
            scan(bytes(data), findings, m.name, extra_allowed)
    return findings, pieces
