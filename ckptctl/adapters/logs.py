"""Log sources for ``ckptctl classify``: expand what the user named, stream its bytes.

What the user can name: files, directories (read recursively), globs (``*``,
``?``, ``[...]``, ``**``), fsspec URLs (``s3://bucket/logs/``, ``memory://...``),
and ``-`` for stdin. Compressed ``.gz`` data is recognised by its magic bytes and
decompressed on the fly. A torchelastic error file (``TORCHELASTIC_ERROR_FILE``,
``error.json``) is decoded so its message and traceback read like log lines.

Reading streams fixed-size blocks of whole lines (``iter_blocks``), so memory
stays constant on multi-GB logs; a line longer than ``max_line_bytes`` is cut
into pieces (each matched separately) rather than buffered. Nothing here
decodes text: the matcher decodes only the few candidate lines.

Every failure is an ``InputError`` or ``StorageError`` with a one-line message:
missing, permission denied, a directory without files, a binary file (an ELF,
an image, a systemd journal: export it with ``journalctl --file``), a broken
gzip stream.
"""

from __future__ import annotations

import fnmatch
import gzip
import os
import posixpath
import re
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import IO, Any

from ckptctl.adapters.storage import Storage
from ckptctl.core.verify import jsonsafe
from ckptctl.errors import CkptctlError, InputError, NotFoundError, StorageError

STDIN = "-"
DEFAULT_BLOCK_BYTES = 8 << 20
DEFAULT_MAX_LINE_BYTES = 1 << 20
#: Bytes looked at to decide whether a file is binary.
SNIFF_BYTES = 64 << 10
#: A torchelastic error file is small; anything bigger is read as a log.
MAX_ERROR_FILE_BYTES = 16 << 20

_GZIP_MAGIC = b"\x1f\x8b"
_JOURNAL_MAGIC = b"LPKSHHRH"
_BINARY_MAGICS = (
    (b"\x7fELF", "an executable (ELF)"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\x28\xb5\x2f\xfd", "a zstd stream (decompress it first: zstdcat FILE | ckptctl classify -)"),
    (b"BZh", "a bzip2 stream (decompress it first: bzcat FILE | ckptctl classify -)"),
    (b"\xfd7zXZ\x00", "an xz stream (decompress it first: xzcat FILE | ckptctl classify -)"),
    (b"\x89PNG", "an image"),
    (b"%PDF", "a PDF"),
)
_GLOB_CHARS = re.compile(r"[*?\[]")
# Bytes that do not occur in text logs (ESC, tab, CR, LF, FF and BS do).
_CONTROL = bytes(b for b in range(32) if b not in (8, 9, 10, 12, 13, 27))


@dataclass(frozen=True, slots=True)
class LogSource:
    """One readable stream of log lines."""

    name: str
    """What the user sees in evidence (``path``, ``s3://...``, ``<stdin>``)."""
    path: str
    """Path inside ``storage`` (empty for stdin)."""
    storage: Storage | None
    size_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Skipped:
    """An input that could not be read, and why (shown to the user, never fatal alone)."""

    source: str
    reason: str


@dataclass(frozen=True, slots=True)
class Block:
    """Whole lines of one source (the last may be a piece of an overlong line)."""

    data: bytes
    fixed_line: int | None = None
    """All lines of this block sit on this line of the file (a decoded JSON error file)."""


# --------------------------------------------------------------------------------------
# Expanding what the user named
# --------------------------------------------------------------------------------------


def expand_sources(specs: list[str]) -> tuple[list[LogSource], list[Skipped]]:
    """The readable sources behind ``specs``, in order, each at most once."""
    sources: list[LogSource] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()

    def add(source: LogSource) -> None:
        if source.name not in seen:
            seen.add(source.name)
            sources.append(source)

    for spec in specs:
        if spec == STDIN:
            add(LogSource(name="<stdin>", path="", storage=None))
            continue
        try:
            for source in _expand_one(spec):
                add(source)
        except CkptctlError as e:
            skipped.append(Skipped(source=spec, reason=e.message))
    return sources, skipped


def _expand_one(spec: str) -> list[LogSource]:
    storage, path = Storage.for_url(spec)
    if _GLOB_CHARS.search(path):
        return _expand_glob(storage, spec, path)
    entry = storage.info(path)
    if entry is None:
        raise NotFoundError(f"{spec}: no such file or directory")
    if not entry.is_dir:
        return [LogSource(name=spec, path=path, storage=storage, size_bytes=entry.size_bytes)]
    found = _walk(storage, path)
    if not found:
        raise InputError(f"{spec}: directory holds no files")
    return [_source_under(storage, spec, path, p, size) for p, size in found]


def _walk(storage: Storage, root: str) -> list[tuple[str, int]]:
    """Every file below ``root`` (sorted; hidden directories included, symlinked dirs not followed)."""
    out: list[tuple[str, int]] = []
    if storage.is_local:
        for dirpath, dirnames, filenames in os.walk(root, onerror=None):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                try:
                    size = os.stat(full).st_size
                except OSError:
                    size = 0
                out.append((full, size))
        return out
    stack = [root]
    while stack:
        current = stack.pop()
        entries = sorted(storage.list_dir(current), key=lambda e: e.path, reverse=True)
        for entry in entries:
            if entry.is_dir:
                stack.append(entry.path)
            else:
                out.append((entry.path, entry.size_bytes))
    out.sort()
    return out


def _expand_glob(storage: Storage, spec: str, pattern: str) -> list[LogSource]:
    if storage.is_local:
        import glob as _glob

        matches = sorted(_glob.glob(pattern, recursive=True))
        local_files = [m for m in matches if os.path.isfile(m)]
        if not local_files:
            raise NotFoundError(f"{spec}: no files match")
        return [
            LogSource(name=f, path=f, storage=storage, size_bytes=os.path.getsize(f))
            for f in local_files
        ]
    # Object stores: list under the literal prefix, then match the whole path.
    first = _GLOB_CHARS.search(pattern)
    assert first is not None
    root = posixpath.dirname(pattern[: first.start()]) or "/"
    regex = _glob_regex(pattern)
    files: list[tuple[str, int]] = [(p, n) for p, n in _walk(storage, root) if regex.match(p)]
    if not files:
        raise NotFoundError(f"{spec}: no files match")
    return [LogSource(name=storage.url(p), path=p, storage=storage, size_bytes=n) for p, n in files]


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` stay inside one path component, ``**`` crosses them."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i : end + 1])[4:-3])
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _source_under(storage: Storage, spec: str, root: str, path: str, size: int) -> LogSource:
    if storage.is_local:
        rel = os.path.relpath(path, root)
        name = os.path.join(spec, rel) if not os.path.isabs(spec) else path
        return LogSource(name=os.path.normpath(name), path=path, storage=storage, size_bytes=size)
    return LogSource(name=storage.url(path), path=path, storage=storage, size_bytes=size)


# --------------------------------------------------------------------------------------
# Hostname from the file's name
# --------------------------------------------------------------------------------------

_KIND_WORDS = r"(?:dmesg|kern|kernel|syslog|messages|journal|journalctl|nvidia-bug-report)"
_HOST_IN_NAME = (
    re.compile(r"^" + _KIND_WORDS + r"[-_.@](?P<host>[A-Za-z0-9][\w.-]*?)(?:\.(?:log|txt|out|gz))*$"),
    re.compile(r"^(?P<host>[A-Za-z0-9][\w.-]*?)[-_.]" + _KIND_WORDS + r"(?:\.(?:log|txt|out|gz))*$"),
)
_GENERIC_NAMES = re.compile(
    r"^(?:" + _KIND_WORDS + r"|stdout|stderr|output|console|err|out)(?:\.\d+)?(?:\.(?:log|txt|out|gz))*$"
)
_NOT_A_HOST = re.compile(
    # words that are not machines: a file's kind, its extension ("dmesg.txt"), a flag ("dmesg-T.txt")
    r"^(?:(?:rank|worker|slurm|job|train|run|attempt|log|logs)[-_]?\d*|txt|out|err|gz|json|[A-Za-z])$", re.I
)


def host_from_name(name: str) -> str | None:
    """The host a log file belongs to, when its name says: ``dmesg-gpu-node-17.log``,
    ``gpu-node-17.kern.log``, ``gpu-node-17/dmesg.txt``. None when it does not."""
    parts = [p for p in re.split(r"[/\\]", name) if p]
    if not parts:
        return None
    base = parts[-1]
    for rx in _HOST_IN_NAME:
        m = rx.match(base)
        if m and not _NOT_A_HOST.match(m["host"]):
            return m["host"]
    if _GENERIC_NAMES.match(base) and len(parts) >= 2 and not _NOT_A_HOST.match(parts[-2]):
        parent = parts[-2]
        # a host name has no underscore (RFC 1123): "xid74_nvlink_error/" is a case folder
        if re.match(r"^[A-Za-z][A-Za-z0-9.-]*\d[A-Za-z0-9.-]*$", parent):
            return parent
    return None


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


def _binary_reason(head: bytes) -> str | None:
    """Why ``head`` (the first bytes) is not a text log, or None if it is one."""
    if head.startswith(_JOURNAL_MAGIC):
        return (
            "binary file (a systemd journal; export it: journalctl --file FILE -o short-iso "
            "> FILE.log)"
        )
    for magic, what in _BINARY_MAGICS:
        if head.startswith(magic):
            return f"binary file ({what})"
    sample = head[:SNIFF_BYTES]
    if not sample:
        return None
    # Text logs may hold a few NULs (a crash leaves NUL-padded syslog blocks), so
    # judge by proportion: more than 10% control bytes is not a log.
    num_control = len(sample) - len(sample.translate(None, _CONTROL))
    if num_control * 10 > len(sample):
        return "binary file (mostly non-text bytes)"
    return None


def _open_raw(source: LogSource, stack: ExitStack, stdin: IO[bytes] | None) -> IO[bytes]:
    if source.storage is None:
        stream = stdin if stdin is not None else sys.stdin.buffer
        return stream
    return stack.enter_context(source.storage.open_read(source.path))


class _Peekable:
    """A reader whose first bytes were already read (to sniff magic numbers)."""

    def __init__(self, head: bytes, rest: Any) -> None:
        self._head = head
        self._rest = rest

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0:
                data = self._head + self._rest.read()
                self._head = b""
                return data
            data, self._head = self._head[:n], self._head[n:]
            if len(data) < n:
                data += self._rest.read(n - len(data))
            return data
        return self._rest.read(n)


def _read_fully(f: Any, n: int) -> bytes:
    """Up to ``n`` bytes (short only at end of stream; raw files may return less)."""
    chunks = []
    remaining = n
    while remaining > 0:
        chunk = f.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def iter_blocks(
    source: LogSource,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    stdin: IO[bytes] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    on_overlong_line: Callable[[], None] | None = None,
) -> Iterator[Block]:
    """Stream ``source`` as blocks of whole lines, in constant memory.

    ``on_bytes`` is told how many (compressed, on-disk) bytes were consumed, for
    progress. Raises ``InputError``/``StorageError`` with a one-line message.
    """
    with ExitStack() as stack:
        try:
            raw = _open_raw(source, stack, stdin)
            counted = _CountingReader(raw, on_bytes)
            guard = _Guarded(counted, piece_bytes=block_bytes)
            head = _read_fully(guard, SNIFF_BYTES)
            reader: Any
            if head.startswith(_GZIP_MAGIC):
                unzipped = gzip.GzipFile(fileobj=_Peekable(head, guard), mode="rb")  # type: ignore[call-overload]
                # Small pieces: a truncated stream loses at most one piece, not a block.
                guard = _Guarded(unzipped, piece_bytes=64 << 10)
                head = _read_fully(guard, SNIFF_BYTES)
            reader = _Peekable(head, guard)
            if guard.error is None or head:
                reason = _binary_reason(head)
                if reason is not None:
                    raise InputError(f"{source.name}: {reason}; skipped")
                if _looks_like_error_file(source.name, head):
                    yield from _error_file_blocks(source, reader)
                else:
                    yield from _line_blocks(reader, block_bytes, max_line_bytes, on_overlong_line)
            if guard.error is not None:
                raise guard.error
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise InputError(f"{source.name}: corrupt or truncated gzip data ({e})") from e
        except CkptctlError:
            raise
        except OSError as e:
            raise _os_error(source, e) from e


class _Guarded:
    """A reader that turns a failure mid-stream into end-of-data, remembering the error.

    Whatever was read before a truncated gzip member or an I/O error is still
    classified; ``iter_blocks`` raises the error after the last good block.
    """

    def __init__(self, raw: Any, *, piece_bytes: int) -> None:
        self._raw = raw
        self._piece = piece_bytes
        self.error: BaseException | None = None

    def read(self, n: int = -1) -> bytes:
        if self.error is not None:
            return b""
        if n < 0:
            n = 1 << 62
        chunks: list[bytes] = []
        remaining = n
        while remaining > 0:
            try:
                chunk = self._raw.read(min(remaining, self._piece))
            except (EOFError, zlib.error, OSError) as e:
                self.error = e
                break
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
            if len(chunks) == 1 and len(chunk) == n:
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _os_error(source: LogSource, e: OSError) -> CkptctlError:
    if isinstance(e, PermissionError):
        return StorageError(f"{source.name}: permission denied")
    if isinstance(e, FileNotFoundError):
        return NotFoundError(f"{source.name}: no such file or directory")
    if isinstance(e, IsADirectoryError):
        return StorageError(f"{source.name}: is a directory")
    return StorageError(f"{source.name}: read failed: {e.strerror or e}")


class _CountingReader:
    def __init__(self, raw: Any, on_bytes: Callable[[int], None] | None) -> None:
        self._raw = raw
        self._on_bytes = on_bytes

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        if self._on_bytes is not None and data:
            self._on_bytes(len(data))
        return bytes(data) if not isinstance(data, bytes) else data


def _line_blocks(
    reader: Any, block_bytes: int, max_line_bytes: int, on_overlong_line: Callable[[], None] | None
) -> Iterator[Block]:
    carry = b""
    while True:
        data = _read_fully(reader, block_bytes)
        if not data:
            if carry:
                # The last line has no newline: add it, so it reads like every other line.
                yield Block(carry + b"\n")
            return
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n")
        if cut == -1:
            if len(buf) < max_line_bytes:
                carry = buf
                continue
            # One line longer than max_line_bytes: hand it over in pieces rather
            # than buffer it (a 10 MB line of base64 must not cost 10 MB per line).
            if on_overlong_line is not None and not carry:
                on_overlong_line()
            yield Block(buf)
            carry = b""
            continue
        yield Block(buf[: cut + 1])
        carry = buf[cut + 1 :]
        if len(carry) >= max_line_bytes:
            if on_overlong_line is not None:
                on_overlong_line()
            yield Block(carry)
            carry = b""


# --------------------------------------------------------------------------------------
# torchelastic error files
# --------------------------------------------------------------------------------------


def _looks_like_error_file(name: str, head: bytes) -> bool:
    return name.endswith(".json") and head.lstrip()[:1] == b"{" and b'"message"' in head


def _error_file_blocks(source: LogSource, reader: Any) -> Iterator[Block]:
    """The message and traceback of a torchelastic error file, or the raw JSON text.

    torchelastic writes ``{"message": {"message": "<Type>: <text>", "extraInfo":
    {"py_callstack": "<traceback>", "timestamp": "..."}}}`` on one line; its text
    is presented as lines that all sit on line 1 of the file.
    """
    data = _read_fully(reader, MAX_ERROR_FILE_BYTES + 1)
    text = ""
    if len(data) <= MAX_ERROR_FILE_BYTES:
        try:
            doc = jsonsafe.loads(data.decode("utf-8", errors="replace"), max_bytes=MAX_ERROR_FILE_BYTES)
        except jsonsafe.JsonError:
            doc = None
        text = _error_file_text(doc)
    if not text:  # not an error file after all: an ordinary log that happens to be JSON
        yield from _line_blocks(_Peekable(data, reader), DEFAULT_BLOCK_BYTES, DEFAULT_MAX_LINE_BYTES, None)
        return
    yield Block(text.encode("utf-8"), fixed_line=1)


def _error_file_text(doc: Any) -> str:
    if not isinstance(doc, dict):
        return ""
    message = doc.get("message")
    parts: list[str] = []
    if isinstance(message, dict):
        extra = message.get("extraInfo")
        if isinstance(extra, dict) and isinstance(extra.get("py_callstack"), str):
            parts.append(extra["py_callstack"])
        if isinstance(message.get("message"), str):
            parts.append(message["message"])
    elif isinstance(message, str):
        parts.append(message)
    return "\n".join(p.rstrip("\n") for p in parts if p) + ("\n" if parts else "")
